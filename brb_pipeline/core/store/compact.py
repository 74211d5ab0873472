"""Rewrite ``brb.duckdb`` into a fresh file without some contacts' rows.

A DuckDB ``DELETE`` only marks rows: the deleted texts and vectors stay in the file's row groups
(compressed or not) until the table is rewritten, and ``pragma_storage_info`` still counts them.
Forgetting a person therefore copies the kept rows into a new file, rebuilds both indexes there
and swaps the new file in with one rename, so the old blocks leave the home with the old file.
The copy of an encrypted store is encrypted with the same key (:func:`.duck.attach`).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from brb_pipeline.core.store import duck
from brb_pipeline.core.store import index as index_mod
from brb_pipeline.core.store.duck import META_DDL, get_meta, table_exists
from brb_pipeline.core.store.chunks import stored_facts
from brb_pipeline.core.memory.tables import PROFILES_DDL, TOPICS_DDL
from brb_pipeline.core.store import line_index, topic_index
from brb_pipeline.core.store.schema import table_ddl

log = logging.getLogger(__name__)

_NEW = "brb_compact"


def _sidecars(path: Path) -> list[Path]:
    return [path.with_name(path.name + ".wal"), path.with_name(path.name + ".tmp")]


def _remove(paths: Iterable[Path]) -> None:
    """Delete files and folders (``.tmp`` is DuckDB's spill folder) that may not exist."""
    for p in paths:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def compact_without(path: Path, contact_ids: Iterable[str]) -> int:
    """Replace the store at ``path`` by a fresh copy without the chunks of ``contact_ids``.

    The ``chunks`` rows that are kept (and their ``line_vectors``) and the ``meta`` table are
    copied into ``<path>.compact``;
    the HNSW and BM25 indexes that existed are rebuilt there with the same parameters; the file
    is checkpointed, closed and renamed over ``path``, and a leftover ``<path>.wal`` removed. A
    failure before the rename leaves the old store as it was (the half-written copy is removed).

    Args:
        path: ``brb.duckdb``.
        contact_ids: contacts whose chunks are dropped.

    Returns:
        Chunks dropped.
    """
    path = Path(path)
    doomed = sorted(set(contact_ids))
    new = path.with_name(path.name + ".compact")
    _remove([new, *_sidecars(new)])
    con = duck.connect(path, read_only=True)
    try:
        if not table_exists(con, "chunks"):
            con.close()
            con = None
            return 0
        dim = int(stored_facts(con)[1])  # meta's dim, else the column type's
        had_hnsw, had_fts = index_mod.hnsw_present(con), index_mod.fts_present(con)
        hnsw = dict(get_meta(con, "hnsw") or {})
        cols = [r[0] for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND table_name = 'chunks' ORDER BY column_index").fetchall()]
        collist = ", ".join(f'"{c}"' for c in cols)
        duck.attach(con, new, _NEW)  # encrypted under the same key when the home is
        con.execute(f"USE {_NEW}")
        con.execute(table_ddl(dim))
        con.execute(META_DDL)
        before = int(con.execute(f"SELECT count(*) FROM {duck.CATALOG}.main.chunks").fetchone()[0])
        con.execute(
            f"INSERT INTO chunks ({collist}) SELECT {collist} FROM {duck.CATALOG}.main.chunks "
            "WHERE contact_id IS NULL OR contact_id NOT IN (SELECT unnest(?::VARCHAR[]))", [doomed])
        kept = int(con.execute("SELECT count(*) FROM chunks").fetchone()[0])
        if table_exists(con, "meta", duck.CATALOG):
            # index facts are written again by the rebuilds below
            con.execute(f"INSERT INTO meta SELECT * FROM {duck.CATALOG}.main.meta WHERE key NOT IN ('hnsw', 'fts')")
        topics_kept = _copy_memory(con, doomed, dim)
        if table_exists(con, line_index.LINE_VECTORS, duck.CATALOG):
            line_index.copy_kept(con, duck.CATALOG)  # the kept chunks' line vectors only
        con.execute("CHECKPOINT")
        con.execute(f"USE {duck.CATALOG}")
        con.execute(f"DETACH {_NEW}")
    except BaseException:
        if con is not None:
            con.close()
        _remove([new, *_sidecars(new)])
        raise
    con.close()
    try:
        con = duck.connect(new)
        try:
            if kept and had_hnsw:
                index_mod.build_hnsw(con, m=hnsw.get("m", 16), ef_construction=hnsw.get("ef_construction", 128),
                                     metric=hnsw.get("metric", "cosine"))
            if kept and had_fts:
                index_mod.build_fts(con)
            if topics_kept:
                topic_index.rebuild_kept(con, m=hnsw.get("m", 16), ef_construction=hnsw.get("ef_construction", 128))
            con.execute("CHECKPOINT")
        finally:
            con.close()
    except BaseException:
        _remove([new, *_sidecars(new)])
        raise
    os.replace(new, path)
    _remove([*_sidecars(path), *_sidecars(new)])
    log.info("Saving - store rewritten without %d chunks (%d kept)", before - kept, kept)
    return before - kept


def _copy_memory(con, doomed: list[str], dim: int) -> int:
    """Copy the distilled memory without the doomed contacts: their topics, their profile and the
    topics' vectors stay behind in the old file. Returns the topic vectors kept."""
    for table, ddl in (("topics", TOPICS_DDL), ("profiles", PROFILES_DDL)):
        if table_exists(con, table, duck.CATALOG):
            con.execute(ddl)
            con.execute(f"INSERT INTO {table} SELECT * FROM {duck.CATALOG}.main.{table} "
                        "WHERE contact_id IS NULL OR contact_id NOT IN (SELECT unnest(?::VARCHAR[]))", [doomed])
    vectors = topic_index.TOPIC_VECTORS
    if not (table_exists(con, vectors, duck.CATALOG) and table_exists(con, "topics", _NEW)):
        return 0
    con.execute(topic_index.vectors_ddl(dim))
    con.execute(f"INSERT INTO {vectors} SELECT * FROM {duck.CATALOG}.main.{vectors} "
                "WHERE topic_id IN (SELECT topic_id FROM topics)")
    return int(con.execute(f"SELECT count(*) FROM {vectors}").fetchone()[0])
