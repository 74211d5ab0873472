"""Search from the store held in memory (core/search/resident.py) gives the SQL path's answers:
the same ids in the same order with the same scores, filters applied before top-k, ties by id."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from brb_pipeline.core.search.sql import Filters
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.search.fusion import Fusion
from brb_pipeline.core.search.hybrid import search
from brb_pipeline.core.search.resident import Resident, _by_term, _top
from brb_pipeline.core.store import duck
from brb_pipeline_tests.helpers.encrypted_store import EMB
from brb_pipeline_tests.helpers.encrypted_store import build as _build
from brb_pipeline_tests.helpers.encrypted_store import home as _home
from brb_pipeline_tests.helpers.search_store import near_far_store as _store
from brb_pipeline_tests.helpers.search_store import query_e0 as _query
from brb_pipeline_tests.helpers import T0
from brb_pipeline_tests.helpers.store import DIM

FILTERS = [
    {},
    {"contact_ids": ["far"]},
    {"contact_ids": ["near", "far"], "since": T0 + timedelta(hours=5), "until": T0 + timedelta(hours=40)},
    {"channel": "imessage", "until": T0 + timedelta(hours=3)},
    {"channel": "whatsapp"},
    # boundaries: chunk 5 ends exactly at `since` (kept), chunk 8 starts exactly at `until` (not)
    {"contact_ids": ["near"], "since": T0 + timedelta(hours=5, minutes=20), "until": T0 + timedelta(hours=8)},
    {"contact_ids": ["nobody"]},
]


def _hits(res):
    return [(h.chunk_id, (h.score, h.vector_score, h.lexical_score), h.vector_rank, h.lexical_rank, h.content, h.start_ts, h.end_ts, h.chunk_ids)
            for h in res.hits]


def _same(a, b):
    assert [h[0] for h in a] == [h[0] for h in b]
    for x, y in zip(a, b, strict=True):
        (fused, cos, bm25), (fused_sql, cos_sql, bm25_sql) = x[1], y[1]
        # float32 cosines rounded in another order differ by ~1e-6; min-max fusion scales that up
        assert fused == pytest.approx(fused_sql, abs=1e-4)
        assert (cos is None) == (cos_sql is None) and (cos is None or cos == pytest.approx(cos_sql, abs=1e-5))
        assert (bm25 is None) == (bm25_sql is None)
        assert bm25 is None or bm25 == pytest.approx(bm25_sql, rel=1e-12)  # both in float64
        assert x[2:] == y[2:]


@pytest.mark.parametrize("mode", ["vector", "lexical", "hybrid"])
def test_resident_answers_exactly_as_sql(tmp_path, mode):
    con, _, _ = _store(tmp_path)
    mem = Resident.load(con)
    assert len(mem) == 312
    rng = np.random.default_rng(3)
    queries = [("weekend", _query()), ("far chunk about sailing", -_query()),
               ("chunk 7", rng.standard_normal(DIM).astype(np.float32)), ("zzz unknownword", _query())]
    fusions = [Fusion(), Fusion("rrf", 1.0)] if mode == "hybrid" else [Fusion()]
    for text, vec in queries:
        for where in FILTERS:
            for fusion in fusions:
                for merge in (True, False):
                    kw = dict(query_text=text, query_vec=vec if mode != "lexical" else None, mode=mode, k=10,
                              fusion=fusion, merge=merge, filters=Filters(**where))
                    sql, held = search(con, **kw), search(con, resident=mem, **kw)
                    _same(_hits(held), _hits(sql))
                    assert held.specific == sql.specific and held.merged == sql.merged
                    if mode != "lexical":
                        assert held.vector_strategy == "memory"
                        assert held.vector_candidates == sql.vector_candidates
                    if mode != "vector":
                        assert held.lexical_candidates == sql.lexical_candidates
    con.close()


def test_filters_apply_before_top_k_in_memory(tmp_path):
    con, _, _ = _store(tmp_path)
    mem = Resident.load(con)
    # The 12 "far" chunks are the farthest from the query: a filter after a top-n would leave none.
    res = search(con, query_text="weekend", query_vec=_query(), k=10, filters=Filters(contact_ids=["far"]), resident=mem)
    assert len(res.hits) == 10 and {h.contact_id for h in res.hits} == {"far"}
    res = search(con, query_text="", query_vec=_query(), mode="vector", k=50, filters=Filters(contact_ids=["near"], since=T0 + timedelta(hours=5), until=T0 + timedelta(hours=8)), merge=False, resident=mem)
    assert sorted(h.position for h in res.hits) == [5, 6, 7]
    res = search(con, query_text="", query_vec=_query(), mode="vector", k=50, filters=Filters(contact_ids=["near"], since=T0 + timedelta(hours=5, minutes=20), until=T0 + timedelta(hours=8)), merge=False, resident=mem)
    assert sorted(h.position for h in res.hits) == [5, 6, 7]  # the SQL filter's bounds: end >= since, start < until
    assert search(con, query_text="x", query_vec=_query(), k=5, filters=Filters(channel="whatsapp"), resident=mem).hits == []
    con.close()


def test_diversity_reads_the_resident_vectors(tmp_path):
    con, _, _ = _store(tmp_path)
    mem = Resident.load(con)
    kw = dict(query_text="weekend", query_vec=_query(), k=8, diversity=0.5)
    _same(_hits(search(con, resident=mem, **kw)), _hits(search(con, **kw)))
    con.close()


def test_top_breaks_ties_by_chunk_id_and_drops_excluded_rows():
    ids = ["c", "a", "b", "d", "e"]
    scores = np.array([1.0, 1.0, 1.0, 0.5, -np.inf])
    assert _top(scores, ids, 2) == [1, 2]  # a, b: tied with c, first by id
    assert _top(scores, ids, 10) == [1, 2, 0, 3]  # the excluded row never comes back
    assert _top(np.full(3, -np.inf), ids[:3], 5) == [] and _top(scores, ids, 0) == []


@pytest.mark.parametrize("n_terms", [50, 200_000])
def test_postings_are_grouped_by_term_for_any_term_count(n_terms):
    rng = np.random.default_rng(n_terms)
    termids = rng.integers(0, n_terms, 20_000)
    docs = rng.integers(0, 1_000, 20_000).astype(np.int32)
    ptr, grouped = _by_term(termids, docs, n_terms)
    assert ptr[-1] == len(docs)
    for t in rng.choice(np.unique(termids), 40):
        assert sorted(grouped[ptr[t]:ptr[t + 1]].tolist()) == sorted(docs[termids == t].tolist())


def test_an_encrypted_store_searches_from_memory_as_from_its_exact_scan(tmp_path, monkeypatch):
    s = _home(tmp_path, monkeypatch, "home", encrypted=True)
    _build(s)
    con = duck.connect(s.duckdb_path, read_only=True)
    mem = Resident.load(con)
    for text in ("ben talks about jazz", "sailing on the weekend"):
        for mode in ("hybrid", "vector", "lexical"):
            kw = dict(query_text=text, query_vec=EMB.embed_query(text) if mode != "lexical" else None, mode=mode, k=5)
            sql, held = search(con, **kw), search(con, resident=mem, **kw)
            assert sql.vector_strategy in (None, "exact")
            _same(_hits(held), _hits(sql))
    con.close()


def test_a_damaged_index_is_one_line_naming_the_rebuild(tmp_path):
    con, _, _ = _store(tmp_path)
    con.execute("DROP TABLE fts_main_chunks.terms")
    with pytest.raises(StoreError) as e:
        Resident.load(con)
    assert "brb reindex" in str(e.value) and "\n" not in str(e.value)
    con.close()
