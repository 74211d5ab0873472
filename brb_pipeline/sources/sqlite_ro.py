"""Open source databases strictly read-only, with one-line errors a user can act on."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping, Set
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import polars as pl

from brb_pipeline.core.records.handles import DEFAULT_REGION
from brb_pipeline.core.errors import (
    CancelledError,
    DatabaseLockedError,
    NotADatabaseError,
    SourceMissingError,
    UnknownSchemaError,
)
from brb_pipeline.core.records import MESSAGE_SCHEMA, ReadResult

_SQLITE_MAGIC = b"SQLite format 3\x00"


#: How long a reader waits for a source database another app holds locked.
LOCK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class FileIO:
    """How the snapshot's own files are read and written when they are not plain files (an
    encrypted home seals them; the pipeline passes one in, None means plain files).

    Attributes:
        read: ``read(path) -> bytes``, the file's plaintext.
        write: ``write(path, data)``, atomically; ``data`` is bytes or a list of buffers.
    """

    read: Callable[[Path], bytes]
    write: Callable[[Path, Any], None]


def memory_image(conn: sqlite3.Connection) -> list[bytes | memoryview]:
    """The bytes of a database (its pages read in one read transaction, WAL frames included) as
    parts to write one after the other, marked as a rollback-journal one: a WAL-mode database
    says WAL in its header (bytes 18-19), which an in-memory database cannot open. Only the
    100-byte header is copied to patch it: the body stays the one buffer ``serialize`` made (a
    chat.db can be hundreds of MB)."""
    image = conn.serialize()
    if image[18:20] != b"\x02\x02":
        return [image]
    head = bytearray(image[:100])
    head[18:20] = b"\x01\x01"  # what PRAGMA journal_mode=DELETE writes into a file's header
    return [bytes(head), memoryview(image)[100:]]


def open_readonly(
    path: str | Path,
    *,
    what: str = "database",
    required: Mapping[str, Set[str]] | None = None,
    timeout_s: float = LOCK_TIMEOUT_S,
    io: FileIO | None = None,
) -> sqlite3.Connection:
    """Open an SQLite file with ``mode=ro`` and check it looks like what we expect.

    Args:
        path: the database file.
        what: how to name it in errors ("chat.db", "AddressBook", ...).
        required: table name -> columns that must exist (by name; column order is ignored).
        timeout_s: how long to wait on a lock before giving up.
        io: read the file through this (a sealed snapshot copy): its plaintext is opened as an
            in-memory database, never written to disk.

    Raises:
        SourceMissingError, NotADatabaseError, DatabaseLockedError, UnknownSchemaError.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise SourceMissingError(f"{what} not found at {p}: check the path")
    if p.is_dir():
        raise NotADatabaseError(f"{what} at {p} is a folder, not an SQLite file")
    try:
        data = io.read(p) if io is not None else None
        if data is None:
            with p.open("rb") as fh:
                head = fh.read(16)
        else:
            head = data[:16]
    except PermissionError as e:
        raise SourceMissingError(
            f"{what} at {p} is not readable ({e.strerror}); on macOS grant Full Disk Access to your terminal"
        ) from None
    if head != _SQLITE_MAGIC:
        raise NotADatabaseError(f"{what} at {p} is not an SQLite database")
    try:
        if data is not None:
            conn = sqlite3.connect(":memory:", check_same_thread=False)
            conn.deserialize(data)
            del data
        else:
            conn = sqlite3.connect(p.resolve().as_uri() + "?mode=ro", uri=True, timeout=timeout_s,
                                   check_same_thread=False)
        conn.execute("PRAGMA query_only = ON")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.OperationalError as e:
        if "locked" in str(e) or "busy" in str(e):
            raise DatabaseLockedError(
                f"{what} at {p} is locked by another process; close the app writing it or retry"
            ) from None
        raise NotADatabaseError(f"{what} at {p} cannot be read as SQLite ({e})") from None
    except sqlite3.DatabaseError as e:
        raise NotADatabaseError(f"{what} at {p} is not a valid SQLite database ({e})") from None
    for table, cols in (required or {}).items():
        if table not in tables:
            conn.close()
            raise UnknownSchemaError(f"{what} at {p} has no table {table!r}: is this really a {what}?")
        have = table_columns(conn, table)
        missing = set(cols) - have
        if missing:
            conn.close()
            raise UnknownSchemaError(
                f"{what} at {p}: table {table!r} lacks columns {sorted(missing)} (unsupported version?)"
            )
    return conn


def table_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """Column names of ``table`` (empty set when it does not exist)."""
    return {r[1] for r in conn.execute("SELECT * FROM pragma_table_info(?)", (table,))}


def translate_sqlite_error(e: sqlite3.Error, what: str, path: Path) -> Exception:
    """Map an sqlite3 error raised mid-read to our one-line error types."""
    msg = str(e)
    if "Could not decode" in msg:  # sqlite3 quotes the value itself: a message's text never goes further
        column = msg.split("column ", 1)[-1].split(" with text", 1)[0] if "column " in msg else "a column"
        return NotADatabaseError(f"{what} at {path} could not be read (a value in column {column} is not "
                                 "valid UTF-8)")
    if "locked" in msg or "busy" in msg:
        return DatabaseLockedError(f"{what} at {path} is locked by another process; retry when it is idle")
    if "no such column" in msg or "no such table" in msg:
        return UnknownSchemaError(f"{what} at {path}: {msg} (unsupported version?)")
    return NotADatabaseError(f"{what} at {path} could not be read ({msg})")


@contextmanager
def closed_on_error(conn: sqlite3.Connection, what: str, path: Path) -> Iterator[sqlite3.Connection]:
    """Run the block on ``conn``; if it raises, close ``conn``, and turn SQLite errors into the
    one-line source error naming ``what`` at ``path``."""
    try:
        yield conn
    except sqlite3.Error as e:
        conn.close()
        raise translate_sqlite_error(e, what, path) from None
    except BaseException:
        conn.close()
        raise


class BlockReader:
    """What the block readers (iMessage, WhatsApp) share: their options and the read-only
    connection they close on exit. Subclasses open it in ``__enter__``.

    Args:
        path: the store (normally the snapshot copy, never written).
        default_region: region for phone handles without a country code.
        cancel: polled between blocks; returning True raises CancelledError.
        progress: called as ``progress(rows_done, rows_total)`` after each block.
        chunk_rows: source rows fetched per block (bounds memory held in Python tuples).
        timeout_s: how long to wait on a lock when opening.
        io: how to read a sealed snapshot copy (see :class:`FileIO`); None for a plain file.
    """

    def __init__(
        self,
        path: Path,
        *,
        default_region: str = DEFAULT_REGION,
        cancel: Callable[[], bool] | None = None,
        progress: Callable[[int, int], None] | None = None,
        chunk_rows: int = 10_000,
        timeout_s: float = LOCK_TIMEOUT_S,
        io: FileIO | None = None,
    ) -> None:
        self.path = Path(path).expanduser()
        self.region = default_region
        self.cancel = cancel
        self.progress = progress
        self.chunk_rows = chunk_rows
        self.timeout_s = timeout_s
        self.io = io
        self._conn: sqlite3.Connection | None = None
        self._done = False

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def result(self) -> ReadResult:
        """Chats, stats and warnings of the whole read; ``messages`` is empty (the blocks held them).

        Raises:
            RuntimeError: before :meth:`blocks` was exhausted.
        """
        if not self._done:
            raise RuntimeError(f"{type(self).__name__}.result() before every block was read")
        chats, warnings = self._summary()
        return ReadResult(messages=pl.DataFrame(schema=MESSAGE_SCHEMA), chats=chats, stats=dict(self.stats),
                          warnings=warnings)

    def _summary(self) -> tuple[pl.DataFrame, list[str]]:
        """(chats, warnings) once every block was read; logs the reader's summary."""
        raise NotImplementedError

    def _fetch_blocks(self, sql: str, what: str, cancelled: str,
                      convert: Callable[[list[tuple]], pl.DataFrame]) -> Iterator[pl.DataFrame]:
        """``convert(rows)`` for each ``chunk_rows`` rows of ``sql``: cancel polled before each fetch,
        ``progress(done, self.total)`` after each block, SQLite errors as one-line source errors
        naming ``what``; a cancel raises ``cancelled.format(done=..., total=...)``. :meth:`result` is
        allowed once the last block was read."""
        if self._conn is None:
            raise RuntimeError(f"{type(self).__name__}.blocks() outside its with-block")
        total = getattr(self, "total", 0)
        done = 0
        try:
            cur = self._conn.execute(sql)
            if self.progress is not None:
                self.progress(0, total)
            while True:
                if self.cancel is not None and self.cancel():
                    raise CancelledError(cancelled.format(done=done, total=total))
                rows = cur.fetchmany(self.chunk_rows)
                if not rows:
                    break
                done += len(rows)
                block = convert(rows)
                if self.progress is not None:
                    self.progress(done, total)
                yield block
        except sqlite3.Error as e:
            raise translate_sqlite_error(e, what, self.path) from None
        self._done = True


def stat_warnings(stats: Mapping[str, int], templates: Mapping[str, str]) -> list[str]:
    """One warning per non-zero counter: ``templates`` maps a stats key to a message with ``{n}``."""
    return [msg.format(n=stats[key]) for key, msg in templates.items() if stats.get(key)]
