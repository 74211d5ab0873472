"""Hybrid search over the chunk store: vectors (HNSW; exact in an encrypted store) + BM25 text,
fused (see :mod:`.fusion`), overlapping windows merged into one passage, with a relevance floor.

:func:`search` runs named steps: :func:`_vector_candidates` and :func:`_lexical_candidates`
(one list each, the BM25 one on a second connection in a worker thread in hybrid mode; their
SQL is in :mod:`.sql`), :func:`_fuse`, :func:`_passages` (merge, diversify, fetch) and :func:`_attach` (list ranks and
scores onto the hits).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import duckdb
import numpy as np

from brb_pipeline.core.store.params import IndexParams
from brb_pipeline.core import DEFAULT_REGION
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.search.fusion import (Fusion, Span, fuse, is_specific, merge_lines, merge_overlapping, mmr_order,
                                      phrase_first, quoted_phrases, specific_terms)
from brb_pipeline.core.search import lines as lines_mod
from brb_pipeline.core.search.sql import Filters, lexical_sql, store_state, term_stats_sql, vector_sql
from brb_pipeline.core.search.topics import TopicHit, interleave, joint, split, topic_candidates, topic_hits
from brb_pipeline.core.store import line_index
from brb_pipeline.core.store.index import REBUILD_HINT, fts_query_text

if TYPE_CHECKING:  # a one-shot search never loads it (nor pyarrow, which it needs)
    from brb_pipeline.core.search.resident import Resident

log = logging.getLogger(__name__)

MODES = ("hybrid", "vector", "lexical")
_VECTOR_MODES, _LEXICAL_MODES = ("hybrid", "vector"), ("hybrid", "lexical")  # the modes that query each list
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="brb-bm25")
_HIT_COLUMNS = "chunk_id, contact_id, chat_id, channel, position, start_ts, end_ts, content"
_META_COLUMNS = "chunk_id, chat_id, conversation, start_ts, end_ts"


@dataclass
class Hit:
    """One search result. Ranks are 1-based within their list; ``None`` when absent from it."""

    chunk_id: str
    contact_id: str | None = None
    chat_id: str | None = None
    channel: str | None = None
    position: int | None = None
    start_ts: datetime | None = None
    end_ts: datetime | None = None
    content: str | None = None
    vector_rank: int | None = None
    vector_score: float | None = None  # cosine similarity, 1 - cosine distance
    lexical_rank: int | None = None
    lexical_score: float | None = None  # BM25
    score: float = 0.0  # fused score (or the single list's score in one-list modes)
    chunk_ids: list[str] = field(default_factory=list)  # every chunk merged into this hit, best first
    kind: str = "chunk"  # beside :class:`.topics.TopicHit`'s "topic"


@dataclass
class SearchResult:
    """Hits best first, plus what the search did. ``timings_ms`` keys: vector, lexical, fuse,
    fetch, total (milliseconds)."""

    query: str
    mode: str
    hits: list[Hit | TopicHit] = field(default_factory=list)  # topic hits only with ``topics=True``
    vector_strategy: str | None = None  # "hnsw" | "exact" | "memory" (a Resident, exact) | None
    vector_candidates: int = 0
    lexical_candidates: int = 0
    merged: int = 0  # candidate chunks folded into an earlier hit of the same passage
    specific: bool = False  # the query has a rare, numeric or quoted term (lexical weighs more)
    lexical_coverage: float | None = None  # best share of the query's idf mass one BM25 candidate holds
    phrases: list[str] = field(default_factory=list)  # quoted phrases, matched exactly (ranked first)
    top_similarity: float | None = None  # best cosine similarity of any candidate
    confident: bool | None = None  # top_similarity >= the floor, or a specific term matched; None: not judged
    lines_reranked: bool = False  # hybrid: candidates re-ranked by their best message line (:mod:`.lines`)
    timings_ms: dict[str, float] = field(default_factory=dict)


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _missing_index() -> StoreError:
    return StoreError(f"search index missing: {REBUILD_HINT}")


@dataclass(frozen=True)
class _Query:
    """What every candidate query needs: mode, vector, filters and depth."""

    mode: str
    text: str
    vec: np.ndarray | None
    dim: int | None
    where: str
    params: list
    candidates: int
    ef_search: int
    catalog: str
    region: str  # default region of phone numbers in the query (as the documents were indexed)
    indexed: bool  # an HNSW index serves the unfiltered vector query (not in an encrypted store)
    lex_text: str | None = None  # what BM25 ranks on when not ``text`` (a routed name kept)

    @property
    def lexical_text(self) -> str:
        return self.text if self.lex_text is None else self.lex_text

    @property
    def filtered(self) -> bool:
        return self.where != "TRUE"

    @property
    def vector_strategy(self) -> str:
        return "hnsw" if self.indexed and not self.filtered else "exact"

    @property
    def use_vec(self) -> bool:
        return self.mode in _VECTOR_MODES

    @property
    def use_lex(self) -> bool:
        return self.mode in _LEXICAL_MODES


def search(
    con: duckdb.DuckDBPyConnection,
    *,
    query_text: str,
    query_vec: np.ndarray | None,
    mode: str = "hybrid",
    k: int = 10,
    fusion: Fusion | None = None,
    filters: Filters = Filters(),
    ef_search: int = IndexParams.ef_search,
    candidates: int = 50,
    merge: bool = True,
    diversity: float | None = None,
    min_similarity: float | None = None,
    parallel: bool = True,
    region: str = DEFAULT_REGION,
    topics: bool = False,
    resident: Resident | None = None,
    lexical_text: str | None = None,
    lines: bool = True,
) -> SearchResult:
    """Search the chunk store (and with ``topics`` the topic summaries, see :mod:`.topics`).

    Args:
        query_text: text for BM25 (the routed rest of the query).
        query_vec: ``(dim,)`` float32 query embedding from the store's model; required by the
            ``hybrid`` and ``vector`` modes.
        mode: ``hybrid`` (both lists fused), ``vector`` or ``lexical``.
        k: hits returned.
        fusion: how hybrid combines its lists (default :class:`Fusion`'s defaults).
        filters: what to keep (:class:`~.sql.Filters`), applied before any top-n.
        ef_search: HNSW search breadth (``hnsw_ef_search``).
        candidates: depth of each candidate list (at least ``2 * k`` when merging).
        merge: fold hits whose windows overlap in one conversation into one hit.
        diversity: MMR trade-off in (0, 1] for near-duplicate passages across conversations
            (1 = relevance only); None keeps the fused order.
        min_similarity: the relevance floor: ``confident`` is False when no candidate's cosine
            similarity reaches it and no specific term matched; None leaves ``confident`` None.
        parallel: in hybrid mode, run the BM25 query on a second connection in a worker thread.
        region: default region for phone numbers typed without a country code (the settings'
            ``default_region``, which the documents' phone tokens were made with).
        topics: also rank topic summaries (:class:`.topics.TopicHit`; none under a channel filter).
        resident: the store's chunks held in memory (:class:`.resident.Resident`, loaded from
            ``con``'s store): both lists, the filters and the rows come from it, with the same
            answers as the SQL path; the topics still come from ``con``.
        lexical_text: what BM25 ranks on, if not ``query_text`` (a routed name kept in it).
        lines: in hybrid mode, re-rank the candidates by their best message line when the store
            has line vectors (:mod:`.lines`); False keeps the fused order (for comparisons).

    Raises:
        StoreError: no store, a missing or damaged index (the message names the rebuild
            command), or a query vector of the wrong dimension.
    """
    _check_options(mode, diversity)
    t_start, fusion = time.perf_counter(), fusion or Fusion()
    q = _prepare(con, mode, query_text, query_vec, k, candidates, merge, ef_search, filters.sql(), region,
                 resident.state if resident else None, lexical_text)
    result = SearchResult(query=query_text, mode=mode)
    if q.use_vec:
        result.vector_strategy = "memory" if resident is not None else q.vector_strategy
    vec_rows, lex_rows, term_stats, result.lexical_coverage = (
        _resident_candidates(con, resident, q, resident.mask(filters), result.timings_ms)
        if resident is not None else _candidates(con, q, parallel, result.timings_ms))
    result.vector_candidates, result.lexical_candidates = len(vec_rows), len(lex_rows)
    if term_stats is not None:
        result.specific = is_specific(q.lexical_text, term_stats[0], term_stats[1], fusion.rare_df_share)
    tv, tl = (topic_candidates(con, q, filters.topic_sql()) if topics and filters.chunk_ids is None
              else ([], []))
    (fused, fused_topics), result.timings_ms["fuse"] = _timed(_ranked, _Rows(con, resident), q, result, fusion,
                                                              joint(vec_rows, tv), joint(lex_rows, tl), lines)
    (result.hits, result.merged), result.timings_ms["fetch"] = _timed(
        _passages, _Rows(con, resident), q, fused, k, merge, diversity, vec_rows, lex_rows)
    result.hits = interleave(result.hits, topic_hits(con, fused_topics, tv, tl), k)
    _judge(result, q, min_similarity, vec_rows, lex_rows)
    result.timings_ms["total"] = (time.perf_counter() - t_start) * 1000
    log.debug("Search - %s k=%d: %d hits in %.1f ms", mode, k, len(result.hits), result.timings_ms["total"])
    return result


def _check_options(mode: str, diversity: float | None) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown search mode {mode!r}; expected one of {MODES}")
    if diversity is not None and not 0 < diversity <= 1:
        raise ValueError(f"diversity must be in (0, 1], got {diversity}")


def _judge(result: SearchResult, q: _Query, min_similarity: float | None, vec_rows: list, lex_rows: list) -> None:
    """The best candidate's similarity, and whether it clears the relevance floor (or a specific term matched)."""
    if q.use_vec and vec_rows:
        result.top_similarity = float(vec_rows[0][1])
    if min_similarity is not None and q.use_vec:
        close = result.top_similarity is not None and result.top_similarity >= min_similarity
        result.confident = bool(close or (result.specific and lex_rows))


def _prepare(con: duckdb.DuckDBPyConnection, mode: str, text: str, query_vec: np.ndarray | None, k: int,
             candidates: int, merge: bool, ef_search: int, where: tuple[str, list], region: str,
             state: tuple | None, lexical_text: str | None = None) -> _Query:
    """Check the store and the query vector; the candidate depth. ``where``: :func:`.sql.filters`;
    ``state``: the store's :func:`.sql.store_state` when known (read here when None)."""
    use_vec, use_lex = mode in _VECTOR_MODES, mode in _LEXICAL_MODES
    has_chunks, vector, has_fts, dim, catalog = state or store_state(con)
    if not has_chunks:
        raise StoreError("no search store yet: run `brb ingest` first")
    if (use_vec and vector is None) or (use_lex and not has_fts):
        raise _missing_index()
    vec = None
    if use_vec:
        if query_vec is None:
            raise ValueError("vector and hybrid modes: the search needs query_vec")
        vec = np.asarray(query_vec, dtype=np.float32).reshape(-1)
        if vec.shape[0] != dim:
            raise StoreError(
                f"query vector has {vec.shape[0]} dims but the store holds {dim}-d vectors: "
                "search with the model the store was built with"
            )
    k = int(k)
    depth = max(int(candidates), 2 * k if merge else k)
    return _Query(mode, text, vec, dim, where[0], where[1], depth, max(int(ef_search), depth, 1), catalog, region,
                  vector == "hnsw", lexical_text)


def _candidates(con: duckdb.DuckDBPyConnection, q: _Query, parallel: bool,
                timings: dict[str, float]) -> tuple[list, list, tuple[int | None, int] | None, float | None]:
    """Both candidate lists (hybrid: BM25 on a second connection in a worker thread while the
    vector query runs here; DuckDB releases the GIL, so hybrid costs about the slower one)."""
    vec_rows: list[tuple[str, float]] = []
    lex: tuple[list, tuple[int | None, int], float] = ([], (None, 0), 0.0)
    use_vec, use_lex = q.use_vec, q.use_lex
    if use_vec and use_lex and parallel:
        cur = con.cursor()
        cur.execute(f"USE {_quote(q.catalog)}")
        future: Future = _POOL.submit(_timed, _lexical_candidates, cur, q)
        try:
            vec_rows, timings["vector"] = _timed(_vector_candidates, con, q)
        finally:
            wait([future])  # never close the cursor under a running query
            cur.close()
        lex, timings["lexical"] = future.result()
    else:
        if use_vec:
            vec_rows, timings["vector"] = _timed(_vector_candidates, con, q)
        if use_lex:
            lex, timings["lexical"] = _timed(_lexical_candidates, con, q)
    return vec_rows, lex[0], (lex[1] if use_lex else None), (lex[2] if use_lex else None)


def _resident_candidates(con: duckdb.DuckDBPyConnection, r: Resident, q: _Query, keep: np.ndarray | None,
                         timings: dict[str, float]) -> tuple[list, list, tuple[int | None, int] | None, float | None]:
    """:func:`_candidates` from a :class:`.resident.Resident` (the query tokenized by ``con``'s index)."""
    vec_rows: list[tuple[str, float]] = []
    lex_rows: list[tuple[str, float]] = []
    stats, coverage = None, None
    if q.use_vec:
        vec_rows, timings["vector"] = _timed(r.vector_top, q.vec, q.candidates, keep)
    if q.use_lex:
        t0 = time.perf_counter()
        specific = specific_terms(q.lexical_text)
        tokens = r.tokens(con, fts_query_text(q.lexical_text, q.region), *([" ".join(specific)] if specific else []))
        lex_rows, coverage = r.lexical_top_coverage(tokens[0], q.candidates, keep)
        stats = (r.min_df(tokens[1]), r.num_docs) if specific else (None, 0)
        timings["lexical"] = (time.perf_counter() - t0) * 1000
    return vec_rows, lex_rows, stats, coverage


def _timed(fn, *args):  # noqa: ANN001, ANN202 - a tiny local helper
    t0 = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - t0) * 1000


def _vector_candidates(c: duckdb.DuckDBPyConnection, q: _Query) -> list[tuple[str, float]]:
    """``(chunk_id, cosine similarity)`` best first."""
    try:
        if q.filtered:
            rows = c.execute(vector_sql(q.dim, filtered=True, where=q.where),
                             [q.vec.tolist(), *q.params, q.candidates]).fetchall()
        else:
            if q.indexed:
                c.execute(f"SET hnsw_ef_search = {q.ef_search}")
            rows = c.execute(vector_sql(q.dim, filtered=False), [q.vec.tolist(), q.candidates]).fetchall()
    except duckdb.Error as exc:
        raise StoreError(f"vector index damaged ({type(exc).__name__}): {REBUILD_HINT}") from None
    rows.sort(key=lambda r: (r[1], r[0]))
    return [(cid, 1.0 - float(d)) for cid, d in rows]


def _lexical_candidates(c: duckdb.DuckDBPyConnection, q: _Query
                        ) -> tuple[list[tuple[str, float]], tuple[int | None, int], float]:
    """``(chunk_id, BM25)`` best first; (smallest document frequency of the query's
    :func:`.fusion.specific_terms` in the index, number of indexed chunks) for
    :func:`.fusion.is_specific`; the best coverage of a candidate (:meth:`.fusion.Fusion.weight_for`)."""
    text = fts_query_text(q.lexical_text, q.region)
    terms = specific_terms(q.lexical_text)
    try:
        rows = c.execute(lexical_sql(q.where, coverage=True), [text, *q.params, q.candidates]).fetchall()
        stats = c.execute(term_stats_sql(), [" ".join(terms)]).fetchone() if terms else (None, 0)
    except duckdb.Error as exc:
        raise StoreError(f"text index damaged ({type(exc).__name__}): {REBUILD_HINT}") from None
    rows.sort(key=lambda r: (-r[1], r[0]))
    coverage = max((float(r[2] or 0.0) for r in rows), default=0.0)
    return [(cid, float(s)) for cid, s, _ in rows], (stats[0], int(stats[1] or 0)), coverage


def _ranked(rows_of: _Rows, q: _Query, result: SearchResult, fusion: Fusion, vec: list, lex: list,
            by_lines: bool = True) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """The fused chunks and topics; in hybrid mode re-ranked by their best message line
    (:mod:`.lines`); chunks that hold every quoted phrase of the query first."""
    fused, fused_topics = split(_fuse(q.mode, vec, lex, fusion, result.specific, result.lexical_coverage))
    if by_lines and q.mode == "hybrid" and fused:
        vectors = rows_of.lines([c for c, _ in fused], q.dim)  # {} when the store has none
        if vectors:
            fused = lines_mod.rerank(fused, lines_mod.line_vector_order([c for c, _ in fused], vectors, q.vec))
            result.lines_reranked = True
    result.phrases = quoted_phrases(q.lexical_text)
    if result.phrases:
        fused = phrase_first(fused, rows_of.fetch([c for c, _ in fused], "chunk_id, content"), result.phrases)
    return fused, fused_topics


def _fuse(mode: str, vec_rows: list[tuple[str, float]], lex_rows: list[tuple[str, float]], fusion: Fusion,
          specific: bool, coverage: float | None = None) -> list[tuple[str, float]]:
    """``(chunk_id, score)`` best first: both lists fused in hybrid mode, else the one list."""
    if mode == "hybrid":
        return fuse(vec_rows, lex_rows, fusion, specific=specific, coverage=coverage)
    return list(vec_rows if mode == "vector" else lex_rows)


def _passages(rows_of: _Rows, q: _Query, fused: list[tuple[str, float]], k: int, merge: bool,
              diversity: float | None, vec_rows: list[tuple[str, float]], lex_rows: list[tuple[str, float]]
              ) -> tuple[list[Hit], int]:
    """The top ``k`` hits of the fused list (overlapping windows merged, MMR-diversified if asked),
    and how many candidates were folded into an earlier hit."""
    # Two reads: the small columns of every candidate (to merge), then the texts of what is shown
    # (the text is most of a row, so it is fetched for the k hits only).
    meta = rows_of.fetch([cid for cid, _ in fused] if merge or diversity else [cid for cid, _ in fused[:k]],
                         _META_COLUMNS)
    spans = [Span(cid, meta[cid][1], meta[cid][2], meta[cid][3], meta[cid][4], float(score), i, [cid])
             for i, (cid, score) in enumerate(fused) if cid in meta]
    merged = merge_overlapping(spans) if merge else spans
    n_merged = len(spans) - len(merged)
    if diversity is not None and len(merged) > 1:
        vecs = rows_of.embeddings([g.chunk_id for g in merged], q.dim)
        merged = [merged[i] for i in mmr_order([g.score for g in merged], vecs, diversity, k)]
    rows = rows_of.fetch([c for g in merged[:k] for c in g.chunk_ids], _HIT_COLUMNS)
    return _attach([g for g in merged[:k] if g.chunk_id in rows], rows, dict(vec_rows), lex_rows), n_merged


def _attach(groups: Sequence[Span], rows: dict[str, tuple], vec: dict[str, float],
            lex_rows: Sequence[tuple[str, float]]) -> list[Hit]:
    """Hits for the merged groups: the best member's row, the union of the members' lines in
    chat order, and the best member's list ranks and scores."""
    vec_rank = {cid: i for i, cid in enumerate(vec, start=1)}
    lex_info = {cid: (rank, s) for rank, (cid, s) in enumerate(lex_rows, start=1)}
    hits = []
    for g in groups:
        hit = Hit(*rows[g.chunk_id][:8])
        members = sorted((c for c in g.chunk_ids if c in rows),
                         key=lambda c: (rows[c][4] if rows[c][4] is not None else 0, c))
        if len(members) > 1:
            hit.content = merge_lines([rows[c][7] or "" for c in members])
            starts = [rows[c][5] for c in members if rows[c][5] is not None]  # None: no valid date
            ends = [rows[c][6] for c in members if rows[c][6] is not None]
            hit.start_ts = min(starts) if starts else None
            hit.end_ts = max(ends) if ends else None
        hit.chunk_ids = list(g.chunk_ids)
        hit.score = g.score
        best_vec = [c for c in g.chunk_ids if c in vec]
        if best_vec:
            c = min(best_vec, key=vec_rank.__getitem__)
            hit.vector_rank, hit.vector_score = vec_rank[c], vec[c]
        best_lex = [c for c in g.chunk_ids if c in lex_info]
        if best_lex:
            c = min(best_lex, key=lambda x: lex_info[x][0])
            hit.lexical_rank, hit.lexical_score = lex_info[c]
        hits.append(hit)
    return hits


@dataclass(frozen=True)
class _Rows:
    """Where :func:`_passages` reads candidates' rows: the resident copy when there is one, else SQL."""

    con: duckdb.DuckDBPyConnection
    resident: Resident | None

    def fetch(self, chunk_ids: list[str], columns: str) -> dict[str, tuple]:
        if self.resident is not None:
            return self.resident.rows(chunk_ids, [c.strip() for c in columns.split(",")])
        return _fetch(self.con, chunk_ids, columns)

    def embeddings(self, chunk_ids: list[str], dim: int | None) -> np.ndarray:
        if self.resident is not None:
            return self.resident.embeddings(chunk_ids)
        return _embeddings(self.con, chunk_ids, dim)

    def lines(self, chunk_ids: list[str], dim: int | None) -> dict[str, np.ndarray]:
        """chunk_id -> its message lines' unit vectors; {} when the store has none of its model."""
        if self.resident is not None:
            return self.resident.line_vectors(chunk_ids)
        return _line_vectors(self.con, chunk_ids, dim)


def _fetch(con: duckdb.DuckDBPyConnection, chunk_ids: list[str], columns: str) -> dict[str, tuple]:
    """chunk_id -> ``columns`` (chunk_id first) for the ids still in the store."""
    if not chunk_ids:
        return {}
    rows = con.execute(
        # list_contains is faster here than IN (SELECT unnest(?)) or IN (?, ?, ...).
        f"SELECT {columns} FROM chunks WHERE list_contains(?::VARCHAR[], chunk_id)", [chunk_ids]
    ).fetchall()
    return {r[0]: r for r in rows}


def _line_vectors(con: duckdb.DuckDBPyConnection, chunk_ids: list[str], dim: int | None) -> dict[str, np.ndarray]:
    if not chunk_ids or dim is None or not line_index.present(con):
        return {}
    try:
        rows = con.execute(line_index.fetch_sql(chunk_ids)).fetchall()
    except duckdb.Error as exc:
        raise StoreError(f"message-line vectors damaged ({type(exc).__name__}): {REBUILD_HINT}") from None
    # a row of another length than lines x dim (never written so) is left out, not trusted
    return {cid: line_index.dequantize(blob, dim) for cid, blob in rows if blob and len(blob) % dim == 0}


def _embeddings(con: duckdb.DuckDBPyConnection, chunk_ids: list[str], dim: int | None) -> np.ndarray:
    """``(len(chunk_ids), dim)`` stored vectors in the order given."""
    tbl = con.execute("SELECT chunk_id, embedding FROM chunks WHERE list_contains(?::VARCHAR[], chunk_id)",
                      [chunk_ids]).fetch_arrow_table()
    ids = tbl.column("chunk_id").to_pylist()
    flat = tbl.column("embedding").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    mat = flat.reshape(len(ids), -1) if ids else np.zeros((0, dim or 1), dtype=np.float32)
    at = {cid: i for i, cid in enumerate(ids)}
    return np.stack([mat[at[c]] for c in chunk_ids]) if chunk_ids else mat


def neighbours(con: duckdb.DuckDBPyConnection, chunk_id: str, span: int = 1) -> list[Hit]:
    """The chunks around ``chunk_id`` in its chat: positions ``p - span .. p + span``.

    Returns:
        Hits ordered by position, the chunk itself included; ``[]`` for an unknown id.
    """
    cols = ", ".join("n." + c.strip() for c in _HIT_COLUMNS.split(","))
    rows = con.execute(
        f"SELECT {cols} FROM chunks n JOIN (SELECT chat_id, position FROM chunks WHERE chunk_id = ?) c "
        "ON n.chat_id = c.chat_id AND n.position BETWEEN c.position - ? AND c.position + ? "
        "ORDER BY n.position, n.chunk_id",
        [chunk_id, int(span), int(span)],
    ).fetchall()
    return [Hit(*r) for r in rows]
