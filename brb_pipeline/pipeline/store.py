"""Unpartitioned store stages: load every embedded partition into brb.duckdb, then build the
HNSW and BM25 indexes once, after the load."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from brb_pipeline.core import duck, metadata
from brb_pipeline.core.index import build_fts, build_hnsw, index_status
from brb_pipeline.core.store import LoadMemoryError, load_partitions, partition_path, store_stats
from brb_pipeline.pipeline import paths
from brb_pipeline.pipeline.embed import drop_retired
from brb_pipeline.settings import Settings

log = logging.getLogger("brb")

GENERATION = "store_generation"  # bumped on every load that changed rows; indexes record theirs


def run_load(s: Settings) -> dict[str, Any]:
    """Replace the rows of changed partitions, drop partitions that no longer exist.

    Partitions are loaded when their staged embeddings differ from what the store holds; when
    the staged embeddings come from another model than the store's, everything is reloaded
    (vectors of two models never share an index). After a load the retired vectors (kept for
    batches embedded in the same ingestion) are deleted: they hold message text.
    """
    t0 = time.perf_counter()
    batches = {b["batch"]: b for b in metadata.all_batches(s.brb_db)}
    con = duck.connect(s.duckdb_path, memory_limit=s.duckdb_load_memory_limit)
    try:
        stored = store_stats(con).get("batches", {}) or {}
        stored_model = duck.get_meta(con, "embedding_model")
        models = {b["embedding_model"] for b in batches.values() if b.get("embedding_model")}
        if len(models) > 1:
            log.warning("Saving - staged partitions come from %d models; waiting for re-embedding", len(models))
        model = sorted(models)[0] if models else None
        replace_all = bool(stored_model and model and stored_model != model)
        todo = {
            b: partition_path(s.staging_dir, b)
            for b, row in batches.items()
            if row.get("embedded_fingerprint")
            and (replace_all or row.get("loaded_fingerprint") != row["embedded_fingerprint"] or b not in stored)
            and partition_path(s.staging_dir, b).exists()
        }
        remove = sorted(set(stored) - set(batches))
        if not todo and not remove:
            drop_retired(s)
            return {"changed": False, "chunks": int(sum(stored.values())), "seconds": round(time.perf_counter() - t0, 3),
                    "embedding_model": str(stored_model), "staged_files_pruned": prune_partitions(s, set(batches))}
        try:
            report = load_partitions(con, todo, remove_batches=remove, replace_all=replace_all)
        except LoadMemoryError:
            # Rows far wider than usual: correctness first, the memory bound second.
            log.warning("Saving - the load needs more than duckdb_load_memory_limit=%s; loading without it",
                        s.duckdb_load_memory_limit)
            con.close()
            con = duck.connect(s.duckdb_path)
            report = load_partitions(con, todo, remove_batches=remove, replace_all=replace_all)
        gen = int(duck.get_meta(con, GENERATION, 0) or 0) + 1
        duck.set_meta(con, GENERATION, gen)
        stats = store_stats(con)
    finally:
        con.close()
    metadata.mark_loaded(s.brb_db, {b: batches[b]["embedded_fingerprint"] for b in todo})
    drop_retired(s)
    pruned = prune_partitions(s, set(batches))
    if replace_all:
        log.warning("Saving - embedding model changed (%s -> %s): the whole store was reloaded", stored_model, model)
    meta = {
        "changed": True,
        "partitions_loaded": len(todo),
        "partitions_removed": len(remove),
        "staged_files_pruned": pruned,
        "replaced_all_for_model_change": replace_all,
        "chunks": int(stats.get("chunks", 0)),
        "embedding_model": str(model),
        "generation": gen,
        "rows_inserted": report.inserted,
        "rows_deleted": report.deleted,
        "load_seconds": round(report.seconds, 3),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return meta


def prune_partitions(s: Settings, keep: set[str]) -> int:
    """Delete the staged files of batches that no longer exist: they hold message text that no
    stage reads any more. Returns the number of files removed."""
    n = 0
    for key, files in paths.staged_batch_files(s).items():
        if key not in keep:
            for f in files:
                f.unlink(missing_ok=True)
                n += 1
    return n


def _index_stage(s: Settings, kind: str, build: Callable[[Any], Any], force: bool = False) -> dict[str, Any]:
    """Build one index unless it is present and covers exactly the stored rows.

    Every load drops both indexes in its transaction, so a present, non-stale index was built
    after the last change of the store.
    """
    t0 = time.perf_counter()
    con = duck.connect(s.duckdb_path)
    try:
        status = index_status(con)
        info = status.get(kind, {})
        if info.get("present") and not info.get("stale") and not force:
            return {"rebuilt": False, "reason": "store unchanged since the last build",
                    "rows": int(info.get("rows") or 0), "seconds": round(time.perf_counter() - t0, 3)}
        if status["store_rows"] == 0:
            return {"rebuilt": False, "reason": "empty store", "rows": 0, "seconds": round(time.perf_counter() - t0, 3)}
        report = build(con)
    finally:
        con.close()
    meta: dict[str, Any] = {"rebuilt": True, "rows": report.rows, "seconds": round(report.seconds, 3),
                            "embedding_model": str(status.get("embedding_model"))}
    meta.update({f"param_{k}": v for k, v in report.params.items() if isinstance(v, (int, float, str))})
    return meta


def run_vector_index(s: Settings, force: bool = False) -> dict[str, Any]:
    """HNSW (cosine) over the chunk embeddings, rebuilt only when the store changed (or forced)."""
    return _index_stage(s, "hnsw", lambda con: build_hnsw(con, m=s.hnsw_m, ef_construction=s.hnsw_ef_construction),
                        force)


def run_text_index(s: Settings, force: bool = False) -> dict[str, Any]:
    """BM25 over chunk text (multilingual settings), rebuilt only when the store changed (or forced)."""
    return _index_stage(s, "fts", build_fts, force)
