"""One vector per message line of every chunk: the children of parent-child retrieval.

Why. A fact said in one message is diluted in its 8-message window: the window's vector is the
mean of eight things said. Matching the query against each message, and giving a window the
score of its best message, finds that fact again (issue 29 item 4; ``benchmarks/parent_child_lab.py``
measured it on the long chats' dev half, and ``benchmarks/results/issue29_parent_child_and_models.md``
has the numbers). Search uses these vectors to re-rank the candidates its two lists found
(:mod:`brb_pipeline.core.search.lines`); there is no index over them, and none is needed.

The table, ``line_vectors(chunk_id, text_md5, lines, vectors)``, has one row per chunk: the
chunk's ``embedding_text`` lines after the first (the conversation header), each embedded as
``header + "\\n" + line`` with the store's model, stored as ``lines x dim`` int8 (a unit vector
times 127, rounded: a quarter of float32's bytes, and the cosine order is kept to about 1e-2).
No text is stored here; ``text_md5`` is the md5 of the chunk's ``embedding_text``, so a chunk
whose text changed (a window that grew) is embedded again.

It is kept in step with ``chunks`` in the vector index stage, in the staging copy of the store
(published with the indexes by the same rename, as :mod:`.topic_index` is): rows of chunks that
are gone or changed are deleted, chunks without a row are embedded (identical lines once: windows
overlap, so most lines are in two chunks; a one-message chunk's line is its whole text, and its
own vector serves). A model change embeds everything again. Forgetting
rewrites the store (:mod:`.compact`) with the rows of the kept chunks only.

Resuming. The first embedding of a big store is long (505K lines took 23 min on two cores), and a
staging copy left by a killed or failed run is discarded by the next one. Before it is, its rows
are kept in a resume file beside the store (:func:`save_for_resume`, same key as the store; vectors
and chunk ids, no text), and the next :func:`index_lines` takes the rows whose chunk text still
matches (:func:`resume_from`) before embedding the rest; the file is deleted once every chunk has
its rows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from brb_pipeline.core import faults
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.store import duck
from brb_pipeline.core.store.duck import get_meta, set_meta, table_exists
from brb_pipeline.core.store.params import LINE_BATCH_CHUNKS

log = logging.getLogger(__name__)

LINE_VECTORS = "line_vectors"
LINE_META = "line_index"  # meta: {"rows", "lines", "embedding_model", "dim", "seconds"}
LINE_DDL = (f"CREATE TABLE IF NOT EXISTS {LINE_VECTORS} (chunk_id VARCHAR NOT NULL, text_md5 VARCHAR NOT NULL, "
            "lines INTEGER NOT NULL, vectors BLOB NOT NULL)")
LINE_KEY_INDEX = "line_vectors_chunk"  # ART on chunk_id: a search reads ~100 rows of 64K by id in ~4 ms, not ~150
_CHUNKS_PER_BATCH = LINE_BATCH_CHUNKS  # chunks embedded (and inserted) together: bounded memory, steady progress
_RESUME = "_brb_lines_resume"  # the resume file's catalog while attached
_RESUME_META = "resume_meta"  # its one row: the model and dimension of its vectors
_PUBLISHED = "_brb_lines_published"  # the published store, read-only, while rows are kept
_SCALE = 127.0


def child_texts(embedding_text: str | None) -> list[str]:
    """What is embedded for each line of a chunk: the header (the first line, which carries a
    model's document prefix and the conversation) above the line. ``[]`` for an empty chunk."""
    head, *lines = (embedding_text or "").split("\n")
    return [f"{head}\n{line}" for line in lines if line.strip()]


def quantize(vectors: np.ndarray) -> bytes:
    """``(n, dim)`` float vectors as int8 bytes of their unit rows times 127."""
    v = np.asarray(vectors, dtype=np.float32)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), np.float32(1e-12))
    return np.clip(np.rint(v * _SCALE), -127, 127).astype(np.int8).tobytes()


def dequantize(blob: bytes, dim: int) -> np.ndarray:
    """The ``(n, dim)`` int8 rows of :func:`quantize` as float32 unit rows."""
    v = np.frombuffer(blob, dtype=np.int8).reshape(-1, int(dim)).astype(np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), np.float32(1e-12))


def _built_for(con: duckdb.DuckDBPyConnection) -> bool:
    info = get_meta(con, LINE_META) or {}
    return (table_exists(con, LINE_VECTORS) and info.get("embedding_model") == get_meta(con, "embedding_model")
            and info.get("dim") == get_meta(con, "dim"))


def _stale_sql() -> str:
    """Chunks without a current row, and rows without a current chunk (two counts)."""
    return (f"SELECT (SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM {LINE_VECTORS} l "
            "WHERE l.chunk_id = c.chunk_id AND l.text_md5 = md5(coalesce(c.embedding_text, '')))), "
            f"(SELECT count(*) FROM {LINE_VECTORS} l WHERE NOT EXISTS (SELECT 1 FROM chunks c "
            "WHERE c.chunk_id = l.chunk_id AND l.text_md5 = md5(coalesce(c.embedding_text, ''))))")


def line_index_due(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether :func:`index_lines` has work: chunks without current line vectors, rows of chunks
    that are gone, or vectors of another model."""
    if not table_exists(con, "chunks"):
        return table_exists(con, LINE_VECTORS)
    if not _built_for(con):
        return bool(con.execute("SELECT count(*) FROM chunks").fetchone()[0]) or table_exists(con, LINE_VECTORS)
    missing, gone = con.execute(_stale_sql()).fetchone()
    return bool(missing or gone)


def present(con: duckdb.DuckDBPyConnection) -> bool:
    """The store has line vectors of its own model (search re-ranks with them only then)."""
    return _built_for(con)


def drop_line_index(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"DROP INDEX IF EXISTS {LINE_KEY_INDEX}")
    con.execute(f"DROP TABLE IF EXISTS {LINE_VECTORS}")
    if table_exists(con, "meta"):
        set_meta(con, LINE_META, None)


def index_lines(con: duckdb.DuckDBPyConnection, embedder: Callable[[], Any], *,
                progress: Callable[[int, int], None] | None = None, resume: Path | None = None,
                batch: int | None = None) -> dict[str, Any]:
    """Bring ``line_vectors`` up to date with ``chunks`` (see the module doc).

    The embedder is asked for only when a chunk needs vectors. Each batch of chunks is inserted
    as it is embedded; a run killed half-way leaves its staging copy, which is never published
    (its rows go to the resume file when it is discarded).

    Args:
        embedder: gives the store's embedding model.
        progress: called with (chunks done, chunks to do) after each batch.
        resume: the resume file (:func:`save_for_resume`): its current rows are taken first, and
            it is deleted once every chunk has its rows.
        batch: chunks embedded and inserted together (default :data:`_CHUNKS_PER_BATCH`).

    Returns:
        ``{"line_chunks", "lines_embedded", "lines_resumed", "lines_seconds"}``, plus
        ``lines_skipped`` (a reason) when the embedder is not the store's model.
    """
    t0 = time.perf_counter()
    out: dict[str, Any] = {"line_chunks": 0, "lines_embedded": 0}
    if not table_exists(con, "chunks"):
        return {**out, "lines_seconds": 0.0}
    model, dim = get_meta(con, "embedding_model"), get_meta(con, "dim")
    if not _built_for(con):
        drop_line_index(con)
    con.execute(LINE_DDL)
    con.execute(f"DROP INDEX IF EXISTS {LINE_KEY_INDEX}")  # rebuilt below: cheaper than kept up row by row
    con.execute(f"DELETE FROM {LINE_VECTORS} l WHERE NOT EXISTS (SELECT 1 FROM chunks c "
                "WHERE c.chunk_id = l.chunk_id AND l.text_md5 = md5(coalesce(c.embedding_text, '')))")
    out["lines_resumed"] = resume_from(con, resume) if resume is not None and resume.exists() else 0
    if out["lines_resumed"]:
        log.info("Indexing - message-line vectors of %d chunks taken from an interrupted run", out["lines_resumed"])
    todo = [r[0] for r in con.execute(
        f"SELECT chunk_id FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM {LINE_VECTORS} l "
        "WHERE l.chunk_id = c.chunk_id) ORDER BY chat_id, position, chunk_id").fetchall()]
    if todo:
        emb = embedder()
        if dim is None or emb.model_id != model:
            log.warning("Indexing - message lines not embedded: the embedder %s is not the store's model %s",
                        emb.model_id, model)
            return {**out, "lines_skipped": "embedder is not the store's model",
                    "lines_seconds": round(time.perf_counter() - t0, 3)}
        step = max(1, int(batch or _CHUNKS_PER_BATCH))
        for i in range(0, len(todo), step):
            out["lines_embedded"] += _embed_batch(con, emb, todo[i:i + step], int(dim))
            faults.point("lines_embedding")
            if progress is not None:
                progress(min(i + step, len(todo)), len(todo))
    con.execute(f"CREATE INDEX {LINE_KEY_INDEX} ON {LINE_VECTORS} (chunk_id)")
    if resume is not None:
        resume.unlink(missing_ok=True)  # every chunk has its rows: the kept ones have served
    rows, lines = con.execute(f"SELECT count(*), coalesce(sum(lines), 0) FROM {LINE_VECTORS}").fetchone()
    seconds = time.perf_counter() - t0
    set_meta(con, LINE_META, {"rows": int(rows), "lines": int(lines), "embedding_model": model, "dim": dim,
                              "seconds": round(seconds, 3)})
    con.execute("CHECKPOINT")
    if todo:
        log.info("Indexing - %d message lines of %d chunks embedded in %.1f s", out["lines_embedded"], len(todo),
                 seconds)
    return {**out, "line_chunks": int(rows), "lines_seconds": round(seconds, 3)}


def _rows_model(con: duckdb.DuckDBPyConnection) -> tuple[Any, Any]:
    """The model and dimension of the rows in ``line_vectors``: :data:`LINE_META`'s when it is set
    (a finished index, or the published store's rows in a copy whose model may have changed
    since), else the store's own (:func:`index_lines` dropped the old rows, then embedded with it)."""
    info = get_meta(con, LINE_META)
    if info:
        return info.get("embedding_model"), info.get("dim")
    return get_meta(con, "embedding_model"), get_meta(con, "dim")


def save_for_resume(con: duckdb.DuckDBPyConnection, target: Path, published: Path | None = None) -> int:
    """Add the line vectors of ``con`` (a staging copy about to be discarded) to the resume file
    ``target`` (created, encrypted as the store is; rows of another model in it are replaced).
    Rows that the ``published`` store holds too (same chunk text, same model) are left out: the
    next copy starts from it. Returns the rows added.

    Raises:
        StoreError: ``target`` cannot be opened (locked, damaged, another key).
        duckdb.Error: a read or write failed.
    """
    if not table_exists(con, LINE_VECTORS):
        return 0
    model, dim = _rows_model(con)
    if not model or not dim:
        return 0
    duck.attach(con, target, _RESUME)
    total = None  # rows in the file once written; 0 deletes it
    try:
        con.execute(f"CREATE TABLE IF NOT EXISTS {_RESUME}.main.{_RESUME_META} (embedding_model VARCHAR, dim INTEGER)")
        con.execute(LINE_DDL.replace(f"EXISTS {LINE_VECTORS}", f"EXISTS {_RESUME}.main.{LINE_VECTORS}"))
        if con.execute(f"SELECT embedding_model, dim FROM {_RESUME}.main.{_RESUME_META}").fetchall() != [(model, dim)]:
            con.execute(f"DELETE FROM {_RESUME}.main.{LINE_VECTORS}")
            con.execute(f"DELETE FROM {_RESUME}.main.{_RESUME_META}")
            con.execute(f"INSERT INTO {_RESUME}.main.{_RESUME_META} VALUES (?, ?)", [model, int(dim)])
        before = con.execute(f"SELECT count(*) FROM {_RESUME}.main.{LINE_VECTORS}").fetchone()[0]
        skip = _published_rows(con, published, model, dim)
        con.execute(f"INSERT INTO {_RESUME}.main.{LINE_VECTORS} SELECT l.* FROM {LINE_VECTORS} l "
                    "WHERE octet_length(l.vectors) = l.lines * ? AND NOT EXISTS (SELECT 1 FROM "
                    f"{_RESUME}.main.{LINE_VECTORS} r WHERE r.chunk_id = l.chunk_id AND r.text_md5 = l.text_md5)"
                    + (f" AND NOT EXISTS (SELECT 1 FROM {skip} p WHERE p.chunk_id = l.chunk_id AND "
                       "p.text_md5 = l.text_md5)" if skip else ""), [int(dim)])
        total = con.execute(f"SELECT count(*) FROM {_RESUME}.main.{LINE_VECTORS}").fetchone()[0]
        con.execute(f"CHECKPOINT {_RESUME}")
        return int(total - before)
    finally:
        for name in (_RESUME, _PUBLISHED):
            try:
                con.execute(f"DETACH DATABASE IF EXISTS {name}")
            except duckdb.Error:
                pass
        if total == 0:  # nothing the next run could take: no file left behind
            for f in (target, target.with_name(target.name + ".wal")):
                f.unlink(missing_ok=True)


def _published_rows(con: duckdb.DuckDBPyConnection, published: Path | None, model: Any, dim: Any) -> str | None:
    """The published store's ``line_vectors``, attached read-only, when its rows are of ``model``
    (None: nothing to leave out, or the store cannot be opened now, e.g. damaged)."""
    if published is None or not published.exists():
        return None
    try:
        duck.attach(con, published, _PUBLISHED, read_only=True)
        info = get_meta(con, LINE_META, {}, catalog=_PUBLISHED) or {}
    except (StoreError, duckdb.Error):
        return None
    if (info.get("embedding_model"), info.get("dim")) != (model, dim) or not table_exists(con, LINE_VECTORS, _PUBLISHED):
        return None
    return f"{_PUBLISHED}.main.{LINE_VECTORS}"


def resume_from(con: duckdb.DuckDBPyConnection, source: Path) -> int:
    """Insert the rows of the resume file ``source`` that are current for this store (same model
    and dimension, a chunk whose text has the row's md5, no row yet). Returns chunks taken.
    A file that cannot be read is deleted and logged, never an error: its lines are embedded."""
    model, dim = get_meta(con, "embedding_model"), get_meta(con, "dim")
    try:
        duck.attach(con, source, _RESUME, read_only=True)
    except StoreError as exc:
        log.warning("Indexing - the line vectors kept from an interrupted run were not read (%s); embedding them "
                    "again", type(exc).__name__)
        source.unlink(missing_ok=True)
        return 0
    try:
        if not (table_exists(con, _RESUME_META, _RESUME) and table_exists(con, LINE_VECTORS, _RESUME)) or con.execute(
                f"SELECT embedding_model, dim FROM {_RESUME}.main.{_RESUME_META}").fetchall() != [(model, dim)]:
            return 0
        before = con.execute(f"SELECT count(*) FROM {LINE_VECTORS}").fetchone()[0]
        con.execute(f"INSERT INTO {LINE_VECTORS} SELECT r.* FROM {_RESUME}.main.{LINE_VECTORS} r "
                    "JOIN chunks c ON c.chunk_id = r.chunk_id AND r.text_md5 = md5(coalesce(c.embedding_text, '')) "
                    f"WHERE octet_length(r.vectors) = r.lines * ? AND NOT EXISTS (SELECT 1 FROM {LINE_VECTORS} l "
                    "WHERE l.chunk_id = r.chunk_id)",  # one row per (chunk, text) in the file: one matches
                    [int(dim)])
        return int(con.execute(f"SELECT count(*) FROM {LINE_VECTORS}").fetchone()[0] - before)
    except duckdb.Error as exc:
        log.warning("Indexing - the line vectors kept from an interrupted run were not read (%s); embedding them "
                    "again", type(exc).__name__)
        return 0
    finally:
        try:
            con.execute(f"DETACH {_RESUME}")
        except duckdb.Error:
            pass


def _embed_batch(con: duckdb.DuckDBPyConnection, emb: Any, chunk_ids: Sequence[str], dim: int) -> int:
    """Embed the lines of ``chunk_ids`` (each distinct text once) and insert their rows."""
    import pyarrow as pa  # only here: a search imports this module, and pyarrow is slow to import

    rows = con.execute("SELECT chunk_id, coalesce(embedding_text, ''), md5(coalesce(embedding_text, '')), embedding "
                       "FROM chunks WHERE list_contains(?::VARCHAR[], chunk_id)", [list(chunk_ids)]).fetchall()
    per_chunk = [(cid, md5, child_texts(text)) for cid, text, md5, _ in rows]
    # A one-message chunk's line is its whole text: its own vector serves, nothing is embedded.
    known = {text: np.asarray(vec, dtype=np.float32) for _, text, _, vec in rows if vec is not None}
    distinct: dict[str, int] = {}
    for _, _, texts in per_chunk:
        for t in texts:
            if t not in known:
                distinct.setdefault(t, len(distinct))
    vecs = (np.asarray(emb.embed(list(distinct)), dtype=np.float32) if distinct
            else np.zeros((0, dim), dtype=np.float32))
    if vecs.shape != (len(distinct), dim):
        raise ValueError(f"line embeddings have shape {vecs.shape}, expected {(len(distinct), dim)}")

    def vector(t: str) -> np.ndarray:
        return known[t] if t in known else vecs[distinct[t]]

    blobs = [quantize(np.stack([vector(t) for t in texts])) if texts else b"" for _, _, texts in per_chunk]
    tbl = pa.table({"chunk_id": [r[0] for r in per_chunk], "text_md5": [r[1] for r in per_chunk],
                    "lines": pa.array([len(r[2]) for r in per_chunk], pa.int32()), "vectors": pa.array(blobs, pa.binary())})
    con.register("_brb_line_rows", tbl)
    try:
        con.execute(f"INSERT INTO {LINE_VECTORS} SELECT chunk_id, text_md5, lines, vectors FROM _brb_line_rows")
    finally:
        con.unregister("_brb_line_rows")
    return len(distinct)


def fetch_sql(chunk_ids: Sequence[str]) -> str:
    """``SELECT chunk_id, vectors`` of these chunks, the ids written out as literals: DuckDB serves
    a constant ``IN`` list from :data:`LINE_KEY_INDEX`, a parameter list by scanning every row."""
    ids = ", ".join("'" + str(c).replace("'", "''") + "'" for c in chunk_ids)
    return f"SELECT chunk_id, vectors FROM {LINE_VECTORS} WHERE chunk_id IN ({ids or 'NULL'})"


def copy_kept(con: duckdb.DuckDBPyConnection, source_catalog: str) -> int:
    """Copy the rows of the chunks in the current catalog's ``chunks`` from ``source_catalog``,
    which has the table (a compaction: the rows of dropped chunks stay behind in the old file).
    Returns rows copied."""
    con.execute(LINE_DDL)
    con.execute(f"INSERT INTO {LINE_VECTORS} SELECT l.* FROM {source_catalog}.main.{LINE_VECTORS} l "
                "WHERE l.chunk_id IN (SELECT chunk_id FROM chunks)")
    con.execute(f"CREATE INDEX {LINE_KEY_INDEX} ON {LINE_VECTORS} (chunk_id)")
    return int(con.execute(f"SELECT count(*) FROM {LINE_VECTORS}").fetchone()[0])
