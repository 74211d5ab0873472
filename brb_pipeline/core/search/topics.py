"""Topic summaries as a second kind of search hit, beside the chunks.

:func:`topic_candidates` runs the vector and BM25 queries over ``topic_vectors`` (built by
:mod:`brb_pipeline.core.store.topic_index`), with the contact and time filters applied to the
topic's span; :func:`joint` puts them into the chunks' candidate lists, so one fusion scores
both kinds on one scale; :func:`interleave` merges the chunk passages and the topic hits by that
score.

The rule: every topic is a candidate like a chunk, but at most :data:`MAX_TOPICS` topics (the
best fused) reach the final list, where they sit at their fused score's place among the
passages. A store without topic indexes gives no topic candidates, and then the lists, the
fusion and so every chunk result are exactly those of a chunk-only search.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from brb_pipeline.core.search.sql import topic_lexical_sql, topic_vector_sql
from brb_pipeline.core.store.duck import get_meta
from brb_pipeline.core.store.index import fts_query_text
from brb_pipeline.core.store.topic_index import TOPIC_FTS_SCHEMA, TOPIC_META, TOPIC_VECTORS

MAX_TOPICS = 3
KEY = "topic:"  # prefix of a topic's id in the joint candidate lists (chunk ids never start so)
_COLUMNS = ("topic_id, contact_id, chat_id, month, language, label, summary, first_ts, last_ts, "
            "first_message_id, last_message_id")


@dataclass
class TopicHit:
    """A topic summary found by a search, with the span of messages it summarizes."""

    topic_id: str
    contact_id: str | None = None
    chat_id: str | None = None
    month: str | None = None
    language: str | None = None
    label: str | None = None
    summary: str | None = None
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    first_message_id: str | None = None
    last_message_id: str | None = None
    vector_rank: int | None = None
    vector_score: float | None = None
    lexical_rank: int | None = None
    lexical_score: float | None = None
    score: float = 0.0
    kind: str = "topic"


def _ready(con: duckdb.DuckDBPyConnection) -> bool:
    """Topic indexes built for the store's model (False on an older store or one without topics)."""
    row = con.execute(
        "SELECT count(*) FILTER (WHERE schema_name = 'main' AND table_name IN ('topics', ?)),"
        " count(*) FILTER (WHERE schema_name = ? AND table_name IN ('docs', 'dict', 'terms', 'stats'))"
        " FROM duckdb_tables() WHERE database_name = current_database()",
        [TOPIC_VECTORS, TOPIC_FTS_SCHEMA]).fetchone()
    if row[0] != 2 or row[1] != 4:
        return False
    info = get_meta(con, TOPIC_META) or {}
    return info.get("embedding_model") == get_meta(con, "embedding_model")


def topic_candidates(con: duckdb.DuckDBPyConnection, q: Any, where: tuple[str, list] | None
                     ) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """``(topic_id, cosine similarity)`` and ``(topic_id, BM25)`` lists, best first, for the
    query ``q`` (hybrid's prepared query: mode, vector, text, depth); ``where``:
    :func:`.sql.topic_filters` (None: no topics wanted). Two empty lists when there are none."""
    if where is None or not _ready(con):
        return [], []
    clause, params = where
    vec: list[tuple[str, float]] = []
    lex: list[tuple[str, float]] = []
    if q.use_vec:
        rows = con.execute(topic_vector_sql(q.dim, clause),
                           [q.vec.tolist(), *params, q.candidates]).fetchall()
        vec = sorted(((tid, 1.0 - float(d)) for tid, d in rows), key=lambda r: (-r[1], r[0]))
    if q.use_lex:
        rows = con.execute(topic_lexical_sql(TOPIC_FTS_SCHEMA, clause),
                           [fts_query_text(q.text, q.region), *params, q.candidates]).fetchall()
        lex = sorted(((tid, float(s)) for tid, s in rows), key=lambda r: (-r[1], r[0]))
    return vec, lex


def joint(chunk_rows: list[tuple[str, float]], topic_rows: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """One candidate list of chunks and (prefixed) topics, best score first."""
    if not topic_rows:
        return chunk_rows
    rows = chunk_rows + [(KEY + tid, s) for tid, s in topic_rows]
    return sorted(rows, key=lambda r: (-r[1], r[0]))


def split(fused: list[tuple[str, float]]) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """The fused list's chunks, and its best :data:`MAX_TOPICS` topics (ids unprefixed)."""
    chunks = [(cid, s) for cid, s in fused if not cid.startswith(KEY)]
    topics = [(cid[len(KEY):], s) for cid, s in fused if cid.startswith(KEY)]
    return chunks, topics[:MAX_TOPICS]


def topic_hits(con: duckdb.DuckDBPyConnection, fused: list[tuple[str, float]],
               vec: list[tuple[str, float]], lex: list[tuple[str, float]]) -> list[TopicHit]:
    """Hits for the fused topics still in ``topics``, in fused order, with their list ranks."""
    if not fused:
        return []
    rows = {r[0]: r for r in con.execute(
        f"SELECT {_COLUMNS} FROM topics WHERE list_contains(?::VARCHAR[], topic_id)",
        [[tid for tid, _ in fused]]).fetchall()}
    vrank = {tid: (i, s) for i, (tid, s) in enumerate(vec, start=1)}
    lrank = {tid: (i, s) for i, (tid, s) in enumerate(lex, start=1)}
    hits = []
    for tid, score in fused:
        if tid in rows:
            hit = TopicHit(*rows[tid], score=score)
            hit.vector_rank, hit.vector_score = vrank.get(tid, (None, None))
            hit.lexical_rank, hit.lexical_score = lrank.get(tid, (None, None))
            hits.append(hit)
    return hits


def interleave(chunk_hits: list, topics: list[TopicHit], k: int) -> list:
    """The top ``k`` of both kinds: each topic (best first) placed before the first passage that
    scores lower than it, the passages' own order kept (a passage first on a tie)."""
    if not topics:
        return chunk_hits
    out: list = []
    ti = 0
    for hit in chunk_hits:
        while ti < len(topics) and topics[ti].score > hit.score:
            out.append(topics[ti])
            ti += 1
        out.append(hit)
    return (out + topics[ti:])[:k]
