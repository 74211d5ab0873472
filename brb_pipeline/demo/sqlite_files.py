"""Create a fresh SQLite file from a schema script (demo and test stores)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path


def write_fresh(path: Path, schema_sql: Path, fill: Callable[[sqlite3.Connection], None]) -> None:
    """Replace ``path`` (and its -wal/-shm/-journal) with a new database: schema, then ``fill``
    inside one transaction."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.executescript(schema_sql.read_text())
        with conn:
            fill(conn)
    finally:
        conn.close()
