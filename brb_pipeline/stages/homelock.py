"""One writer per home: an exclusive ``flock`` on ``<home>/ingest.lock``.

Every run that writes the home's stages holds it: `brb ingest` (and `brb demo`), the Dagster
runs the UI and its automation start (through the ``brb`` resource every asset
takes, see ``orchestration/resources.py``), `brb reindex` and `brb forget`. A second writer waits for
the first, saying so once ("another ingest (pid N, started T) is running; waiting, Ctrl-C to
stop"), or is refused at once (``wait=False``: `brb ingest --no-wait`).

A lock of a killed process needs no clean-up: the kernel releases a ``flock`` when its process
dies, so the next writer takes it over at once (the file still names the dead holder, which
only a live holder's message ever shows). The lock is re-entrant within a process: the CLI
holds it around a whole ingestion and each of that ingestion's Dagster runs takes it again.
The file holds the holder's pid, start time and command, never anything about messages.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from brb_pipeline.config.home import Home
from brb_pipeline.core.errors import BrbError, CancelledError

POLL_S = 0.2

_held: dict[str, list] = {}  # resolved lock path -> [fd, depth]
_guard = threading.Lock()


class HomeBusyError(BrbError):
    """Another process holds the home's writer lock (and the caller would not wait)."""


def lock_path(home: Path) -> Path:
    return Home(Path(home)).ingest_lock


def holder(home: Path) -> dict:
    """What the lock file says about its (last) holder: ``pid``, ``started`` (epoch), ``what``."""
    try:
        return json.loads(lock_path(home).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def busy_message(home: Path, what: str = "ingest") -> str:
    h = holder(home)
    started = datetime.fromtimestamp(h["started"]).strftime("%Y-%m-%d %H:%M:%S") if h.get("started") else "?"
    return f"another {h.get('what') or what} (pid {h.get('pid', '?')}, started {started}) is running on {home}"


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _acquire(path: Path, what: str, wait: bool, on_wait: Callable[[str], None] | None,
             cancelled: Callable[[], bool] | None) -> int:
    """Open and lock ``path`` (polling, so a cancel is seen while waiting); the fd."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        told = False
        while not _try(fd):
            if not wait:
                raise HomeBusyError(f"{busy_message(path.parent, what)}; try again when it ends "
                                    "(or leave out --no-wait to wait for it)")
            if not told and on_wait is not None:
                on_wait(f"{busy_message(path.parent, what)}; waiting, Ctrl-C to stop")
                told = True
            if cancelled is not None and cancelled():
                raise CancelledError("stopped while waiting for the other run; nothing was changed")
            time.sleep(POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "started": time.time(), "what": what}).encode(), 0)
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextmanager
def hold(home: Path, *, what: str = "ingest", wait: bool = True, on_wait: Callable[[str], None] | None = None,
         cancelled: Callable[[], bool] | None = None) -> Iterator[None]:
    """Hold the home's writer lock for the block (re-entrant in this process).

    Args:
        home: the home dir (created if missing).
        what: how the holder is named to a process that finds the lock taken.
        wait: wait for a holder to finish; False raises :class:`HomeBusyError` at once.
        on_wait: told once, in one line, that this process is waiting and for whom.
        cancelled: polled while waiting; True raises :class:`CancelledError`.
    """
    key = str(lock_path(home).resolve())
    with _guard:
        entry = _held.get(key)
        if entry is not None:
            entry[1] += 1
    if entry is None:
        fd = _acquire(lock_path(home), what, wait, on_wait, cancelled)
        with _guard:
            entry = _held[key] = [fd, 1]
    try:
        yield
    finally:
        with _guard:
            entry[1] -= 1
            last = entry[1] == 0
            if last:
                del _held[key]
        if last:
            os.close(entry[0])  # closing the only descriptor releases the flock


def held_here(home: Path) -> bool:
    """Whether this process holds the home's lock."""
    return str(lock_path(home).resolve()) in _held
