"""brb.db: the small SQLite metadata store (OLTP side).

Tables: ``ingestion_runs`` (one row per ingestion with counts and timings), ``contacts``
(resolved names, handles, per-contact stats and batch), ``people`` and ``members`` (everyone in a
chat, with per-person stats, and which chats each takes part in: ``core/contacts/people_db.py``), ``batches`` (content fingerprints that
drive incremental re-embedding) and ``clusters`` (the insights summary for an app). The search
log lives here too (see ``core.search.log``). Message text is never stored in brb.db.

In an encrypted home brb.db is a sealed SQLite image, opened in memory (:func:`open_db`).
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from brb_pipeline.core.crypto import files
from brb_pipeline.core.errors import StoreError

if TYPE_CHECKING:  # polars is slow to import; a one-shot search reads contacts without it
    import polars as pl

SCHEMA = """
CREATE TABLE IF NOT EXISTS ingestion_runs (
    run_id TEXT PRIMARY KEY,
    started_at REAL NOT NULL,
    finished_at REAL,
    status TEXT NOT NULL,              -- running | success | failed | cancelled | interrupted
    snapshot_path TEXT,
    messages INTEGER,
    first_ts TEXT,
    last_ts TEXT,
    timings_json TEXT,
    stats_json TEXT,
    error TEXT
);
CREATE TABLE IF NOT EXISTS contacts (
    contact_id TEXT PRIMARY KEY,
    display_name TEXT NOT NULL,
    name_source TEXT NOT NULL,
    kind TEXT NOT NULL,
    channels_json TEXT NOT NULL,
    handles_json TEXT NOT NULL,
    batch TEXT,
    rank INTEGER,
    messages INTEGER NOT NULL DEFAULT 0,
    sent INTEGER NOT NULL DEFAULT 0,
    received INTEGER NOT NULL DEFAULT 0,
    first_ts TEXT,
    last_ts TEXT,
    avg_response_s_me REAL,
    avg_response_s_them REAL
);
CREATE INDEX IF NOT EXISTS contacts_batch ON contacts(batch);
CREATE TABLE IF NOT EXISTS people (
    person_id TEXT PRIMARY KEY,
    display_name TEXT NOT NULL,
    name_source TEXT NOT NULL,
    nickname TEXT,
    handles_json TEXT NOT NULL,
    channels_json TEXT NOT NULL,
    messages INTEGER NOT NULL DEFAULT 0,
    sent INTEGER NOT NULL DEFAULT 0,
    received INTEGER NOT NULL DEFAULT 0,
    group_messages INTEGER NOT NULL DEFAULT 0,
    first_ts TEXT,
    last_ts TEXT,
    avg_response_s_me REAL,
    avg_response_s_them REAL,
    reactions_sent INTEGER NOT NULL DEFAULT 0,
    reactions_received INTEGER NOT NULL DEFAULT 0,
    reactions_json TEXT
);
CREATE TABLE IF NOT EXISTS members (
    chat_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    contact_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    joined_ts TEXT,                    -- null: there from before the archive shows
    left_ts TEXT,                      -- null: still in
    first_ts TEXT,                     -- their first / last message in the chat
    last_ts TEXT,
    spans_json TEXT,                   -- [[from|null, to|null], ...]: core/contacts/membership.py
    PRIMARY KEY (chat_id, person_id)
);
CREATE INDEX IF NOT EXISTS members_person ON members(person_id);
CREATE TABLE IF NOT EXISTS batches (
    batch TEXT PRIMARY KEY,
    contacts INTEGER NOT NULL,
    messages INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,         -- content hash of the batch's messages now
    embedded_fingerprint TEXT,         -- fingerprint its staged embeddings were made from
    embedding_model TEXT,
    chunks INTEGER,
    loaded_fingerprint TEXT            -- fingerprint of the rows now in brb.duckdb
);
CREATE TABLE IF NOT EXISTS clusters (
    cluster_id INTEGER PRIMARY KEY,
    label TEXT NOT NULL,
    terms_json TEXT,
    size INTEGER NOT NULL,
    top_contacts_json TEXT,
    first_ts TEXT,
    last_ts TEXT,
    label_source TEXT
);
"""


#: How long an opener of brb.db waits for another process to finish with it (seconds).
LOCK_WAIT_S = 30.0
_held: set[tuple[int, str]] = set()  # (thread, lock file) of the sealed databases open here


@contextmanager
def open_db(path: Path, *, timeout_s: float = LOCK_WAIT_S) -> Iterator[sqlite3.Connection]:
    """A connection to the SQLite database at ``path``: committed on success, rolled back on an
    error, closed. Every opener of brb.db goes through here.

    A plaintext home opens the file itself (SQLite's locks; its busy timeout is ``timeout_s``).
    In an encrypted home the file is a sealed image of the database: the opener takes an
    exclusive lock on ``<path>.lock`` (writers in several processes: one at a time), unseals the
    image into an in-memory database and, when the block ends without an error and the database
    changed, writes the new image sealed (fresh nonce, atomic rename). On an error nothing is
    written: the previous file stays as it was. No plaintext page ever reaches the disk.

    Raises:
        StoreError: another process held the lock for ``timeout_s``.
        EncryptionKeyError: the image cannot be unsealed with the home's key.
    """
    path = Path(path)
    key = files.file_key(path)
    if key is None:
        try:
            conn = sqlite3.connect(path, timeout=timeout_s)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open {path} ({e}): check that it is a file you can write") from None
        with _committed(conn):
            yield conn
        return
    with _locked(path, timeout_s):
        old = files.read_bytes(path) if path.exists() else None
        conn = sqlite3.connect(":memory:")
        with _committed(conn):
            if old is not None:
                conn.deserialize(old)
            yield conn
            conn.commit()
            new = conn.serialize()
            if new != old:
                files.write_bytes(path, new)


@contextmanager
def _committed(conn: sqlite3.Connection) -> Iterator[None]:
    try:
        yield
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()


@contextmanager
def _locked(path: Path, timeout_s: float) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<path>.lock`` (waits up to ``timeout_s``)."""
    lock = path.with_name(path.name + ".lock")
    mine = (threading.get_ident(), str(lock))
    if mine in _held:  # the lock is per open file: a nested open would wait on itself
        raise RuntimeError(f"{path.name} opened again inside its own with-block")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StoreError(f"{path} is busy: another brb process has held it for {timeout_s:.0f} s;"
                                     " retry when it finishes") from None
                time.sleep(0.005)
        _held.add(mine)
        yield
    finally:
        _held.discard(mine)
        os.close(fd)  # closing the file releases the lock


@contextmanager
def connect(path: Path, *, create: bool = True) -> Iterator[sqlite3.Connection]:
    """Open brb.db (creating the schema), commit on success, roll back on error."""
    if not create and not path.exists():
        raise StoreError(f"no brb.db at {path}: run `brb ingest` (or `brb demo`) first")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_db(path) as conn:
        try:
            if files.file_key(path) is None:
                conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(SCHEMA)
            _added_columns(conn)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"brb.db at {path} is damaged ({e}): run `brb ingest --rebuild` (it keeps the forgotten list and the search log where they can be read)") from None
        yield conn


#: Columns added to ``people`` and ``members`` after their first release (issue 31: tapbacks per
#: person, membership over time); a store made before gets them empty on its first open.
_ADDED_COLUMNS = {
    "people": {"reactions_sent": "INTEGER NOT NULL DEFAULT 0", "reactions_received": "INTEGER NOT NULL DEFAULT 0",
               "reactions_json": "TEXT"},
    "members": {"joined_ts": "TEXT", "left_ts": "TEXT", "first_ts": "TEXT", "last_ts": "TEXT", "spans_json": "TEXT"},
}


def _added_columns(c: sqlite3.Connection) -> None:
    for table, cols in _ADDED_COLUMNS.items():
        have = {r[1] for r in c.execute(f"PRAGMA table_info({table})")}
        for name, typ in cols.items():
            if name not in have:
                c.execute(f"ALTER TABLE {table} ADD COLUMN {name} {typ}")


#: Columns added to ``ingestion_runs`` after its first release: which process runs it (so a run
#: whose process is gone is reported "interrupted", never "running") and its check warnings.
_RUN_COLUMNS = {"pid": "INTEGER", "process_start": "TEXT", "host": "TEXT", "warnings_json": "TEXT"}


def _run_columns(c: sqlite3.Connection) -> None:
    have = {r[1] for r in c.execute("PRAGMA table_info(ingestion_runs)")}
    for name, typ in _RUN_COLUMNS.items():
        if name not in have:
            c.execute(f"ALTER TABLE ingestion_runs ADD COLUMN {name} {typ}")


def process_start(pid: int) -> str | None:
    """An identity for the running process ``pid`` (its start time), None when no such process.

    A pid alone is reused by the system; pid plus start time names one process.
    """
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            # field 22 (starttime), counted after the parenthesised command name
            return "proc:" + stat.read_text().rsplit(")", 1)[1].split()[19]
        except (OSError, IndexError):
            return None
    import subprocess

    try:
        out = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return "ps:" + out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def process_alive(pid: int | None, started: str | None) -> bool:
    """Whether the process recorded as (pid, start identity) still runs (here)."""
    return bool(pid) and process_start(int(pid)) == started


def start_run(path: Path, snapshot_path: str | None = None) -> str:
    import socket

    run_id = uuid.uuid4().hex[:12]
    pid = os.getpid()
    with connect(path) as c:
        _run_columns(c)
        c.execute(
            "INSERT INTO ingestion_runs (run_id, started_at, status, snapshot_path, pid, process_start, host) "
            "VALUES (?, ?, 'running', ?, ?, ?, ?)",
            (run_id, time.time(), snapshot_path, pid, process_start(pid), socket.gethostname()),
        )
    return run_id


def settle_dead_runs(path: Path) -> list[str]:
    """Mark runs whose process on this machine is gone (killed, crashed, powered off) "interrupted".

    Returns:
        The run ids marked.
    """
    import socket

    if not path.exists():
        return []
    host = socket.gethostname()
    with connect(path) as c:
        _run_columns(c)
        rows = c.execute("SELECT run_id, pid, process_start, host FROM ingestion_runs WHERE status = 'running'").fetchall()
        dead = [r[0] for r in rows if (r[3] in (None, host)) and not process_alive(r[1], r[2])]
        c.executemany(
            "UPDATE ingestion_runs SET status = 'interrupted', finished_at = NULL, "
            "error = 'the process ended without finishing (killed or crashed); the previous store is intact' "
            "WHERE run_id = ?", [(r,) for r in dead])
    return dead


def set_run_warnings(path: Path, run_id: str, warnings: list[dict[str, Any]]) -> None:
    with connect(path) as c:
        _run_columns(c)
        c.execute("UPDATE ingestion_runs SET warnings_json = ? WHERE run_id = ?", (json.dumps(warnings), run_id))


def finish_run(path: Path, run_id: str, *, status: str, messages: int | None = None,
               first_ts: str | None = None, last_ts: str | None = None,
               timings: Mapping[str, float] | None = None, stats: Mapping[str, Any] | None = None,
               error: str | None = None) -> None:
    with connect(path) as c:
        c.execute(
            """UPDATE ingestion_runs SET finished_at = ?, status = ?, messages = COALESCE(?, messages),
               first_ts = COALESCE(?, first_ts), last_ts = COALESCE(?, last_ts),
               timings_json = COALESCE(?, timings_json), stats_json = COALESCE(?, stats_json), error = ?
               WHERE run_id = ?""",
            (time.time(), status, messages, first_ts, last_ts,
             json.dumps(timings) if timings else None, json.dumps(stats) if stats else None, error, run_id),
        )


def update_run_stats(path: Path, run_id: str, *, messages: int, first_ts: str | None, last_ts: str | None,
                     stats: Mapping[str, Any]) -> None:
    with connect(path) as c:
        c.execute(
            "UPDATE ingestion_runs SET messages = ?, first_ts = ?, last_ts = ?, stats_json = ? WHERE run_id = ?",
            (messages, first_ts, last_ts, json.dumps(stats), run_id),
        )


def last_run(path: Path, *, status: str | None = None) -> dict | None:
    if not path.exists():
        return None
    with connect(path) as c:
        c.row_factory = sqlite3.Row
        q = "SELECT * FROM ingestion_runs"
        args: tuple = ()
        if status:
            q += " WHERE status = ?"
            args = (status,)
        row = c.execute(q + " ORDER BY started_at DESC LIMIT 1", args).fetchone()
        return dict(row) if row else None


def last_run_stat(path: Path, key: str) -> Any:
    """``key`` of the stats of the newest successful run that recorded it (None if none did)."""
    if not path.exists():
        return None
    with connect(path) as c:
        row = c.execute(
            "SELECT json_extract(stats_json, '$.' || ?) FROM ingestion_runs WHERE status = 'success'"
            " AND json_extract(stats_json, '$.' || ?) IS NOT NULL ORDER BY started_at DESC LIMIT 1",
            (key, key)).fetchone()
        return row[0] if row else None


def replace_contacts(path: Path, contacts: pl.DataFrame) -> None:
    """Replace the contacts table with ``contacts`` (contacts joined with stats and batches)."""
    def iso(v):
        return v.isoformat() if v is not None else None

    rows = [
        (
            r["contact_id"], r["display_name"], r["name_source"], r["kind"],
            json.dumps(r["channels"] or []), json.dumps(r["handles"] or []), r.get("batch"), r.get("rank"),
            r.get("messages") or 0, r.get("sent") or 0, r.get("received") or 0,
            iso(r.get("first_ts")), iso(r.get("last_ts")), r.get("avg_response_s_me"), r.get("avg_response_s_them"),
        )
        for r in contacts.iter_rows(named=True)
    ]
    with connect(path) as c:
        c.execute("DELETE FROM contacts")
        c.executemany("INSERT INTO contacts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)


def contact_rows(path: Path) -> list[dict[str, Any]]:
    """All contacts as dicts in rank order (handles/channels decoded to lists)."""
    with connect(path) as c:
        cur = c.execute("SELECT * FROM contacts ORDER BY rank")
        cols = [d[0] for d in cur.description]
        data = [dict(zip(cols, r)) for r in cur.fetchall()]
    for d in data:
        d["handles"] = json.loads(d.pop("handles_json"))
        d["channels"] = json.loads(d.pop("channels_json"))
    return data


def read_contacts(path: Path) -> pl.DataFrame:
    """All contacts as a frame (handles/channels decoded to lists)."""
    import polars as pl

    data = contact_rows(path)
    if not data:
        return pl.DataFrame(schema={"contact_id": pl.Utf8, "display_name": pl.Utf8, "batch": pl.Utf8,
                                    "handles": pl.List(pl.Utf8)})
    return pl.DataFrame(data, infer_schema_length=None)


def sync_batches(path: Path, batches: pl.DataFrame, embed_keys: Mapping[str, str] | None = None
                 ) -> dict[str, list[str]]:
    """Record the current batches (batch, contacts, messages, fingerprint).

    Args:
        batches: frame with batch, contacts, messages, fingerprint.
        embed_keys: batch -> the key its embeddings must have been made with (fingerprint plus
            model and chunking settings); defaults to the fingerprint.

    Returns:
        ``{"changed": [...], "unchanged": [...], "removed": [...]}`` where *changed* batches are
        new or were embedded from other content or settings than now.
    """
    keys = dict(embed_keys or {})
    now = {r["batch"]: r for r in batches.iter_rows(named=True)}
    with connect(path) as c:
        old = {b: (fp, efp) for b, fp, efp in c.execute("SELECT batch, fingerprint, embedded_fingerprint FROM batches")}
        removed = sorted(set(old) - set(now))
        c.executemany("DELETE FROM batches WHERE batch = ?", [(b,) for b in removed])
        for b, r in now.items():
            c.execute(
                """INSERT INTO batches (batch, contacts, messages, fingerprint) VALUES (?, ?, ?, ?)
                   ON CONFLICT(batch) DO UPDATE SET contacts = excluded.contacts, messages = excluded.messages,
                   fingerprint = excluded.fingerprint""",
                (b, r["contacts"], r["messages"], r["fingerprint"]),
            )
    changed = sorted(b for b, r in now.items() if old.get(b, (None, None))[1] != keys.get(b, r["fingerprint"]))
    return {"changed": changed, "unchanged": sorted(set(now) - set(changed)), "removed": removed}


def get_batch(path: Path, batch: str) -> dict | None:
    with connect(path) as c:
        c.row_factory = sqlite3.Row
        row = c.execute("SELECT * FROM batches WHERE batch = ?", (batch,)).fetchone()
        return dict(row) if row else None


def all_batches(path: Path) -> list[dict]:
    with connect(path) as c:
        c.row_factory = sqlite3.Row
        return [dict(r) for r in c.execute("SELECT * FROM batches ORDER BY batch")]


def mark_embedded(path: Path, batch: str, fingerprint: str, model: str, chunks: int) -> None:
    with connect(path) as c:
        c.execute(
            "UPDATE batches SET embedded_fingerprint = ?, embedding_model = ?, chunks = ? WHERE batch = ?",
            (fingerprint, model, chunks, batch),
        )


def mark_loaded(path: Path, fingerprints: Mapping[str, str | None]) -> None:
    with connect(path) as c:
        c.executemany("UPDATE batches SET loaded_fingerprint = ? WHERE batch = ?",
                      [(fp, b) for b, fp in fingerprints.items()])


def replace_clusters(path: Path, summary: pl.DataFrame) -> None:
    rows = []
    for r in summary.iter_rows(named=True):
        rows.append((
            int(r["cluster_id"]), r["label"], json.dumps(r.get("terms") or []), int(r["size"]),
            json.dumps(r.get("top_contacts") or []), _iso(r.get("first_ts")), _iso(r.get("last_ts")),
            r.get("label_source"),
        ))
    with connect(path) as c:
        c.execute("DELETE FROM clusters")
        c.executemany("INSERT INTO clusters VALUES (?,?,?,?,?,?,?,?)", rows)


def count_clusters(path: Path) -> int:
    if not path.exists():
        return 0
    with connect(path) as c:
        return c.execute("SELECT count(*) FROM clusters WHERE cluster_id >= 0").fetchone()[0]


def _iso(v: Any) -> str | None:
    if v is None:
        return None
    return v.isoformat() if hasattr(v, "isoformat") else str(v)


def reset_embedded(path: Path, batches: list[str]) -> None:
    """Forget that these batches were embedded, so the next run re-chunks and re-embeds them and
    loads the new vectors (same fingerprint, new vectors: the store's rows are stale too)."""
    with connect(path) as c:
        c.executemany("UPDATE batches SET embedded_fingerprint = NULL, loaded_fingerprint = NULL WHERE batch = ?",
                      [(b,) for b in batches])
