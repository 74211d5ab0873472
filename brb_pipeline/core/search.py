"""Hybrid search over the chunk store: HNSW vectors + BM25 text, fused with Reciprocal Rank Fusion.

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
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone

import duckdb
import numpy as np

from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.index import FTS_PARAMS, FTS_SCHEMA, HNSW_INDEX, REBUILD_HINT, fts_query_text

log = logging.getLogger(__name__)

MODES = ("hybrid", "vector", "lexical")
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="brb-bm25")
_HIT_COLUMNS = "chunk_id, contact_id, chat_id, channel, position, start_ts, end_ts, content"


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
    score: float = 0.0  # fused RRF score (or the single list's score in one-list modes)


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
    timings_ms: dict[str, float] = field(default_factory=dict)


def rrf_fuse(lists: Sequence[Sequence[str]], k: int = 60) -> list[tuple[str, float]]:
    """Reciprocal Rank Fusion: ``score(d) = sum over lists of 1 / (k + rank_d)``, rank 1-based.

    Args:
        lists: ranked id lists, best first. A repeated id counts at its first position only.
        k: RRF constant; larger flattens the weight of top ranks.

    Returns:
        ``(id, score)`` best first. Ties break by best single rank, then id, so the order is
        deterministic.
    """
    scores: dict[str, float] = {}
    best: dict[str, int] = {}
    for ranked in lists:
        seen: set[str] = set()
        for rank, doc in enumerate(ranked, start=1):
            if doc in seen:
                continue
            seen.add(doc)
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
            best[doc] = min(best.get(doc, rank), rank)
    return sorted(scores.items(), key=lambda item: (-item[1], best[item[0]], item[0]))


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


def search(
    con: duckdb.DuckDBPyConnection,
    *,
    query_text: str,
    query_vec: np.ndarray | None,
    mode: str = "hybrid",
    k: int = 10,
    rrf_k: int = 60,
    contact_ids: Sequence[str] | None = None,
    channel: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    ef_search: int = 64,
    candidates: int = 50,
    parallel: bool = True,
) -> SearchResult:
    """Search the chunk store.

    Args:
        query_text: text for BM25 (the routed rest of the query).
        query_vec: ``(dim,)`` float32 query embedding from the store's model; required by the
            ``hybrid`` and ``vector`` modes.
        mode: ``hybrid`` (RRF of both lists), ``vector`` or ``lexical``.
        k: hits returned.
        rrf_k: RRF constant.
        contact_ids, channel, since, until: filters, applied before any top-n; ``since``/``until``
            keep chunks overlapping ``[since, until)`` (naive datetimes are UTC).
        ef_search: HNSW search breadth (``hnsw_ef_search``).
        candidates: depth of each candidate list (at least ``k``).
        parallel: in hybrid mode, run the BM25 query on a second connection in a worker thread.

    Raises:
        StoreError: no store, a missing or damaged index (the message names the rebuild
            command), or a query vector of the wrong dimension.
    """
    if mode not in MODES:
        raise ValueError(f"unknown search mode {mode!r}; expected one of {MODES}")
    t_start = time.perf_counter()
    result = SearchResult(query=query_text, mode=mode)
    has_chunks, has_hnsw, has_fts, dim, catalog = _store_state(con)
    if not has_chunks:
        raise StoreError("no search store yet: run `brb ingest` first")
    use_vec, use_lex = mode in ("hybrid", "vector"), mode in ("hybrid", "lexical")
    if (use_vec and not has_hnsw) or (use_lex and not has_fts):
        raise _missing_index()
    k, candidates = int(k), max(int(candidates), int(k))
    where, params = _filters(contact_ids, channel, since, until)
    filtered = where != "TRUE"

    q = None
    if use_vec:
        if query_vec is None:
            raise ValueError(f"mode {mode!r} needs query_vec")
        q = np.asarray(query_vec, dtype=np.float32).reshape(-1)
        if q.shape[0] != dim:
            raise StoreError(
                f"query vector has {q.shape[0]} dims but the store holds {dim}-d vectors: "
                "search with the model the store was built with"
            )
        result.vector_strategy = "exact" if filtered else "hnsw"

    def run_vector(c: duckdb.DuckDBPyConnection) -> tuple[list, float]:
        t0 = time.perf_counter()
        try:
            if filtered:
                rows = c.execute(vector_sql(dim, filtered=True, where=where), [q.tolist(), *params, candidates]).fetchall()
            else:
                c.execute(f"SET hnsw_ef_search = {max(int(ef_search), 1)}")
                rows = c.execute(vector_sql(dim, filtered=False), [q.tolist(), candidates]).fetchall()
        except duckdb.Error as exc:
            raise StoreError(f"vector index damaged ({type(exc).__name__}): {REBUILD_HINT}") from None
        rows.sort(key=lambda r: (r[1], r[0]))
        return rows, (time.perf_counter() - t0) * 1000

    def run_lexical(c: duckdb.DuckDBPyConnection) -> tuple[list, float]:
        t0 = time.perf_counter()
        try:
            rows = c.execute(lexical_sql(where), [fts_query_text(query_text), *params, candidates]).fetchall()
        except duckdb.Error as exc:
            raise StoreError(f"text index damaged ({type(exc).__name__}): {REBUILD_HINT}") from None
        rows.sort(key=lambda r: (-r[1], r[0]))
        return rows, (time.perf_counter() - t0) * 1000

    vec_rows: list[tuple[str, float]] = []
    lex_rows: list[tuple[str, float]] = []
    if use_vec and use_lex and parallel:
        # DuckDB releases the GIL: BM25 runs on a second connection of the same database while
        # the vector query runs here, so hybrid costs about the slower of the two.
        cur = con.cursor()
        cur.execute(f"USE {_quote(catalog)}")
        future = _POOL.submit(run_lexical, cur)
        try:
            vec_rows, result.timings_ms["vector"] = run_vector(con)
        finally:
            wait([future])  # never close the cursor under a running query
            cur.close()
        lex_rows, result.timings_ms["lexical"] = future.result()
    else:
        if use_vec:
            vec_rows, result.timings_ms["vector"] = run_vector(con)
        if use_lex:
            lex_rows, result.timings_ms["lexical"] = run_lexical(con)
    result.vector_candidates, result.lexical_candidates = len(vec_rows), len(lex_rows)

    t0 = time.perf_counter()
    vec_info = {cid: (rank, 1.0 - dist) for rank, (cid, dist) in enumerate(vec_rows, start=1)}
    lex_info = {cid: (rank, score) for rank, (cid, score) in enumerate(lex_rows, start=1)}
    if mode == "hybrid":
        fused = rrf_fuse([[r[0] for r in vec_rows], [r[0] for r in lex_rows]], k=rrf_k)[:k]
    elif mode == "vector":
        fused = [(cid, vec_info[cid][1]) for cid, _ in vec_rows[:k]]
    else:
        fused = [(cid, score) for cid, score in lex_rows[:k]]
    result.timings_ms["fuse"] = (time.perf_counter() - t0) * 1000

    t0 = time.perf_counter()
    details = _fetch(con, [cid for cid, _ in fused])
    for cid, score in fused:
        hit = details.get(cid)
        if hit is None:  # deleted between the candidate query and now
            continue
        hit.score = float(score)
        if cid in vec_info:
            hit.vector_rank, hit.vector_score = vec_info[cid][0], float(vec_info[cid][1])
        if cid in lex_info:
            hit.lexical_rank, hit.lexical_score = lex_info[cid][0], float(lex_info[cid][1])
        result.hits.append(hit)
    result.timings_ms["fetch"] = (time.perf_counter() - t0) * 1000
    result.timings_ms["total"] = (time.perf_counter() - t_start) * 1000
    log.debug("Search - %s k=%d: %d hits in %.1f ms", mode, k, len(result.hits), result.timings_ms["total"])
    return result


def _fetch(con: duckdb.DuckDBPyConnection, chunk_ids: list[str]) -> dict[str, Hit]:
    if not chunk_ids:
        return {}
    rows = con.execute(
        # list_contains measured ~2x faster than IN (SELECT unnest(?)) and IN (?, ?, ...) here.
        f"SELECT {_HIT_COLUMNS} FROM chunks WHERE list_contains(?::VARCHAR[], chunk_id)", [chunk_ids]
    ).fetchall()
    return {r[0]: Hit(*r) for r in rows}


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
