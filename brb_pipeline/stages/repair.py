"""Damaged stores: find which file is damaged, and rebuild it from what the home still holds.

``brb.duckdb`` is derived: every row comes from a staged partition (``staging/embeddings``), so a
damaged one is deleted and loaded again from them, indexes and all (:func:`rebuild_store`); a
batch whose partition is gone too is marked for the next ingestion to embed again. ``brb.db`` is
the home's bookkeeping: a damaged one is replaced by a fresh one that keeps what can still be
read of the two tables nothing else can give back, the forgotten list and the search log
(:func:`rebuild_db`); the next ingestion fills the rest from the snapshot or the sources.

Damage is what a reader cannot read: a checksum or AES tag that fails, a page SQLite calls
malformed. A missing or wrong key is not damage (it is checked first and named as such).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import duckdb

from brb_pipeline.core import metadata
from brb_pipeline.core.errors import BrbError, EncryptionKeyError, StoreError
from brb_pipeline.core.store import duck
from brb_pipeline.keys import provider as keys
from brb_pipeline.config.settings import Settings
from brb_pipeline.privacy.forgotten import forgotten_copy

log = logging.getLogger("brb")

#: Tables of brb.db kept across a rebuild (everything else is made again by an ingestion).
KEPT_TABLES = ("forgotten", "search_log")
def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"


def damaged_store_error(s: Settings, e: BaseException) -> StoreError:
    """The one-line error for a DuckDB error raised while reading the store: it is damaged."""
    return StoreError(f"{s.duckdb_path} is damaged ({_first_line(e)}): run `brb reindex` to rebuild it from staging")


def store_damage(s: Settings, full: bool = True) -> str | None:
    """Why ``brb.duckdb`` cannot be read, or None when it reads (or is absent).

    Args:
        full: read every column of every table (every block's checksum is verified); False only
            opens it and reads its statistics, as `brb status` does.

    Raises:
        EncryptionKeyError: the home's key is missing or wrong (that is not damage).
    """
    if not s.duckdb_path.exists():
        return None
    keys.data_key(s.home)
    try:
        con = duck.connect(s.duckdb_path, read_only=True)
        try:
            if full:
                read_every_block(con)
            from brb_pipeline.core.store.chunks import store_stats

            store_stats(con)
        finally:
            con.close()
    except (duckdb.Error, BrbError) as e:  # a key error here: the key is right (checked above), the file is not
        if "in use by another" in str(e):  # a lock is not damage: never rebuild a store someone has open
            raise
        return _first_line(e)
    return None


def read_every_block(con: Any) -> None:
    """Read every column of every table of an open store, so DuckDB verifies every block's
    checksum (or AES tag); raises the DuckDB error of the first that fails."""
    tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = "
                                        "current_database() AND schema_name = 'main'").fetchall()]
    for t in tables:
        con.execute(f'SELECT count(*), max(hash(COLUMNS(*))) FROM "{t}"').fetchall()


def db_damage(s: Settings) -> str | None:
    """Why ``brb.db`` cannot be read, or None when SQLite's integrity check passes (or it is absent).

    Raises:
        EncryptionKeyError: the home's key is missing or wrong.
    """
    if not s.brb_db.exists():
        return None
    keys.data_key(s.home)
    try:
        with metadata.open_db(s.brb_db) as con:
            bad = [r[0] for r in con.execute("PRAGMA quick_check").fetchall() if r[0] != "ok"]
    except EncryptionKeyError as e:  # the key is right (checked above): the sealed image is damaged
        return _first_line(e)
    except (sqlite3.Error, StoreError) as e:
        return _first_line(e)
    return f"integrity check: {bad[0][:160]}" if bad else None


def _drop_store_files(s: Settings) -> None:
    from brb_pipeline.stages.store import discard_next

    discard_next(s)
    for p in (s.duckdb_path, s.duckdb_path.with_name(s.duckdb_path.name + ".wal")):
        p.unlink(missing_ok=True)


def rebuild_store(s: Settings) -> dict[str, Any]:
    """Replace ``brb.duckdb`` by a store loaded from every staged partition, both indexes built.

    Returns:
        ``chunks`` loaded, and ``batches_to_embed``: batches whose partition is gone (the next
        `brb ingest` embeds them again).
    """
    from brb_pipeline.stages.store import run_load, run_text_index, run_vector_index

    _drop_store_files(s)
    missing = mark_missing_partitions(s)
    meta = run_load(s)
    run_vector_index(s)
    run_text_index(s)
    return {"chunks": int(meta.get("chunks", 0)), "batches_to_embed": len(missing)}


def mark_missing_partitions(s: Settings) -> list[str]:
    """Batches brb.db calls embedded whose staged partition is gone: marked to embed again."""

    gone = [b["batch"] for b in metadata.all_batches(s.brb_db)
            if b.get("embedded_fingerprint") and not s.paths.partition(b["batch"]).exists()]
    if gone:
        metadata.reset_embedded(s.brb_db, gone)
    return gone


def prepare_store_rebuild(s: Settings) -> None:
    """Delete ``brb.duckdb`` so the next load rebuilds it from every staged partition (and the
    batches whose partition is gone are embedded again)."""
    _drop_store_files(s)
    mark_missing_partitions(s)


def _salvage(db: Path) -> tuple[dict[str, list[tuple]], dict[str, list[str]], list[str]]:
    """The rows of :data:`KEPT_TABLES` that can still be read: (rows, columns, tables lost)."""
    rows: dict[str, list[tuple]] = {}
    cols: dict[str, list[str]] = {}
    lost: list[str] = []
    try:
        with metadata.open_db(db) as con:
            for t in KEPT_TABLES:
                try:
                    if not con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone():
                        continue
                    cur = con.execute(f'SELECT * FROM "{t}"')
                    rows[t], cols[t] = cur.fetchall(), [d[0] for d in cur.description]
                except sqlite3.Error:
                    lost.append(t)
    except (sqlite3.Error, BrbError):
        lost = list(KEPT_TABLES)
    return rows, cols, lost


def rebuild_db(s: Settings) -> dict[str, Any]:
    """Replace a damaged ``brb.db`` by a fresh one holding what could be read of the forgotten
    list and the search log; the next ingestion registers the rest from the snapshot/sources.

    Returns:
        Rows kept per table and the tables that could not be read (``lost``).
    """
    from brb_pipeline.privacy.forgotten import FORGOTTEN_DDL
    from brb_pipeline.core.search.log import _DDL as SEARCH_LOG_DDL

    rows, cols, lost = _salvage(s.brb_db)
    copy = forgotten_copy(s)
    if copy and ("forgotten" in lost or not rows.get("forgotten")):
        rows["forgotten"], cols["forgotten"] = copy, ["kind", "digest"]
        lost = [t for t in lost if t != "forgotten"]
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(s.brb_db) + suffix).unlink(missing_ok=True)
    with metadata.connect(s.brb_db) as c:
        c.execute(FORGOTTEN_DDL)
        c.executescript(SEARCH_LOG_DDL)
        for t, data in rows.items():
            have = {r[1] for r in c.execute(f'PRAGMA table_info("{t}")')}
            names = [n for n in cols[t] if n in have]
            idx = [cols[t].index(n) for n in names]
            c.executemany(f'INSERT OR IGNORE INTO "{t}" ({",".join(names)}) VALUES ({",".join("?" * len(names))})',
                          [tuple(r[i] for i in idx) for r in data])
    _drop_store_files(s)  # its bookkeeping (which batches it holds) went with brb.db
    if "forgotten" in lost:
        log.warning("brb - the forgotten list in the damaged brb.db could not be read: people forgotten "
                    "before may come back at this ingestion; forget them again")
    return {"kept": {t: len(v) for t, v in rows.items()}, "lost": lost}
