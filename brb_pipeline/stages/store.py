"""Unpartitioned store stages: load every embedded partition, build the HNSW and BM25 indexes
once after the load, then publish the result.

Nothing writes brb.duckdb in place. A load copies the store to ``brb.duckdb.next``
(:func:`paths.store_next`) and changes the copy; the two index stages build their index in the
copy; the stage that finds both built replaces brb.duckdb with the copy in one rename
(:func:`publish`). So a run killed or failed at any point leaves the previous store and both its
indexes in brb.duckdb (every search mode keeps answering from it), and the next load discards the
leftover copy and starts again from the store. brb.db learns which partitions the store holds
(``loaded_fingerprint``) only after the rename, so partitions loaded by a run that died before it
are loaded again. A search that has the old file open keeps reading it; a load never waits for it.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from brb_pipeline.core import faults, metadata
from brb_pipeline.core.memory.tables import load_memory
from brb_pipeline.core.store import duck, line_index
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.progress import Progress
from brb_pipeline.core.store.index import build_fts, build_hnsw, index_status
from brb_pipeline.core.store.line_index import index_lines, line_index_due
from brb_pipeline.core.store.topic_index import index_topics, topic_index_due
from brb_pipeline.core.store.chunks import LoadMemoryError, load_partitions, store_stats
from brb_pipeline.privacy.forget import drop_retired
from brb_pipeline.stages.memory import memory_files
from brb_pipeline.config.settings import Settings

log = logging.getLogger("brb")

GENERATION = "store_generation"  # bumped on every load that changed rows; indexes record theirs
PENDING_LOADED = "pending_loaded"  # meta of the staging copy: batch -> fingerprint it was loaded from
MEMORY_KEY = "memory_key"  # what the topics and profiles tables were loaded from (stages.memory)


def _wal(p: Path) -> Path:
    return p.with_name(p.name + ".wal")


def discard_next(s: Settings, keep_lines: bool = True) -> bool:
    """Delete a staging copy of the store (left by a killed or failed run). Returns whether one existed.

    With ``keep_lines`` its message-line vectors are first added to the resume file
    (:func:`.line_index.save_for_resume`), so the next index build does not embed them again; a
    copy that cannot be read loses them (logged), never the discard."""
    nxt = s.paths.store_next
    existed = nxt.exists()
    if existed and keep_lines:
        _keep_lines(s, nxt)
    for f in (nxt, _wal(nxt)):
        f.unlink(missing_ok=True)
    shutil.rmtree(nxt.with_name(nxt.name + ".tmp"), ignore_errors=True)  # DuckDB's spill folder
    return existed


def _keep_lines(s: Settings, nxt: Path) -> None:
    t0 = time.perf_counter()
    try:
        con = duck.connect(nxt)
        try:
            kept = line_index.save_for_resume(con, s.paths.lines_resume, s.duckdb_path)
        finally:
            con.close()
    except (StoreError, duckdb.Error, OSError) as exc:
        log.warning("Saving - the message-line vectors of an unfinished run were not kept (%s)", type(exc).__name__)
        return
    if kept:
        log.info("Saving - kept the message-line vectors of %d chunks from an unfinished run (%.1f s)", kept,
                 time.perf_counter() - t0)


def _begin_update(s: Settings) -> Path:
    """A fresh staging copy of the store (an empty path when there is no store yet)."""
    discard_next(s)
    nxt = s.paths.store_next
    if s.duckdb_path.exists():
        shutil.copyfile(s.duckdb_path, nxt)
        if _wal(s.duckdb_path).exists():  # committed but not checkpointed: replayed when the copy opens
            shutil.copyfile(_wal(s.duckdb_path), _wal(nxt))
    return nxt


def fsync(path: Path) -> None:
    """Flush a file (or a folder's entries) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(s: Settings) -> dict[str, Any] | None:
    """Replace brb.duckdb with the staging copy once both its indexes cover it (or it is empty).

    Returns:
        ``{"rows", "generation"}`` when it published; None when there is no copy or an index is
        still missing in it.
    """
    nxt = s.paths.store_next
    if not nxt.exists():
        return None
    con = duck.connect(nxt)
    try:
        status = index_status(con)
        if not (status["ready"] or status["store_rows"] == 0):
            return None
        loaded = duck.get_meta(con, PENDING_LOADED) or {}
        gen = duck.get_meta(con, GENERATION, 0)
        duck.set_meta(con, PENDING_LOADED, None)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    if _wal(nxt).exists():
        raise StoreError(f"the new store {nxt.name} did not close cleanly; it was not published: rerun `brb ingest`")
    fsync(nxt)
    _wal(s.duckdb_path).unlink(missing_ok=True)  # its content is in the copy
    os.replace(nxt, s.duckdb_path)
    fsync(s.home)
    faults.point("published")
    if loaded:
        metadata.mark_loaded(s.brb_db, loaded)
    log.info("Saving - published the new store: %d chunks, generation %s", status["store_rows"], gen)
    return {"rows": int(status["store_rows"]), "generation": gen}


def _stored(s: Settings) -> tuple[dict[str, int], str | None, str | None]:
    """Chunks per batch, the embedding model and the memory key of the published store."""
    if not s.duckdb_path.exists():
        return {}, None, None
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        return (store_stats(con).get("batches", {}) or {}, duck.get_meta(con, "embedding_model"),
                duck.get_meta(con, MEMORY_KEY))
    finally:
        con.close()


def run_load(s: Settings, progress: Progress | None = None) -> dict[str, Any]:
    """Load changed partitions into a staging copy of the store, drop partitions that no longer exist.

    Partitions are loaded when their staged embeddings differ from what the store holds; when
    the staged embeddings come from another model than the store's, everything is reloaded
    (vectors of two models never share an index). The copy becomes the store when the index
    stages have built both indexes in it (:func:`publish`). After a load the retired vectors
    (kept for batches embedded in the same ingestion) are deleted: they hold message text.

    ``progress`` gets the first part of the saving stage (the indexes report the rest).
    """
    if progress:
        progress.update("saving", 5, "loading partitions")
    meta = _load(s)
    if progress:
        progress.update("saving", 40, f"{meta.get('chunks', 0):,} chunks stored")
    return meta


def _load(s: Settings) -> dict[str, Any]:
    t0 = time.perf_counter()
    batches = {b["batch"]: b for b in metadata.all_batches(s.brb_db)}
    stored, stored_model, stored_memory = _stored(s)
    models = {b["embedding_model"] for b in batches.values() if b.get("embedding_model")}
    if len(models) > 1:
        log.warning("Saving - staged partitions come from %d models; waiting for re-embedding", len(models))
    model = sorted(models)[0] if models else None
    replace_all = bool(stored_model and model and stored_model != model)
    todo = {
        b: s.paths.partition(b)
        for b, row in batches.items()
        if row.get("embedded_fingerprint")
        and (replace_all or row.get("loaded_fingerprint") != row["embedded_fingerprint"] or b not in stored)
        and s.paths.partition(b).exists()
    }
    remove = sorted(set(stored) - set(batches))
    memory = memory_files(s, set(batches))
    if not todo and not remove and memory[2] == stored_memory:
        drop_retired(s)
        discard_next(s)  # a copy left by a killed run: brb.db says the store already holds everything
        return {"changed": False, "chunks": int(sum(stored.values())), "seconds": round(time.perf_counter() - t0, 3),
                "embedding_model": str(stored_model), "staged_files_pruned": prune_partitions(s, set(batches))}
    nxt = _begin_update(s)
    try:
        report, gen, stats, counts = _load_into(s, nxt, todo, remove, replace_all, batches, memory)
    except BaseException:
        discard_next(s)  # the store itself was never touched
        raise
    drop_retired(s)
    pruned = prune_partitions(s, set(batches))
    if replace_all:
        log.warning("Saving - embedding model changed (%s -> %s): the whole store was reloaded", stored_model, model)
    return {
        "changed": True,
        "partitions_loaded": len(todo),
        "partitions_removed": len(remove),
        "staged_files_pruned": pruned,
        "replaced_all_for_model_change": replace_all,
        "chunks": int(stats.get("chunks", 0)),
        "embedding_model": str(model),
        "generation": gen,
        "rows_inserted": report.inserted if report else 0,
        "rows_deleted": report.deleted if report else 0,
        "topics": counts["topics"],
        "profiles": counts["profiles"],
        "load_seconds": round(report.seconds, 3) if report else 0.0,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _load_into(s: Settings, nxt: Path, todo: dict[str, Path], remove: list[str], replace_all: bool,
               batches: dict[str, dict], memory: tuple[list[Path], list[Path], str]) -> tuple[Any, Any, dict, dict]:
    """The load's writes to the staging copy ``nxt``: the changed partitions (when there are
    any: a change of the memory alone keeps the chunks, their indexes and the generation), then
    the topics and profiles tables from every memory file.

    Returns:
        (the chunk load's report or None, the generation, store_stats, memory table counts).
    """
    con = duck.connect(nxt, memory_limit=s.duckdb_load_memory_limit)
    try:
        report = None
        gen = duck.get_meta(con, GENERATION, 0)
        if todo or remove:
            try:
                report = load_partitions(con, todo, remove_batches=remove, replace_all=replace_all)
            except LoadMemoryError:
                # Rows far wider than usual: correctness first, the memory bound second.
                log.warning("Saving - the load needs more than duckdb_load_memory_limit=%s; loading without it",
                            s.duckdb_load_memory_limit)
                con.close()
                con = duck.connect(nxt)
                report = load_partitions(con, todo, remove_batches=remove, replace_all=replace_all)
            gen = int(gen or 0) + 1
            duck.set_meta(con, GENERATION, gen)
        duck.set_meta(con, PENDING_LOADED, {b: batches[b]["embedded_fingerprint"] for b in todo})
        counts = load_memory(con, memory[0], memory[1])
        duck.set_meta(con, MEMORY_KEY, memory[2])
        con.execute("CHECKPOINT")
        return report, gen, store_stats(con), counts
    finally:
        con.close()


def prune_partitions(s: Settings, keep: set[str]) -> int:
    """Delete the staged files of batches that no longer exist: they hold message text that no
    stage reads any more. Returns the number of files removed."""
    n = 0
    for key, files in s.paths.staged_batch_files().items():
        if key not in keep:
            for f in files:
                f.unlink(missing_ok=True)
                n += 1
    return n


#: The index stages' names in progress messages.
_INDEX_NAMES = {"hnsw": "HNSW", "fts": "BM25"}


def _index_progress(s: Settings, kind: str, build: Callable[[Any], Any], force: bool,
                    progress: Progress | None, topics: Callable[[Any], dict] | None = None) -> dict[str, Any]:
    """:func:`_index_stage` with its part of the saving stage: the two index stages run in either
    order, so saving is done once no unpublished copy is left."""
    name = _INDEX_NAMES[kind]
    if progress:
        progress.update("saving", 45, f"building {name} index")
    meta = _index_stage(s, kind, build, force, topics)
    if progress:
        if s.paths.store_next.exists():
            progress.update("saving", 70, f"{name} built, waiting for the other index")
        else:
            progress.update("saving", 100, "indexes ready")
    return meta


def _index_stage(s: Settings, kind: str, build: Callable[[Any], Any], force: bool = False,
                 topics: Callable[[Any], dict] | None = None) -> dict[str, Any]:
    """Build one index in the staging copy of the store (and ``topics``: the topic indexes),
    then publish the copy if both chunk indexes are built.

    With no copy (no load since the last publish), the store's own index is checked: a present
    index that covers every stored row is kept; a missing or stale one (a store from before this
    scheme, or ``force``) is built in a fresh copy, which is then published.
    """
    t0 = time.perf_counter()
    nxt = s.paths.store_next
    if not nxt.exists():
        if not s.duckdb_path.exists():
            return {"rebuilt": False, "reason": "no store yet", "rows": 0, "published": False,
                    "seconds": round(time.perf_counter() - t0, 3)}
        con = duck.connect(s.duckdb_path, read_only=True)
        try:
            status = index_status(con)
            topics_due = topics is not None and (topic_index_due(con) or line_index_due(con))
        finally:
            con.close()
        info = status.get(kind, {})
        if info.get("present") and not info.get("stale") and not force and not topics_due:
            return {"rebuilt": False, "reason": "store unchanged since the last build", "published": False,
                    "rows": int(info.get("rows") or 0), "seconds": round(time.perf_counter() - t0, 3)}
        if status["store_rows"] == 0:
            return {"rebuilt": False, "reason": "empty store", "rows": 0, "published": False,
                    "seconds": round(time.perf_counter() - t0, 3)}
        _begin_update(s)
    con = duck.connect(nxt)
    try:
        status = index_status(con)
        info = status.get(kind, {})
        report = None
        if status["store_rows"] and (force or not info.get("present") or info.get("stale")):
            report = build(con)
        topic_meta = topics(con) if topics is not None and status["store_rows"] else {}
    finally:
        con.close()
    if report is not None:
        faults.point("index_built")
    published = publish(s)
    meta: dict[str, Any] = {"rebuilt": report is not None, "rows": report.rows if report else int(status["store_rows"]),
                            "seconds": round(report.seconds if report else time.perf_counter() - t0, 3),
                            "published": published is not None, "embedding_model": str(status.get("embedding_model"))}
    if report is not None:
        meta.update({f"param_{k}": v for k, v in report.params.items() if isinstance(v, (int, float, str))})
    meta.update(topic_meta)
    return meta


def _hnsw(s: Settings) -> Callable[[Any], Any]:
    return lambda con: build_hnsw(con, m=s.hnsw_m, ef_construction=s.hnsw_ef_construction)


def _topics(s: Settings, embedder: Callable[[Settings], Any] | None, force: bool = False,
            progress: Progress | None = None) -> Callable[[Any], dict]:
    """The topic summaries' vectors and indexes (:mod:`brb_pipeline.core.store.topic_index`) and
    the chunks' message-line vectors (:mod:`brb_pipeline.core.store.line_index`); the embedder
    is loaded only when a topic or a line needs a vector."""
    def load() -> Any:
        if embedder is not None:
            return embedder(s)
        from brb_pipeline.core.embedding.models import load_embedder

        return load_embedder(s.embedding)

    def run(con: Any) -> dict:
        out = index_topics(con, load, force=force, m=s.hnsw_m, ef_construction=s.hnsw_ef_construction,
                           region=s.default_region)
        return {**out, **index_lines(con, load, progress=lines_done if progress else None,
                                     resume=s.paths.lines_resume, batch=s.line_batch_chunks)}

    def lines_done(done: int, total: int) -> None:  # the saving stage's 45-70 %, by chunks embedded
        progress.update("saving", 45 + 25 * done / max(total, 1), "embedding message lines",
                        count=done, unit="chunks")

    return run


def run_vector_index(s: Settings, force: bool = False, progress: Progress | None = None,
                     embedder: Callable[[Settings], Any] | None = None) -> dict[str, Any]:
    """HNSW (cosine) over the chunk embeddings, built after every load (or when forced), and
    the topic summaries' vectors, HNSW and BM25 (``embedder``: gives the store's model, default
    the process's one for ``s``)."""
    return _index_progress(s, "hnsw", _hnsw(s), force, progress, _topics(s, embedder, force, progress))


def run_text_index(s: Settings, force: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """BM25 over chunk text (multilingual settings), built after every load (or when forced)."""
    return _index_progress(s, "fts", build_fts, force, progress)


def run_reindex(s: Settings) -> dict[str, Any]:
    """Rebuild both indexes from the published store's chunks in a fresh copy, then publish it.

    An unpublished load (a run killed before its indexes) is discarded; the next ingest loads it again.
    """
    if not s.duckdb_path.exists():
        raise StoreError(f"no search store in {s.home}: run `brb ingest` first")
    nxt = _begin_update(s)
    con = duck.connect(nxt)
    try:
        reports = [_hnsw(s)(con), build_fts(con)] if index_status(con)["store_rows"] else []
        topic_meta = _topics(s, None, force=True)(con) if reports else {}
    finally:
        con.close()
    published = publish(s)
    return {"published": published is not None, **topic_meta,
            **{r.index: {"rows": r.rows, "seconds": round(r.seconds, 3)} for r in reports}}
