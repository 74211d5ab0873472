"""Search log in the metadata DB (``brb.db``, table ``search_log``).

The log holds the user's queries, so it lives beside their data (cleared by ``clear_log`` and by
deleting ``brb.db``) and never goes to the Dagster event log or to application logs.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.metadata import open_db

_DDL = """
CREATE TABLE IF NOT EXISTS search_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts TEXT NOT NULL,              -- ISO 8601 UTC
    query TEXT NOT NULL,
    mode TEXT NOT NULL,
    model TEXT,
    contact_ids TEXT NOT NULL,     -- JSON list of routed contact ids
    results TEXT NOT NULL,         -- JSON list of [chunk_id, score]
    latency_ms REAL NOT NULL
)
"""


@contextmanager
def _open(db_path: Path) -> Iterator[sqlite3.Connection]:
    """brb.db with the search log table (see :func:`brb_pipeline.core.metadata.open_db`)."""
    with open_db(Path(db_path), timeout_s=5.0) as con:
        try:
            con.execute(_DDL)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot write the search log in {Path(db_path).name}: {exc}") from None
        yield con


def log_search(
    db_path: Path,
    *,
    query: str,
    mode: str,
    model: str | None,
    contact_ids: Sequence[str] = (),
    results: Sequence[tuple[str, float]] = (),
    latency_ms: float,
    ts: datetime | None = None,
) -> int:
    """Append one search. Returns the row id.

    Args:
        results: ``(chunk_id, score)`` best first.
        latency_ms: end-to-end search time in milliseconds.
    """
    ts = (ts or datetime.now(timezone.utc)).astimezone(timezone.utc)
    with _open(db_path) as con:
        cur = con.execute(
            "INSERT INTO search_log (ts, query, mode, model, contact_ids, results, latency_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                ts.isoformat(timespec="milliseconds"),
                query,
                mode,
                model,
                json.dumps(list(contact_ids)),
                json.dumps([[cid, round(float(s), 6)] for cid, s in results]),
                float(latency_ms),
            ),
        )
        return int(cur.lastrowid)


def read_log(db_path: Path, limit: int = 50) -> list[dict]:
    """The latest ``limit`` searches, newest first, JSON columns decoded."""
    if not Path(db_path).exists():
        return []
    with _open(db_path) as con:
        rows = con.execute(
            "SELECT id, ts, query, mode, model, contact_ids, results, latency_ms FROM search_log "
            "ORDER BY id DESC LIMIT ?",
            (int(limit),),
        ).fetchall()
    return [
        {
            "id": r[0], "ts": r[1], "query": r[2], "mode": r[3], "model": r[4],
            "contact_ids": json.loads(r[5]), "results": [tuple(x) for x in json.loads(r[6])],
            "latency_ms": r[7],
        }
        for r in rows
    ]  # fmt: skip


def clear_log(db_path: Path) -> int:
    """Delete every logged search. Returns rows deleted."""
    if not Path(db_path).exists():
        return 0
    with _open(db_path) as con:
        n = con.execute("DELETE FROM search_log").rowcount
        con.commit()
        con.execute("VACUUM")  # the queries are the user's words: do not leave them in free pages
        return int(n)
