"""The SQL that hybrid search runs: filters, the vector and BM25 candidate queries, the
specific-term statistics and the store's catalog state. Builders only; :mod:`.hybrid` runs them.

Query forms (``benchmarks/bench_search.py`` measures them):

* Unfiltered vector search is ``ORDER BY array_cosine_distance(embedding, ?::FLOAT[d]) LIMIT n``
  with the vector bound as a parameter; the plan uses ``HNSW_INDEX_SCAN``, and binding the vector
  is faster than inlining it as a literal (parsing hundreds of float literals costs more).
* Filtered vector search is an exact scan over the filtered rows. DuckDB applies a ``WHERE``
  after the HNSW top-n, so a filtered HNSW query can return fewer than k rows; the exact scan
  applies filters first and is cheap when the filter is selective (a contact). The optimizer
  rewrites ``WHERE x = ? ORDER BY d LIMIT n`` into an HNSW scan, so the exact query sorts by
  ``d, chunk_id`` (a shape it leaves alone; tested with EXPLAIN).
* An encrypted store has no HNSW index (:mod:`brb_pipeline.core.store.index`): the unfiltered
  query is then an exact top-n over every vector (``ORDER BY d LIMIT n`` runs as a TOP_N).
* BM25 is the ``match_bm25`` formula over the FTS tables (see :func:`lexical_sql`), with the
  filters joined in before the top-n as well.
"""

from __future__ import annotations

from dataclasses import dataclass

from collections.abc import Sequence
from datetime import datetime, timezone

import duckdb

from brb_pipeline.core.store.index import FTS_PARAMS, FTS_SCHEMA, HNSW_INDEX


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


@dataclass(frozen=True)
class Filters:
    """What a search keeps, applied before any top-n: chunks of these contacts, of this channel,
    overlapping ``[since, until)`` (naive datetimes are UTC), or only these chunks (``chunk_ids``,
    e.g. the passages a person speaks in; no topics then)."""

    contact_ids: Sequence[str] | None = None
    channel: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    chunk_ids: Sequence[str] | None = None

    def sql(self) -> tuple[str, list]:
        """:func:`filters` of these."""
        return filters(self.contact_ids, self.channel, self.since, self.until, self.chunk_ids)

    def topic_sql(self) -> tuple[str, list] | None:
        """:func:`topic_filters` of these (None: no topic is wanted)."""
        return topic_filters(self.contact_ids, self.channel, self.since, self.until)


def filters(
    contact_ids: Sequence[str] | None, channel: str | None, since: datetime | None, until: datetime | None,
    chunk_ids: Sequence[str] | None = None,
) -> tuple[str, list]:
    """SQL conjunction (or ``TRUE``) and its parameters. ``since``/``until`` select chunks that
    overlap ``[since, until)``; ``chunk_ids`` keeps only those chunks (``--from``)."""
    clauses: list[str] = []
    params: list = []
    if chunk_ids is not None:
        clauses.append("list_contains(?::VARCHAR[], chunk_id)")
        params.append(list(chunk_ids))
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
    """The vector candidate query: HNSW-eligible when unfiltered (an exact top-n where there is no
    index), exact scan otherwise.

    Parameters: the query vector, then the filter parameters (filtered only), then the limit.
    """
    dist = f"array_cosine_distance(embedding, ?::FLOAT[{int(dim)}])"
    if not filtered:
        # Exactly the shape the vss optimizer rewrites into HNSW_INDEX_SCAN.
        return f"SELECT chunk_id, {dist} AS d FROM chunks ORDER BY d LIMIT ?"
    # The second sort key keeps the vss optimizer from rewriting this into an HNSW scan that
    # would apply the WHERE after its top-n (it does so for ``WHERE channel = ?``).
    return f"SELECT chunk_id, {dist} AS d FROM chunks WHERE {where} ORDER BY d, chunk_id LIMIT ?"


def lexical_sql(where: str = "TRUE", *, coverage: bool = False) -> str:
    """The BM25 candidate query. Parameters: query text, filter parameters, limit.

    ``coverage``: a third column, the share of the query's idf mass (its terms found in the
    dictionary) that the document matches, for :func:`.fusion.lexical_weight`.

    Same tokenizer, dictionary and formula as ``fts_main_chunks.match_bm25`` (Okapi BM25,
    k1 = 1.2, b = 0.75, disjunctive; a test checks the scores match), but scored per ``docid``
    and joined to ``chunks`` only for the scored documents: the macro instead evaluates a
    correlated lookup for every row of ``chunks``, which is slower on a large store.
    """
    join = f" JOIN chunks ON chunks.chunk_id = docs.name WHERE {where}" if where != "TRUE" else ""
    return _bm25_sql(FTS_SCHEMA, join, coverage)


def _bm25_sql(s: str, join: str, coverage: bool = False) -> str:
    """:func:`lexical_sql` over the FTS schema ``s``, ``join`` adding the filters."""
    idf = "log(((st.num_docs - qt.df) + 0.5) / (qt.df + 0.5) + 1)"
    cov = (f", sum({idf}) / (SELECT sum({idf}) FROM qt CROSS JOIN {s}.stats st) AS cov" if coverage else "")
    return (
        f"WITH qtok AS (SELECT DISTINCT stem(unnest({s}.tokenize(?)), '{FTS_PARAMS['stemmer']}') AS t), "
        f"qt AS (SELECT d.termid, d.df FROM {s}.dict d JOIN qtok ON d.term = qtok.t), "
        f"tf AS (SELECT docid, termid, count(*) AS tf FROM {s}.terms "
        "WHERE termid IN (SELECT termid FROM qt) GROUP BY docid, termid), "
        f"sc AS (SELECT tf.docid, sum({idf} "
        f"* ((tf.tf * (1.2 + 1)) / (tf.tf + 1.2 * ((1 - 0.75) + 0.75 * (docs.len / st.avgdl))))) AS score{cov} "
        f"FROM tf JOIN qt ON tf.termid = qt.termid JOIN {s}.docs docs ON docs.docid = tf.docid "
        f"CROSS JOIN {s}.stats st GROUP BY tf.docid) "
        f"SELECT docs.name AS chunk_id, sc.score{', sc.cov' if coverage else ''} "
        f"FROM sc JOIN {s}.docs docs ON docs.docid = sc.docid{join} "
        "ORDER BY sc.score DESC, docs.name LIMIT ?"
    )


def topic_filters(contact_ids: Sequence[str] | None, channel: str | None, since: datetime | None,
                  until: datetime | None) -> tuple[str, list] | None:
    """:func:`filters` for ``topics`` rows (alias ``t``): a topic overlapping ``[since, until)``
    by its first and last message. None with a channel filter: a topic spans channels."""
    if channel is not None:
        return None
    clauses: list[str] = []
    params: list = []
    for clause, value in (("list_contains(?::VARCHAR[], t.contact_id)", contact_ids),
                          ("t.last_ts >= ?", since), ("t.first_ts < ?", until)):
        if value is not None:
            clauses.append(clause)
            params.append(list(value) if clause.startswith("list") else _utc(value))
    return (" AND ".join(clauses) or "TRUE"), params


def topic_vector_sql(dim: int, where: str = "TRUE") -> str:
    """:func:`vector_sql` over ``topic_vectors``: its HNSW index unfiltered, an exact scan joined
    to ``topics`` otherwise. Parameters: the query vector, the filter parameters, the limit."""
    dist = f"array_cosine_distance(v.embedding, ?::FLOAT[{int(dim)}])"
    if where == "TRUE":
        return f"SELECT v.topic_id, {dist} AS d FROM topic_vectors v ORDER BY d LIMIT ?"
    return (f"SELECT v.topic_id, {dist} AS d FROM topic_vectors v JOIN topics t ON t.topic_id = v.topic_id "
            f"WHERE {where} ORDER BY d, v.topic_id LIMIT ?")


def topic_lexical_sql(schema: str, where: str = "TRUE") -> str:
    """:func:`lexical_sql` over the topic summaries' BM25 index ``schema``."""
    join = f" JOIN topics t ON t.topic_id = docs.name WHERE {where}" if where != "TRUE" else ""
    return _bm25_sql(schema, join)


def store_state(con: duckdb.DuckDBPyConnection) -> tuple[bool, str | None, bool, int | None, str]:
    """(chunks table, vector search, FTS index, embedding dim, catalog) from two cheap catalog reads
    (``duckdb_columns()`` alone costs more, so the dim comes from ``meta``). The vector search is
    ``"hnsw"`` (the index exists), ``"exact"`` (an encrypted store, which has no index) or None."""
    row = con.execute(
        "SELECT count(*) FILTER (WHERE schema_name = 'main' AND table_name = 'chunks'),"
        " count(*) FILTER (WHERE schema_name = ? AND table_name IN ('docs', 'dict', 'terms', 'stats')),"
        " count(*) FILTER (WHERE schema_name = 'main' AND table_name = 'meta'),"
        " (SELECT count(*) FROM duckdb_indexes() WHERE database_name = current_database() AND index_name = ?),"
        " (SELECT any_value(encrypted) FROM duckdb_databases() WHERE database_name = current_database()),"
        " any_value(current_database())"
        " FROM duckdb_tables() WHERE database_name = current_database()",
        [FTS_SCHEMA, HNSW_INDEX],
    ).fetchone()
    has_chunks, fts_tables, has_meta, has_hnsw, encrypted, catalog = row
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
    vector = "hnsw" if has_hnsw else "exact" if encrypted else None
    return bool(has_chunks), vector, fts_tables == 4, dim, catalog or ""


def term_stats_sql() -> str:
    """(min df of the query's terms in the BM25 dictionary, indexed documents). Parameter: the query."""
    s = FTS_SCHEMA
    return (
        f"SELECT (SELECT min(d.df) FROM {s}.dict d WHERE d.term IN "
        f"(SELECT stem(unnest({s}.tokenize(?)), '{FTS_PARAMS['stemmer']}'))), (SELECT num_docs FROM {s}.stats)"
    )
