"""Hybrid search: RRF, filters before top-k, no stale chunks, clear errors, search log."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl
import pytest

from brb_pipeline.core.search.sql import Filters
from brb_pipeline.core.store import duck
from brb_pipeline.core.store import index
from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.search.fusion import Fusion, rrf_fuse
from brb_pipeline.core.search.hybrid import neighbours, search
from brb_pipeline.core.search.sql import vector_sql
from brb_pipeline.core.search.log import clear_log, log_search, read_log
from brb_pipeline_tests.helpers import T0
from brb_pipeline_tests.helpers.search_store import near_far_store as _store
from brb_pipeline_tests.helpers.search_store import query_e0 as _query
from brb_pipeline_tests.helpers.store import DIM, make_chunks


@pytest.mark.parametrize(
    ("lists", "expected"),
    [
        # a doc in both lists beats docs in one list
        ([["a", "b"], ["b", "c"]], ["b", "a", "c"]),
        # exact tie (a: rank 1 + rank 2, b: rank 2 + rank 1): broken by id
        ([["a", "b"], ["b", "a"]], ["a", "b"]),
        # same score and same best rank: id order
        ([["y"], ["x"]], ["x", "y"]),
        # a doc in one list only still appears
        ([["a"], []], ["a"]),
        # empty lists
        ([[], []], []),
        ([], []),
        # a repeated id counts once, at its first position
        ([["a", "a", "b"]], ["a", "b"]),
    ],
)
def test_rrf_fuse_order(lists, expected):
    assert [d for d, _ in rrf_fuse(lists, k=60)] == expected


def test_rrf_scores():
    fused = dict(rrf_fuse([["a", "b"], ["b"]], k=60))
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["a"] == pytest.approx(1 / 61)


def test_hybrid_hits_have_both_ranks_and_match_exact_vector_order(tmp_path):
    con, near, far = _store(tmp_path)
    res = search(con, query_text="weekend", query_vec=_query(), mode="hybrid", k=10,
                 fusion=Fusion("rrf", 1.0, disagreement_depth=None))  # plain equal RRF, no both-bests rule
    assert len(res.hits) == 10 and res.vector_strategy == "hnsw"
    assert all(h.vector_rank and h.lexical_rank for h in res.hits[:3])  # equal RRF: both lists count
    assert [h.score for h in res.hits] == sorted((h.score for h in res.hits), reverse=True)
    vec = search(con, query_text="", query_vec=_query(), mode="vector", k=5)
    sims = near @ _query() / np.linalg.norm(near, axis=1)
    exact_top = [f"chat-near:{i}" for i in np.argsort(-sims)[:5]]
    assert [h.chunk_id for h in vec.hits] == exact_top  # HNSW recall on a tiny store is exact
    assert vec.hits[0].vector_score == pytest.approx(float(sims.max()), abs=1e-5)
    assert set(res.timings_ms) >= {"vector", "lexical", "fuse", "fetch", "total"}
    serial = search(con, query_text="weekend", query_vec=_query(), mode="hybrid", k=10, parallel=False,
                    fusion=Fusion("rrf", 1.0, disagreement_depth=None))
    assert [(h.chunk_id, h.score) for h in serial.hits] == [(h.chunk_id, h.score) for h in res.hits]
    con.close()


def test_filter_applies_before_top_k(tmp_path):
    con, _, _ = _store(tmp_path)
    # All 12 "far" chunks are farther from the query than the 300 "near" ones: a WHERE applied
    # after an HNSW top-50 would return nothing.
    for mode in ("vector", "hybrid"):
        res = search(con, query_text="weekend", query_vec=_query(), mode=mode, k=10, filters=Filters(contact_ids=["far"]))
        assert len(res.hits) == 10, mode
        assert {h.contact_id for h in res.hits} == {"far"}
    res = search(con, query_text="weekend", query_vec=_query(), mode="vector", k=10, filters=Filters(contact_ids=["far"]))
    assert res.vector_strategy == "exact"
    lex = search(con, query_text="chunk", query_vec=None, mode="lexical", k=10, filters=Filters(contact_ids=["far"]))
    assert len(lex.hits) == 10 and {h.contact_id for h in lex.hits} == {"far"}
    # Chunk i spans [T0 + i h, T0 + i h 20 min): overlapping [T0 + 5h, T0 + 8h) -> 5, 6, 7
    res = search(con, query_text="", query_vec=_query(), mode="vector", k=50, filters=Filters(contact_ids=["near"], since=T0 + timedelta(hours=5), until=T0 + timedelta(hours=8)))
    assert sorted(h.position for h in res.hits) == [5, 6, 7]
    assert search(con, query_text="x", query_vec=_query(), k=5, filters=Filters(channel="whatsapp")).hits == []
    con.close()


def test_channel_and_time_filters_never_use_the_index(tmp_path):
    """``WHERE channel = ?`` alone is rewritten into HNSW-then-filter unless we prevent it."""
    con, _, far = _store(tmp_path)
    wa = make_chunks("batch-003", "w", 6).with_columns(pl.lit("whatsapp").alias("channel"))
    vecs = far[:6].copy()  # far from the query: never in an HNSW top-50
    p = store.write_partition(tmp_path / "st", "batch-003", wa, vecs, "m@1")
    store.load_partitions(con, {"batch-003": p})
    index.build_indexes(con, m=8, ef_construction=64)
    res = search(con, query_text="", query_vec=_query(), mode="vector", k=5, filters=Filters(channel="whatsapp"))
    assert len(res.hits) == 5 and {h.channel for h in res.hits} == {"whatsapp"}
    for where, params in [("channel = ?", ["whatsapp"]), ("end_ts >= ?", [T0])]:
        sql = vector_sql(DIM, filtered=True, where=where)
        plan = "".join(r[1] for r in con.execute("EXPLAIN " + sql, [_query().tolist(), *params, 5]).fetchall())
        assert "HNSW_INDEX_SCAN" not in plan, where
    con.close()


def test_search_after_partition_rerun_has_no_stale_chunk(tmp_path):
    con, _, far = _store(tmp_path)
    assert search(con, query_text="sailing", query_vec=None, mode="lexical", k=5).hits
    texts = [f"far chunk {i} about cooking" for i in range(4)]
    p2 = store.write_partition(tmp_path / "st", "batch-002", make_chunks("batch-002", "far", 4, texts=texts), far[:4], "m@1")
    store.load_partitions(con, {"batch-002": p2})
    with pytest.raises(StoreError, match=r"search index missing: run `brb ingest` \(or `brb reindex`\)"):
        search(con, query_text="sailing", query_vec=_query(), k=5)
    index.build_indexes(con, m=8, ef_construction=64)
    assert search(con, query_text="sailing", query_vec=None, mode="lexical", k=5).hits == []
    res = search(con, query_text="cooking", query_vec=-_query(), k=20, filters=Filters(contact_ids=["far"]))
    assert sorted(h.chunk_id for h in res.hits) == [f"chat-far:{i}" for i in range(4)]
    con.close()


def test_damaged_text_index_names_the_rebuild(tmp_path):
    con, _, _ = _store(tmp_path)
    con.execute("DROP TABLE fts_main_chunks.dict")
    with pytest.raises(StoreError) as exc:
        search(con, query_text="weekend", query_vec=_query(), k=5)
    assert "brb reindex" in str(exc.value) and "\n" not in str(exc.value)
    # Vector-only search does not need the text index.
    assert len(search(con, query_text="", query_vec=_query(), mode="vector", k=5).hits) == 5
    con.close()


def test_missing_store_and_bad_arguments(tmp_path):
    con = duck.connect(None)
    with pytest.raises(StoreError, match="run `brb ingest` first"):
        search(con, query_text="x", query_vec=None, mode="lexical")
    con.close()
    con, _, _ = _store(tmp_path)
    with pytest.raises(StoreError, match="store holds 16-d vectors"):
        search(con, query_text="x", query_vec=np.zeros(384, np.float32))
    with pytest.raises(ValueError, match="unknown search mode"):
        search(con, query_text="x", query_vec=None, mode="fuzzy")
    with pytest.raises(ValueError, match="needs query_vec"):
        search(con, query_text="x", query_vec=None, mode="hybrid")
    con.close()


def test_neighbours(tmp_path):
    con, _, _ = _store(tmp_path)
    assert [h.position for h in neighbours(con, "chat-far:5")] == [4, 5, 6]
    assert [h.position for h in neighbours(con, "chat-far:0", span=2)] == [0, 1, 2]
    assert {h.chat_id for h in neighbours(con, "chat-far:11")} == {"chat-far"}
    assert neighbours(con, "no-such-chunk") == []
    con.close()


def test_search_log_roundtrip_and_clear(tmp_path):
    db = tmp_path / "brb.db"
    assert read_log(db) == []
    log_search(db, query="dinner", mode="hybrid", model="m@1", contact_ids=["c1"], results=[("x:1", 0.03)], latency_ms=12.5)
    log_search(db, query="keys", mode="lexical", model=None, results=[], latency_ms=3.0)
    rows = read_log(db, limit=10)
    assert [r["query"] for r in rows] == ["keys", "dinner"]
    assert rows[1]["contact_ids"] == ["c1"] and rows[1]["results"] == [("x:1", 0.03)]
    assert rows[1]["ts"].endswith("+00:00")
    assert clear_log(db) == 2 and read_log(db) == []
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot write the search log"):
        log_search(junk, query="q", mode="hybrid", model=None, latency_ms=1.0)
