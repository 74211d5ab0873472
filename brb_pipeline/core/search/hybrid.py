"""Hybrid search over the chunk store: HNSW vectors + BM25 text, fused (see :mod:`.fusion`),
overlapping windows merged into one passage, with a relevance floor.

Query forms (measured on duckdb 1.4.4, see ``benchmarks/bench_search.py`` and its JSON):

* Unfiltered vector search is ``ORDER BY array_cosine_distance(embedding, ?::FLOAT[d]) LIMIT n``
  with the vector bound as a parameter; the plan uses ``HNSW_INDEX_SCAN`` and it was faster than
  an inlined literal in every run here (20K chunks: 6 vs 11 ms p50; 64K: 12.5 vs 19 ms), unlike
  the 1.5.5 measurement in DESIGN.md: parsing 384 float literals costs more than binding.
* Filtered vector search is an exact scan over the filtered rows. DuckDB applies a ``WHERE``
  after the HNSW top-n, so a filtered HNSW query can return fewer than k rows; the exact scan
  applies filters first and is cheap when the filter is selective (a contact). The optimizer
  rewrites ``WHERE x = ? ORDER BY d LIMIT n`` into an HNSW scan, so the exact query sorts by
  ``d, chunk_id`` (a shape it leaves alone; tested with EXPLAIN).
* BM25 is the ``match_bm25`` formula over the FTS tables (see :func:`lexical_sql`), with the
  filters joined in before the top-n as well.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

import duckdb
import numpy as np

from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.search.fusion import (Fusion, Span, fuse, is_specific, merge_lines, merge_overlapping, mmr_order,
                                      specific_terms)
from brb_pipeline.core.search.fusion import rrf_fuse as rrf_fuse  # noqa: F401 - re-exported for callers of search
from brb_pipeline.core.store.index import FTS_PARAMS, FTS_SCHEMA, HNSW_INDEX, REBUILD_HINT, fts_query_text

log = logging.getLogger(__name__)

MODES = ("hybrid", "vector", "lexical")
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


@dataclass
class SearchResult:
    """Hits best first, plus what the search did. ``timings_ms`` keys: vector, lexical, fuse,
    fetch, total (milliseconds)."""

    query: str
    mode: str
    hits: list[Hit] = field(default_factory=list)
    vector_strategy: str | None = None  # "hnsw" | "exact" | None
    vector_candidates: int = 0
    lexical_candidates: int = 0
    merged: int = 0  # candidate chunks folded into an earlier hit of the same passage
    specific: bool = False  # the query has a rare, numeric or quoted term (lexical weighs more)
    top_similarity: float | None = None  # best cosine similarity of any candidate
    confident: bool | None = None  # top_similarity >= the floor, or a specific term matched; None: not judged
    timings_ms: dict[str, float] = field(default_factory=dict)


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def _filters(
    contact_ids: Sequence[str] | None, channel: str | None, since: datetime | None, until: datetime | None
) -> tuple[str, list]:
    """SQL conjunction (or ``TRUE``) and its parameters. ``since``/``until`` select chunks that
    overlap ``[since, until)``."""
    clauses: list[str] = []
    params: list = []
    if contact_ids is not None:
        clauses.append("list_contains(?::VARCHAR[], contact_id)")
        params.append(list(contact_ids))
    if channel is not None:
        clauses.append("channel = ?")
        params.append(channel)
    if since is not None:
        clauses.append("end_ts >= ?")
        params.append(_utc(since))
    if until is not None:
        clauses.append("start_ts < ?")
        params.append(_utc(until))
    return (" AND ".join(clauses) or "TRUE"), params


def vector_sql(dim: int, *, filtered: bool, where: str = "TRUE") -> str:
    """The vector candidate query: HNSW-eligible when unfiltered, exact scan otherwise.

    Parameters: the query vector, then the filter parameters (filtered only), then the limit.
    """
    dist = f"array_cosine_distance(embedding, ?::FLOAT[{int(dim)}])"
    if not filtered:
        # Exactly the shape the vss optimizer rewrites into HNSW_INDEX_SCAN.
        return f"SELECT chunk_id, {dist} AS d FROM chunks ORDER BY d LIMIT ?"
    # The second sort key keeps the vss optimizer from rewriting this into an HNSW scan that
    # would apply the WHERE after its top-n (it does so for ``WHERE channel = ?``).
    return f"SELECT chunk_id, {dist} AS d FROM chunks WHERE {where} ORDER BY d, chunk_id LIMIT ?"


def lexical_sql(where: str = "TRUE") -> str:
    """The BM25 candidate query. Parameters: query text, filter parameters, limit.

    Same tokenizer, dictionary and formula as ``fts_main_chunks.match_bm25`` (Okapi BM25,
    k1 = 1.2, b = 0.75, disjunctive; a test checks the scores match), but scored per ``docid``
    and joined to ``chunks`` only for the scored documents: the macro instead evaluates a
    correlated lookup for every row of ``chunks``, which measured ~30% slower at 64K chunks.
    """
    s = FTS_SCHEMA
    join = f" JOIN chunks ON chunks.chunk_id = docs.name WHERE {where}" if where != "TRUE" else ""
    return (
        f"WITH qtok AS (SELECT DISTINCT stem(unnest({s}.tokenize(?)), '{FTS_PARAMS['stemmer']}') AS t), "
        f"qt AS (SELECT d.termid, d.df FROM {s}.dict d JOIN qtok ON d.term = qtok.t), "
        f"tf AS (SELECT docid, termid, count(*) AS tf FROM {s}.terms "
        "WHERE termid IN (SELECT termid FROM qt) GROUP BY docid, termid), "
        "sc AS (SELECT tf.docid, sum(log(((st.num_docs - qt.df) + 0.5) / (qt.df + 0.5) + 1) "
        "* ((tf.tf * (1.2 + 1)) / (tf.tf + 1.2 * ((1 - 0.75) + 0.75 * (docs.len / st.avgdl))))) AS score "
        f"FROM tf JOIN qt ON tf.termid = qt.termid JOIN {s}.docs docs ON docs.docid = tf.docid "
        f"CROSS JOIN {s}.stats st GROUP BY tf.docid) "
        f"SELECT docs.name AS chunk_id, sc.score FROM sc JOIN {s}.docs docs ON docs.docid = sc.docid{join} "
        "ORDER BY sc.score DESC, docs.name LIMIT ?"
    )


def _store_state(con: duckdb.DuckDBPyConnection) -> tuple[bool, bool, bool, int | None, str]:
    """(chunks table, HNSW index, FTS index, embedding dim, catalog) from two cheap catalog reads (~1 ms;
    ``duckdb_columns()`` alone costs more, so the dim comes from ``meta``)."""
    row = con.execute(
        "SELECT count(*) FILTER (WHERE schema_name = 'main' AND table_name = 'chunks'),"
        " count(*) FILTER (WHERE schema_name = ? AND table_name IN ('docs', 'dict', 'terms', 'stats')),"
        " count(*) FILTER (WHERE schema_name = 'main' AND table_name = 'meta'),"
        " (SELECT count(*) FROM duckdb_indexes() WHERE database_name = current_database() AND index_name = ?),"
        " any_value(current_database())"
        " FROM duckdb_tables() WHERE database_name = current_database()",
        [FTS_SCHEMA, HNSW_INDEX],
    ).fetchone()
    has_chunks, fts_tables, has_meta, has_hnsw, catalog = row
    dim = None
    if has_chunks and has_meta:
        got = con.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
        dim = int(got[0]) if got else None
    if has_chunks and dim is None:
        typ = con.execute(
            "SELECT any_value(data_type) FROM duckdb_columns() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND table_name = 'chunks' AND column_name = 'embedding'"
        ).fetchone()[0]
        dim = int(typ.split("[")[1].rstrip("]"))
    return bool(has_chunks), bool(has_hnsw), fts_tables == 4, dim, catalog or ""


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _missing_index() -> StoreError:
    return StoreError(f"search index missing: {REBUILD_HINT}")


@dataclass(frozen=True)
class _Query:
    """What every candidate query needs: mode, vector, filters and depth."""

    text: str
    vec: np.ndarray | None
    dim: int | None
    where: str
    params: list
    candidates: int
    ef_search: int
    catalog: str
    region: str = "US"  # default region of phone numbers in the query (as the documents were indexed)

    @property
    def filtered(self) -> bool:
        return self.where != "TRUE"


def search(
    con: duckdb.DuckDBPyConnection,
    *,
    query_text: str,
    query_vec: np.ndarray | None,
    mode: str = "hybrid",
    k: int = 10,
    rrf_k: int | None = None,
    fusion: Fusion | None = None,
    contact_ids: Sequence[str] | None = None,
    channel: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    ef_search: int = 64,
    candidates: int = 50,
    merge: bool = True,
    diversity: float | None = None,
    min_similarity: float | None = None,
    parallel: bool = True,
    region: str = "US",
) -> SearchResult:
    """Search the chunk store.

    Args:
        query_text: text for BM25 (the routed rest of the query).
        query_vec: ``(dim,)`` float32 query embedding from the store's model; required by the
            ``hybrid`` and ``vector`` modes.
        mode: ``hybrid`` (both lists fused), ``vector`` or ``lexical``.
        k: hits returned.
        rrf_k: RRF constant (overrides ``fusion.rrf_k``; kept for older callers).
        fusion: how hybrid combines its lists (default :class:`Fusion`'s defaults).
        contact_ids, channel, since, until: filters, applied before any top-n; ``since``/``until``
            keep chunks overlapping ``[since, until)`` (naive datetimes are UTC).
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

    Raises:
        StoreError: no store, a missing or damaged index (the message names the rebuild
            command), or a query vector of the wrong dimension.
    """
    if mode not in MODES:
        raise ValueError(f"unknown search mode {mode!r}; expected one of {MODES}")
    if diversity is not None and not 0 < diversity <= 1:
        raise ValueError(f"diversity must be in (0, 1], got {diversity}")
    t_start = time.perf_counter()
    fusion = fusion or Fusion()
    if rrf_k is not None:
        fusion = dataclasses.replace(fusion, rrf_k=int(rrf_k))
    result = SearchResult(query=query_text, mode=mode)
    use_vec, use_lex = mode in ("hybrid", "vector"), mode in ("hybrid", "lexical")
    q = replace(_prepare(con, query_text, query_vec, use_vec, use_lex, k, candidates, merge, ef_search,
                         _filters(contact_ids, channel, since, until)), region=region)
    if use_vec:
        result.vector_strategy = "exact" if q.filtered else "hnsw"

    vec_rows, lex_rows, term_stats = _candidates(con, q, use_vec, use_lex, parallel, result.timings_ms)
    result.vector_candidates, result.lexical_candidates = len(vec_rows), len(lex_rows)
    if term_stats is not None:
        result.specific = is_specific(query_text, term_stats[0], term_stats[1], fusion.rare_df_share)

    t0 = time.perf_counter()
    if mode == "hybrid":
        fused = fuse(vec_rows, lex_rows, fusion, specific=result.specific)
    else:
        fused = list(vec_rows if use_vec else lex_rows)
    result.timings_ms["fuse"] = (time.perf_counter() - t0) * 1000

    t0 = time.perf_counter()
    # Two reads: the small columns of every candidate (to merge), then the texts of what is shown
    # (text is most of a row: fetching it for 100 candidates cost 58 ms at 64K chunks, 13 ms without).
    meta = _fetch(con, [cid for cid, _ in fused] if merge or diversity else [cid for cid, _ in fused[:k]],
                  _META_COLUMNS)
    spans = [Span(cid, meta[cid][1], meta[cid][2], meta[cid][3], meta[cid][4], float(score), i, [cid])
             for i, (cid, score) in enumerate(fused) if cid in meta]
    merged = merge_overlapping(spans) if merge else spans
    result.merged = len(spans) - len(merged)
    if diversity is not None and len(merged) > 1:
        vecs = _embeddings(con, [g.chunk_id for g in merged], q.dim)
        merged = [merged[i] for i in mmr_order([g.score for g in merged], vecs, diversity, k)]
    rows = _fetch(con, [c for g in merged[:k] for c in g.chunk_ids], _HIT_COLUMNS)
    result.hits = _attach([g for g in merged[:k] if g.chunk_id in rows], rows, dict(vec_rows), lex_rows)
    result.timings_ms["fetch"] = (time.perf_counter() - t0) * 1000

    if use_vec and vec_rows:
        result.top_similarity = float(vec_rows[0][1])
    if min_similarity is not None and use_vec:
        close = result.top_similarity is not None and result.top_similarity >= min_similarity
        result.confident = bool(close or (result.specific and lex_rows))
    result.timings_ms["total"] = (time.perf_counter() - t_start) * 1000
    log.debug("Search - %s k=%d: %d hits in %.1f ms", mode, k, len(result.hits), result.timings_ms["total"])
    return result


def _prepare(con: duckdb.DuckDBPyConnection, text: str, query_vec: np.ndarray | None, use_vec: bool, use_lex: bool,
             k: int, candidates: int, merge: bool, ef_search: int, filters: tuple[str, list]) -> _Query:
    """Check the store and the query vector; the candidate depth."""
    has_chunks, has_hnsw, has_fts, dim, catalog = _store_state(con)
    if not has_chunks:
        raise StoreError("no search store yet: run `brb ingest` first")
    if (use_vec and not has_hnsw) or (use_lex and not has_fts):
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
    return _Query(text, vec, dim, filters[0], filters[1], depth, max(int(ef_search), depth, 1), catalog)


def _candidates(con: duckdb.DuckDBPyConnection, q: _Query, use_vec: bool, use_lex: bool, parallel: bool,
                timings: dict[str, float]) -> tuple[list, list, tuple[int | None, int] | None]:
    """Both candidate lists (hybrid: BM25 on a second connection in a worker thread while the
    vector query runs here; DuckDB releases the GIL, so hybrid costs about the slower one)."""
    vec_rows: list[tuple[str, float]] = []
    lex: tuple[list, tuple[int | None, int]] = ([], (None, 0))
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
    return vec_rows, lex[0], (lex[1] if use_lex else None)


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
            c.execute(f"SET hnsw_ef_search = {q.ef_search}")
            rows = c.execute(vector_sql(q.dim, filtered=False), [q.vec.tolist(), q.candidates]).fetchall()
    except duckdb.Error as exc:
        raise StoreError(f"vector index damaged ({type(exc).__name__}): {REBUILD_HINT}") from None
    rows.sort(key=lambda r: (r[1], r[0]))
    return [(cid, 1.0 - float(d)) for cid, d in rows]


def _lexical_candidates(c: duckdb.DuckDBPyConnection, q: _Query) -> tuple[list[tuple[str, float]], tuple[int | None, int]]:
    """``(chunk_id, BM25)`` best first, and (smallest document frequency of the query's
    :func:`.fusion.specific_terms` in the index, number of indexed chunks) for
    :func:`.fusion.is_specific`."""
    text = fts_query_text(q.text, q.region)
    terms = specific_terms(q.text)
    try:
        rows = c.execute(lexical_sql(q.where), [text, *q.params, q.candidates]).fetchall()
        stats = c.execute(term_stats_sql(), [" ".join(terms)]).fetchone() if terms else (None, 0)
    except duckdb.Error as exc:
        raise StoreError(f"text index damaged ({type(exc).__name__}): {REBUILD_HINT}") from None
    rows.sort(key=lambda r: (-r[1], r[0]))
    return [(cid, float(s)) for cid, s in rows], (stats[0], int(stats[1] or 0))


def term_stats_sql() -> str:
    """(min df of the query's terms in the BM25 dictionary, indexed documents). Parameter: the query."""
    s = FTS_SCHEMA
    return (
        f"SELECT (SELECT min(d.df) FROM {s}.dict d WHERE d.term IN "
        f"(SELECT stem(unnest({s}.tokenize(?)), '{FTS_PARAMS['stemmer']}'))), (SELECT num_docs FROM {s}.stats)"
    )


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


def _fetch(con: duckdb.DuckDBPyConnection, chunk_ids: list[str], columns: str) -> dict[str, tuple]:
    """chunk_id -> ``columns`` (chunk_id first) for the ids still in the store."""
    if not chunk_ids:
        return {}
    rows = con.execute(
        # list_contains measured ~2x faster than IN (SELECT unnest(?)) and IN (?, ?, ...) here.
        f"SELECT {columns} FROM chunks WHERE list_contains(?::VARCHAR[], chunk_id)", [chunk_ids]
    ).fetchall()
    return {r[0]: r for r in rows}


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
