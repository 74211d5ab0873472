"""Progress reporting and cancellation shared by the assets, the CLI and host apps.

Six stages, each 0-100% independently: snapshot, parsing, chunking, embedding, saving, analyzing.
A :class:`Progress` fans updates out to sinks (rich bars in a terminal, JSON lines for a host
app, Dagster logs in the UI). A :class:`CancelToken` is checked at batch boundaries.
"""

from __future__ import annotations

import json
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
    def stage(self, stage: str, percent: float, message: str, stats: dict[str, Any]) -> None: ...
    def log(self, level: str, message: str) -> None: ...


class Progress:
    """Fan-out of stage progress. Percentages never go backwards within one run."""

    def __init__(self, sinks: list[Sink] | None = None) -> None:
        self.sinks = list(sinks or [])
        self.percent = {s: 0.0 for s in STAGES}
        self._lock = threading.Lock()

    def update(self, stage: str, percent: float, message: str = "", **stats: Any) -> None:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        with self._lock:
            p = max(self.percent[stage], min(100.0, max(0.0, float(percent))))
            self.percent[stage] = p
            for s in self.sinks:
                s.stage(stage, p, message, stats)

    def log(self, level: str, message: str) -> None:
        for s in self.sinks:
            s.log(level, message)


class JsonlSink:
    """Writes one complete JSON object per line to ``out`` (a host app reads it)."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._lock = threading.Lock()

    def emit(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, ensure_ascii=False, default=str)
        with self._lock:
            self.out.write(line + "\n")
            self.out.flush()

    def stage(self, stage: str, percent: float, message: str, stats: dict[str, Any]) -> None:
        self.emit({"type": "stage_progress", "stage": stage, "percent": round(percent, 1),
                   "message": message, "stats": stats})

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
        self.bars.update(self.tasks[stage], completed=percent, msg=message[:60])

    def log(self, level: str, message: str) -> None:
        if level in ("warning", "error"):
            self.console.print(f"[{'yellow' if level == 'warning' else 'red'}]{message}")


class CancelToken:
    """Set by a signal, a cancel file or a host's stdin message; checked between batches."""

    def __init__(self, cancel_file: Path | None = None) -> None:
        self._event = threading.Event()
        self.cancel_file = cancel_file
        self.reason = ""

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
            if self._event.is_set():  # second Ctrl-C: stop now
                raise KeyboardInterrupt
            self.cancel(signal.Signals(signum).name)
            print(f"brb - {signal.Signals(signum).name}: stopping at the next batch boundary", file=sys.stderr)

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


class Stopwatch:
    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def __call__(self) -> float:
        return round(time.perf_counter() - self.t0, 3)
