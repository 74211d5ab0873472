"""Vectors, HNSW and BM25 over the distilled memory's topic summaries.

The distillation load writes ``topics`` (one row per topic: label, summary, the span of
messages it summarizes); this module never alters it. It keeps its own table in step with it,
``topic_vectors(topic_id, text, lexical_extra, embedding FLOAT[dim])``: the text indexed is the
label and the summary (cleaned like chunk texts), embedded with the store's model as a document.
Only topics whose text is new or changed are embedded again; rows of topics that are gone are
deleted. Then the HNSW index (:data:`TOPIC_HNSW`) and the BM25 index (:data:`TOPIC_FTS_SCHEMA`,
same multilingual settings as the chunks') are rebuilt over the table: topics are few (a handful
per person and month), so a full rebuild costs little.

This runs in the vector index stage, in the staging copy of the store, so topic indexes are
published with the chunk indexes by the same rename. A store without ``topics`` (older stores)
or with an empty one (no model configured) gets no topic table and no error.
An encrypted store gets the BM25 index only: its topic vectors are searched exactly, as the
chunks' are (:mod:`.index`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np

from brb_pipeline.core import DEFAULT_REGION
from brb_pipeline.core.store.duck import encrypted, get_meta, set_meta, table_exists
from brb_pipeline.core.store.findable import findable_text
from brb_pipeline.core.store.index import FTS_PARAMS, lexical_extra
from brb_pipeline.core.store.params import IndexParams

log = logging.getLogger(__name__)

TOPICS = "topics"
TOPIC_VECTORS = "topic_vectors"
TOPIC_HNSW = "topic_vectors_hnsw"
TOPIC_FTS_SCHEMA = "fts_main_topic_vectors"
TOPIC_META = "topic_index"  # meta: {"rows", "embedding_model", "dim", "seconds", "built_at"}
_EMBED_BATCH = 256


def topic_text(label: str | None, summary: str | None) -> str:
    """What is indexed and embedded for a topic: its label and summary, one per line."""
    return findable_text("\n".join(p.strip() for p in (label, summary) if p and p.strip()))


def _wanted(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """topic_id -> text to index ({} without a ``topics`` table)."""
    if not table_exists(con, TOPICS):
        return {}
    return {tid: topic_text(label, summary)
            for tid, label, summary in con.execute(f"SELECT topic_id, label, summary FROM {TOPICS}").fetchall()}


def _indexed(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    if not table_exists(con, TOPIC_VECTORS):
        return {}
    return dict(con.execute(f"SELECT topic_id, text FROM {TOPIC_VECTORS}").fetchall())


def _built_for(con: duckdb.DuckDBPyConnection) -> bool:
    """The topic indexes exist and were built with the store's model and dim."""
    info = get_meta(con, TOPIC_META) or {}
    hnsw = con.execute("SELECT count(*) FROM duckdb_indexes() WHERE database_name = current_database() "
                       "AND index_name = ?", [TOPIC_HNSW]).fetchone()[0]
    fts = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                      "AND schema_name = ? AND table_name IN ('docs', 'dict', 'terms', 'stats')",
                      [TOPIC_FTS_SCHEMA]).fetchone()[0]
    return bool((hnsw or encrypted(con)) and fts == 4
                and info.get("embedding_model") == get_meta(con, "embedding_model")
                and info.get("dim") == get_meta(con, "dim"))


def topic_index_due(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether :func:`index_topics` has work: topics without (current) vectors, vectors of
    topics that are gone, or indexes missing or built for another model."""
    wanted = _wanted(con)
    if not wanted:
        return table_exists(con, TOPIC_VECTORS)
    return wanted != _indexed(con) or not _built_for(con)


def drop_topic_index(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the topic table, both its indexes and their meta."""
    con.execute(f"DROP INDEX IF EXISTS {TOPIC_HNSW}")
    con.execute(f"DROP SCHEMA IF EXISTS {TOPIC_FTS_SCHEMA} CASCADE")
    con.execute(f"DROP TABLE IF EXISTS {TOPIC_VECTORS}")
    if table_exists(con, "meta"):
        set_meta(con, TOPIC_META, None)


def vectors_ddl(dim: int) -> str:
    return (f"CREATE TABLE {TOPIC_VECTORS} (topic_id VARCHAR PRIMARY KEY, text VARCHAR, "
            f"lexical_extra VARCHAR, embedding FLOAT[{int(dim)}] NOT NULL)")


def index_topics(con: duckdb.DuckDBPyConnection, embedder: Callable[[], Any], *, force: bool = False,
                 m: int = IndexParams.m, ef_construction: int = IndexParams.ef_construction, region: str = DEFAULT_REGION) -> dict[str, Any]:
    """Bring ``topic_vectors`` and its two indexes up to date with ``topics``.

    Must run outside an explicit transaction (HNSW). Nothing is done, and the embedder is never
    asked for, when nothing changed (unless ``force``).

    Args:
        embedder: gives the store's embedding model (called only when a topic needs a vector).
        force: rebuild both indexes even when nothing changed.
        m, ef_construction: HNSW parameters (the chunk index's settings).
        region: default phone region of :func:`.index.lexical_extra`.

    Returns:
        ``{"topics_indexed", "topics_embedded", "topics_seconds"}`` (counts, seconds), plus
        ``topics_skipped`` (a reason) when the embedder is not the store's model.
    """
    t0 = time.perf_counter()
    wanted = _wanted(con)
    out: dict[str, Any] = {"topics_indexed": len(wanted), "topics_embedded": 0}
    if not wanted:
        if table_exists(con, TOPIC_VECTORS):
            drop_topic_index(con)
            con.execute("CHECKPOINT")
        return {**out, "topics_seconds": round(time.perf_counter() - t0, 3)}
    if not force and not topic_index_due(con):
        return {**out, "topics_seconds": round(time.perf_counter() - t0, 3)}
    model, dim = get_meta(con, "embedding_model"), get_meta(con, "dim")
    emb = embedder()
    if dim is None or emb.model_id != model:
        log.warning("Indexing - topic summaries not indexed: the embedder %s is not the store's model %s",
                    emb.model_id, model)
        return {**out, "topics_indexed": 0, "topics_skipped": "embedder is not the store's model"}
    have = _indexed(con) if _built_for(con) else {}
    todo = [tid for tid, text in wanted.items() if have.get(tid) != text]
    gone = [tid for tid, text in have.items() if wanted.get(tid) != text]
    con.execute(f"DROP INDEX IF EXISTS {TOPIC_HNSW}")
    con.execute(f"DROP SCHEMA IF EXISTS {TOPIC_FTS_SCHEMA} CASCADE")
    if not have:
        con.execute(f"DROP TABLE IF EXISTS {TOPIC_VECTORS}")
        con.execute(vectors_ddl(int(dim)))
    elif gone:
        con.execute(f"DELETE FROM {TOPIC_VECTORS} WHERE list_contains(?::VARCHAR[], topic_id)", [gone])
    for i in range(0, len(todo), _EMBED_BATCH):
        _insert(con, emb, [(tid, wanted[tid]) for tid in todo[i : i + _EMBED_BATCH]], int(dim), region)
    con.execute("CHECKPOINT")
    _build(con, m, ef_construction)
    seconds = time.perf_counter() - t0
    set_meta(con, TOPIC_META, {"rows": len(wanted), "embedding_model": model, "dim": dim,
                               "seconds": round(seconds, 3)})
    con.execute("CHECKPOINT")
    log.info("Indexing - %d topic summaries (%d embedded) in %.1f s", len(wanted), len(todo), seconds)
    return {**out, "topics_embedded": len(todo), "topics_seconds": round(seconds, 3)}


def _insert(con: duckdb.DuckDBPyConnection, emb: Any, rows: list[tuple[str, str]], dim: int, region: str) -> None:
    """Embed ``(topic_id, text)`` rows as documents and insert them."""
    import pyarrow as pa  # only here: a search imports this module, and pyarrow is slow to import

    vecs = np.asarray(emb.embed([getattr(emb, "document_prefix", "") + t for _, t in rows]), dtype=np.float32)
    if vecs.shape != (len(rows), dim):
        raise ValueError(f"topic embeddings have shape {vecs.shape}, expected {(len(rows), dim)}")
    tbl = pa.table({
        "topic_id": [r[0] for r in rows], "text": [r[1] for r in rows],
        "lexical_extra": [lexical_extra(r[1], region) for r in rows],
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa.float32()), dim),
    })
    con.register("_brb_topic_rows", tbl)
    try:
        con.execute(f"INSERT INTO {TOPIC_VECTORS} SELECT topic_id, text, lexical_extra, "
                    f"embedding::FLOAT[{dim}] FROM _brb_topic_rows")
    finally:
        con.unregister("_brb_topic_rows")


def _build(con: duckdb.DuckDBPyConnection, m: int, ef_construction: int) -> None:
    """HNSW (cosine; none in an encrypted store) and BM25 over ``topic_vectors``."""
    if not encrypted(con):
        con.execute(f"CREATE INDEX {TOPIC_HNSW} ON {TOPIC_VECTORS} USING HNSW (embedding) "
                    f"WITH (metric = 'cosine', M = {int(m)}, ef_construction = {int(ef_construction)})")
    p = FTS_PARAMS
    ignore = p["ignore"].replace("'", "''")
    con.execute(
        f"PRAGMA create_fts_index('{TOPIC_VECTORS}', 'topic_id', 'text', 'lexical_extra', "
        f"stemmer = '{p['stemmer']}', stopwords = '{p['stopwords']}', ignore = '{ignore}', "
        f"strip_accents = {p['strip_accents']}, lower = {p['lower']}, overwrite = 1)"
    )


def rebuild_kept(con: duckdb.DuckDBPyConnection, *, m: int = IndexParams.m, ef_construction: int = IndexParams.ef_construction) -> None:
    """Rebuild both topic indexes over the vectors a compaction kept (no embedding needed), and
    record their row count so the next index stage sees them as current."""
    _build(con, m, ef_construction)
    rows = int(con.execute(f"SELECT count(*) FROM {TOPIC_VECTORS}").fetchone()[0])
    facts = dict(get_meta(con, TOPIC_META) or {})
    set_meta(con, TOPIC_META, {**facts, "rows": rows})
