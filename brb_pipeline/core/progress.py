"""Progress reporting and cancellation shared by the assets, the CLI and host apps.

Six stages, each 0-100% independently: snapshot, parsing, chunking, embedding, saving, analyzing.
A :class:`Progress` fans updates out to sinks (rich bars in a terminal, JSON lines for a host
app, Dagster logs in the UI). A stage that counts what it does (messages parsed, chunks embedded)
passes ``count``: its updates then carry a rate per second and an ETA in seconds. The name of
the person being processed travels as ``current_contact`` (never message text). A
:class:`CancelToken` is checked at batch boundaries.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

from brb_pipeline.core.errors import CancelledError

STAGES = ("snapshot", "parsing", "chunking", "embedding", "saving", "analyzing")


class Sink(Protocol):
    """Where progress goes. A sink with ``takes_current_contact = True`` also gets
    ``current_contact=`` (a keyword) in :meth:`stage`; one with ``takes_python_logs = True`` also
    gets the warnings of Python ``logging`` (see :meth:`Progress.forward_logs`)."""

    def stage(self, stage: str, percent: float, message: str, stats: dict[str, Any]) -> None: ...
    def log(self, level: str, message: str) -> None: ...


#: Rate and ETA appear once a stage has run this long (a first group's rate is noise).
MIN_RATE_S = 1.0
#: Loggers whose warnings a run forwards to sinks that see nothing else (JSON lines).
FORWARDED_LOGGERS = ("brb", "brb_pipeline")


class StageMeter:
    """Elapsed time, rate and ETA of one stage, measured from its first update.

    ``rate_per_s`` is units counted per second since the first update; ``eta_s`` extrapolates the
    stage's percent over the same span, ``elapsed * (100 - p) / (p - p0)``, so time spent between
    counted units (a batch's chunking between two embeddings) is part of the estimate.
    """

    def __init__(self, t0: float, percent0: float, count0: float | None) -> None:
        self.t0, self.percent0, self.count0 = t0, percent0, count0

    def stats(self, now: float, percent: float, count: float | None, unit: str) -> dict[str, Any]:
        elapsed = max(0.0, now - self.t0)
        out: dict[str, Any] = {"elapsed_s": round(elapsed, 2)}
        if count is None:
            return out
        if percent >= 100:
            out["eta_s"] = 0.0
        if elapsed < MIN_RATE_S:
            return out
        out["rate_per_s"] = round((count - (self.count0 or 0)) / elapsed, 1)
        out["rate_unit"] = unit
        gained = percent - self.percent0
        if percent < 100 and gained > 0:
            out["eta_s"] = round(elapsed * (100 - percent) / gained, 1)
        return out


class Progress:
    """Fan-out of stage progress. Percentages never go backwards within one run.

    Args:
        sinks: where updates go.
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(self, sinks: list[Sink] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.sinks = list(sinks or [])
        self.percent = {s: 0.0 for s in STAGES}
        self.clock = clock
        self._meters: dict[str, StageMeter] = {}
        self._lock = threading.Lock()

    def update(self, stage: str, percent: float, message: str = "", *, current_contact: str | None = None,
               count: float | None = None, unit: str = "", **stats: Any) -> None:
        """Report ``stage`` at ``percent`` (0-100).

        Args:
            message: a short status line (no message text).
            current_contact: display name of the contact being processed, or a batch key.
            count: units done so far in this stage, all of it (not per batch); gives the rate
                and ETA in the stats.
            unit: what ``count`` counts ("messages", "chunks").
            **stats: counts a host app shows (``chunks_done``, ``contacts_total``, ...).
        """
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        with self._lock:
            p = max(self.percent[stage], min(100.0, max(0.0, float(percent))))
            self.percent[stage] = p
            now = self.clock()
            meter = self._meters.setdefault(stage, StageMeter(now, p, count))
            if meter.count0 is None and count is not None:  # counting began after the first update
                meter.t0, meter.percent0, meter.count0 = now, p, count
            stats = {**stats, **meter.stats(now, p, count, unit)}
            for s in self.sinks:
                if getattr(s, "takes_current_contact", False):
                    s.stage(stage, p, message, stats, current_contact=current_contact)
                else:
                    s.stage(stage, p, message, stats)

    def log(self, level: str, message: str, *, python_log: bool = False) -> None:
        """Send a log line to the sinks; one from Python ``logging`` (``python_log``) only to
        those that see nothing else (``takes_python_logs``), since stderr already shows it."""
        for s in self.sinks:
            if python_log and not getattr(s, "takes_python_logs", False):
                continue
            s.log(level, message)

    def forward_logs(self, names: tuple[str, ...] = FORWARDED_LOGGERS,
                     level: int = logging.WARNING) -> Callable[[], None]:
        """Forward records of these loggers at ``level`` or above to the sinks as log lines (from
        any thread) until the returned function is called."""
        handler = _LogForwarder(self, level)
        loggers = [logging.getLogger(n) for n in names]
        for lg in loggers:
            lg.addHandler(handler)

        def stop() -> None:
            for lg in loggers:
                lg.removeHandler(handler)

        return stop


class _LogForwarder(logging.Handler):
    def __init__(self, progress: Progress, level: int) -> None:
        super().__init__(level)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: logging's own error path
            self.handleError(record)
            return
        level = "error" if record.levelno >= logging.ERROR else record.levelname.lower()
        self.progress.log(level, message, python_log=True)


def eta_text(seconds: float) -> str:
    """``95`` -> ``1m35s``; ``3725`` -> ``1h02m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class JsonlSink:
    """Writes one complete JSON object per line to ``out`` (a host app reads it)."""

    takes_python_logs = True  # stdout holds nothing but these lines: warnings must come this way
    takes_current_contact = True

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._lock = threading.Lock()

    def emit(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, ensure_ascii=False, default=str)
        with self._lock:
            self.out.write(line + "\n")
            self.out.flush()

    def stage(self, stage: str, percent: float, message: str, stats: dict[str, Any],
              current_contact: str | None = None) -> None:
        self.emit({"type": "stage_progress", "stage": stage, "percent": round(percent, 1),
                   "message": message, "stats": stats, "current_contact": current_contact})

    def log(self, level: str, message: str) -> None:
        self.emit({"type": "log", "level": level, "message": message})


class LoggerSink:
    """Forwards progress to a logger-like object (Dagster's context.log in the UI)."""

    def __init__(self, logger: Any, min_step: float = 25.0) -> None:
        self.logger = logger
        self.min_step = min_step
        self._last: dict[str, float] = {}

    def stage(self, stage: str, percent: float, message: str, stats: dict[str, Any]) -> None:
        if percent >= 100 or percent - self._last.get(stage, -100) >= self.min_step:
            self._last[stage] = percent
            self.logger.info(f"{stage.capitalize()} - {percent:.0f}% {message}".rstrip())

    def log(self, level: str, message: str) -> None:
        getattr(self.logger, level if level in ("debug", "info", "warning", "error") else "info")(message)


class RichSink:
    """Six rich progress bars on stderr."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress as RichProgress, TaskProgressColumn, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True)
        self.bars = RichProgress(
            TextColumn("{task.description:>10}"), BarColumn(), TaskProgressColumn(),
            TimeElapsedColumn(), TextColumn("{task.fields[msg]}"), console=self.console,
        )
        self.tasks = {s: self.bars.add_task(s, total=100, msg="") for s in STAGES}

    def __enter__(self) -> "RichSink":
        self.bars.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bars.stop()

    def stage(self, stage: str, percent: float, message: str, stats: dict[str, Any]) -> None:
        self.bars.update(self.tasks[stage], completed=percent, msg=bar_text(message, stats))

    def log(self, level: str, message: str) -> None:
        if level in ("warning", "error"):
            self.console.print(f"[{'yellow' if level == 'warning' else 'red'}]{message}")


def bar_text(message: str, stats: dict[str, Any]) -> str:
    """A stage bar's text: the message, then the rate and ETA when the stage measures them."""
    extra = []
    if "rate_per_s" in stats:
        extra.append(f"{stats['rate_per_s']:,.0f} {stats.get('rate_unit') or 'items'}/s")
    if stats.get("eta_s"):
        extra.append(f"ETA {eta_text(stats['eta_s'])}")
    return " - ".join([message[:60], *extra]) if extra else message[:60]


class CancelToken:
    """Set by a signal, a cancel file or a host's stdin message; checked between batches."""

    def __init__(self, cancel_file: Path | None = None) -> None:
        self._event = threading.Event()
        self.cancel_file = cancel_file
        self.reason = ""
        self.urgent = False  # a second signal: do not wait for the running step

    def cancel(self, reason: str = "cancelled") -> None:
        self.reason = reason
        self._event.set()

    @property
    def cancelled(self) -> bool:
        if not self._event.is_set() and self.cancel_file is not None and self.cancel_file.exists():
            self.cancel("cancel file present")
        return self._event.is_set()

    def __call__(self) -> bool:
        return self.cancelled

    def check(self) -> None:
        if self.cancelled:
            raise CancelledError(f"cancelled ({self.reason}); the previous complete store, indexes and map are intact")

    def install_signal_handlers(self) -> Callable[[], None]:
        """Route SIGINT/SIGTERM to this token; returns a function restoring the old handlers."""
        old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum: int, _frame: Any) -> None:
            if self._event.is_set():  # second signal: stop now (the caller watches ``urgent``)
                self.urgent = True
                return
            self.cancel(signal.Signals(signum).name)
            print(f"brb - {signal.Signals(signum).name}: stopping (a second signal stops at once)", file=sys.stderr)

        for sig in old:
            signal.signal(sig, handler)
        return lambda: [signal.signal(s, h) for s, h in old.items()]

    def watch_stdin(self) -> None:
        """Cancel when a host app writes ``{"type": "cancel"}`` (or ``cancel``) on stdin."""

        def run() -> None:
            for line in sys.stdin:
                text = line.strip()
                if text == "cancel" or '"cancel"' in text:
                    self.cancel("cancel message on stdin")
                    return

        threading.Thread(target=run, daemon=True, name="brb-stdin-cancel").start()
