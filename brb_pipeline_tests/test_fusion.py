"""Fusion weights, the specific-query rule, merging overlapping windows, MMR and the relevance
floor: pure functions first, then the same behaviour through a real DuckDB store."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl
import pytest

from brb_pipeline.core.search.sql import Filters
from brb_pipeline.core.store import duck
from brb_pipeline.core.store import index
from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.search.fusion import (Fusion, Span, fuse, is_specific, merge_lines, merge_overlapping, mmr_order,
                                      rrf_fuse, score_fuse, specific_terms)
from brb_pipeline.core.search.hybrid import search
from brb_pipeline.search.query import fusion_of
from brb_pipeline.config.settings import Settings
from brb_pipeline_tests.helpers import T0
from brb_pipeline_tests.helpers.store import DIM, make_chunks, make_vectors

# ----------------------------------------------------------------------------- fusion


def test_settings_defaults_are_the_fusion_defaults():
    assert fusion_of(Settings()) == Fusion()


def test_weighted_rrf_lets_the_vector_list_lead():
    vec = [("v1", 0.9), ("v2", 0.8), ("both", 0.7)]
    lex = [("l1", 12.0), ("both", 9.0)]
    # the lists' bests disagree here, so the both-bests rule (test_search_ranking.py) is off
    equal = [d for d, _ in fuse(vec, lex, Fusion("rrf", 1.0, disagreement_depth=None))]
    assert equal[0] == "both"  # in both lists
    assert equal.index("l1") < equal.index("v2")  # a lexical-only top hit outranks a vector #2 ...
    light = [d for d, _ in fuse(vec, lex, Fusion("rrf", 0.3, disagreement_depth=None))]
    assert light.index("l1") > light.index("v2")  # ... until the lexical list weighs less
    scores = dict(rrf_fuse([["a"], ["a", "b"]], k=60, weights=[1.0, 0.5]))
    assert scores["a"] == pytest.approx(1 / 61 + 0.5 / 61)
    assert scores["b"] == pytest.approx(0.5 / 62)
    with pytest.raises(ValueError, match="one weight per list"):
        rrf_fuse([["a"]], weights=[1.0, 2.0])


def test_zero_lexical_weight_is_the_vector_order():
    vec = [("a", 0.9), ("b", 0.5), ("c", 0.1)]
    lex = [("c", 30.0), ("z", 20.0)]
    assert [d for d, _ in fuse(vec, lex, Fusion("rrf", 0.0))][:3] == ["a", "b", "c"]
    assert [d for d, _ in fuse(vec, lex, Fusion("score", 0.0))][:3] == ["a", "b", "c"]


def test_score_fusion_normalizes_each_list():
    out = dict(score_fuse([("a", 0.9), ("b", 0.5)], [("b", 40.0), ("c", 20.0)], 0.5))
    assert out["a"] == pytest.approx(0.5)  # vector max, lexical absent
    assert out["b"] == pytest.approx(0.5)  # vector min, lexical max
    assert out["c"] == pytest.approx(0.0)  # lexical min
    assert score_fuse([], [], 0.3) == []


def test_specific_queries_get_their_own_weight():
    f = Fusion("rrf", 0.2, 1.0)
    assert f.weight_for(False) == 0.2 and f.weight_for(True) == 1.0
    assert Fusion("rrf", 0.2, None).weight_for(True) == 0.2  # no specific weight: one weight for all
    assert is_specific('the "blue otter" password', None, 1000, 0.0001)  # a quoted phrase
    assert is_specific("Kabalevsky piece", 2, 60000, 0.0001)  # a name in one message (two windows)
    assert not is_specific("Kabalevsky piece", 40, 60000, 0.0001)  # a name in 40 chunks is not rare
    assert is_specific("Kabalevsky piece", 4, 1000, 0.0001)  # small archives: up to 4 chunks still rare
    assert not is_specific("that horror movie night", None, 60000, 0.0001)  # nothing to look up
    assert not is_specific("anything", 1, 0, 0.0001)
    with pytest.raises(ValueError, match="unknown fusion method"):
        Fusion("sum")
    with pytest.raises(ValueError, match=">= 0"):
        Fusion("rrf", -1.0)


def test_specific_terms_are_names_numbers_and_quotes_not_rare_paraphrase_words():
    assert specific_terms("When did I tell İpek that abandoning chats felt like cheating?") == ["İpek"]
    assert specific_terms("Kabalevsky piano piece") == ["Kabalevsky"]
    assert specific_terms("the door code 7731 and gate 42") == ["7731"]
    assert specific_terms('what was the "blue otter" thing') == ["blue", "otter"]
    assert specific_terms("what did we say about abandoning old chats") == []


# ----------------------------------------------------------------------------- merging


def _span(cid, chat, conv, start_h, end_h, order):
    return Span(cid, chat, conv, T0 + timedelta(hours=start_h), T0 + timedelta(hours=end_h), 1.0 / (order + 1),
                order, [cid])


def test_overlapping_windows_of_one_conversation_merge():
    merged = merge_overlapping([_span("a1", "A", 0, 0, 2, 0), _span("a2", "A", 0, 1, 3, 1),
                                _span("x", "B", 0, 0, 2, 2)])
    assert [g.chunk_ids for g in merged] == [["a1", "a2"], ["x"]]  # the other chat at the same time stays
    assert merged[0].start == T0 and merged[0].end == T0 + timedelta(hours=3)
    assert merged[0].chunk_id == "a1" and merged[0].score == 1.0


def test_three_chained_windows_merge_even_when_the_middle_one_comes_last():
    # a1 [0,2] and a3 [3,5] do not touch; a2 [1.5,3.5] joins both.
    merged = merge_overlapping([_span("a3", "A", 0, 3, 5, 0), _span("a1", "A", 0, 0, 2, 1),
                                _span("a2", "A", 0, 1.5, 3.5, 2)])
    assert len(merged) == 1
    assert sorted(merged[0].chunk_ids) == ["a1", "a2", "a3"]
    assert merged[0].chunk_id == "a3" and merged[0].order == 0  # the best member leads


def test_a_passage_holds_at_most_three_windows():
    chain = [_span(f"a{i}", "A", 0, 1.5 * i, 1.5 * i + 2, i) for i in range(5)]  # each overlaps the next
    merged = merge_overlapping(chain + [_span("b", "A", 0, 20, 21, 5)])
    assert [g.chunk_ids for g in merged] == [["a0", "a1", "a2"], ["a4"], ["b"]]  # a3 overlaps the kept chain
    assert len(merge_overlapping(chain, max_members=10)) == 1


def test_other_conversations_and_unknown_times_never_merge():
    merged = merge_overlapping([_span("a", "A", 0, 0, 2, 0), _span("b", "A", 1, 1, 3, 1),
                                Span("c", "A", 0, None, None, 0.1, 2, ["c"])])
    assert [g.chunk_ids for g in merged] == [["a"], ["b"], ["c"]]


def test_merge_lines_keeps_each_line_once_in_order():
    a = "m1\nm2\nm3\nm4"
    b = "m3\nm4\nm5\nm6"
    c = "m5\nm6\nm7"
    assert merge_lines([a, b, c]) == "m1\nm2\nm3\nm4\nm5\nm6\nm7"
    assert merge_lines([a, "x\ny"]) == a + "\nx\ny"  # no shared lines: appended
    assert merge_lines([]) == ""


# ----------------------------------------------------------------------------- diversity


def test_mmr_skips_a_near_duplicate():
    v = np.array([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0]])
    assert mmr_order([1.0, 0.95, 0.6], v, lam=1.0, k=3) == [0, 1, 2]  # relevance only
    assert mmr_order([1.0, 0.95, 0.6], v, lam=0.5, k=2) == [0, 2]  # the near copy of item 0 waits
    assert mmr_order([], np.zeros((0, 2)), lam=0.5, k=3) == []


# ----------------------------------------------------------------------------- through a store


def _overlapping_store(tmp_path):
    """Chat A: three chained windows (stride half a window) around one moment, and a distant
    one; chat B: a window at the same time as A's. All close to the query vector."""
    n = 5
    chunks = make_chunks("batch-001", "alice", n, chat="chat-A").with_columns(
        pl.Series("conversation", [0, 0, 0, 0, 1], dtype=pl.Int32),
        pl.Series("start_ts", [T0, T0 + timedelta(minutes=40), T0 + timedelta(minutes=80),
                               T0 + timedelta(minutes=120), T0 + timedelta(days=2)], dtype=pl.Datetime("us", "UTC")),
        pl.Series("end_ts", [T0 + timedelta(minutes=60), T0 + timedelta(minutes=100), T0 + timedelta(minutes=140),
                             T0 + timedelta(minutes=180), T0 + timedelta(days=2, minutes=30)],
                  dtype=pl.Datetime("us", "UTC")),
        pl.Series("content", ["a0\na1\na2", "a2\na3\na4", "a4\na5\na6", "a6\na7\na8", "later"]),
    )
    other = make_chunks("batch-002", "bob", 1, chat="chat-B", texts=["bob line"])
    base = np.zeros(DIM, np.float32)
    base[0] = 1.0
    va = base + make_vectors(n, 3) * 0.05
    vb = base + make_vectors(1, 4) * 0.05
    p1 = store.write_partition(tmp_path / "st", "batch-001", chunks, va, "m@1")
    p2 = store.write_partition(tmp_path / "st", "batch-002", other, vb, "m@1")
    con = duck.connect(tmp_path / "brb.duckdb")
    store.load_partitions(con, {"batch-001": p1, "batch-002": p2})
    index.build_indexes(con, m=8, ef_construction=64)
    return con, base


def test_search_merges_chained_windows_and_keeps_other_chats(tmp_path):
    con, q = _overlapping_store(tmp_path)
    res = search(con, query_text="weekend", query_vec=q, mode="vector", k=10)
    by_chat = {}
    for h in res.hits:
        by_chat.setdefault(h.chat_id, []).append(h)
    assert len(by_chat["chat-A"]) == 2  # the chain (capped at three windows) and the later conversation
    chain = next(h for h in by_chat["chat-A"] if len(h.chunk_ids) > 1)
    pos = sorted(int(c.split(":")[1]) for c in chain.chunk_ids)
    assert len(pos) == 3 and pos == list(range(pos[0], pos[0] + 3))  # three contiguous windows of the four
    lines = {0: "a0\na1\na2", 1: "a2\na3\na4", 2: "a4\na5\na6", 3: "a6\na7\na8"}
    assert chain.content == merge_lines([lines[p] for p in pos])
    assert chain.start_ts == T0 + timedelta(minutes=40 * pos[0])
    assert len(by_chat["chat-B"]) == 1  # same time, other chat: its own hit
    assert res.merged == 3  # two folded into the chain, the fourth window dropped as overlapping it
    unmerged = search(con, query_text="weekend", query_vec=q, mode="vector", k=10, merge=False)
    assert len(unmerged.hits) == 6 and all(len(h.chunk_ids) == 1 for h in unmerged.hits)
    con.close()


def test_filters_apply_before_merging_and_top_k(tmp_path):
    con, q = _overlapping_store(tmp_path)
    for mode in ("vector", "hybrid"):
        res = search(con, query_text="weekend", query_vec=q, mode=mode, k=1, filters=Filters(contact_ids=["bob"]))
        assert [h.chat_id for h in res.hits] == ["chat-B"], mode
        res = search(con, query_text="weekend", query_vec=q, mode=mode, k=5, filters=Filters(since=T0 + timedelta(days=1)))
        assert [h.chunk_ids for h in res.hits] == [["chat-A:4"]], mode
    con.close()


def test_relevance_floor_and_diversity_option(tmp_path):
    con, q = _overlapping_store(tmp_path)
    sure = search(con, query_text="weekend", query_vec=q, mode="vector", k=3, min_similarity=0.5)
    assert sure.confident is True and sure.top_similarity > 0.9
    ortho = np.zeros(DIM, np.float32)
    ortho[1] = 1.0
    unsure = search(con, query_text="zzz", query_vec=ortho, mode="hybrid", k=3, min_similarity=0.5)
    assert unsure.confident is False and unsure.hits  # still lists the nearest passages
    assert search(con, query_text="zzz", query_vec=ortho, mode="vector", k=3).confident is None  # no floor given
    assert search(con, query_text="weekend", query_vec=None, mode="lexical", k=3, min_similarity=0.5).confident is None
    div = search(con, query_text="weekend", query_vec=q, mode="hybrid", k=3, diversity=0.5)
    assert len(div.hits) == 3 and len({h.chunk_id for h in div.hits}) == 3
    with pytest.raises(ValueError, match="diversity"):
        search(con, query_text="x", query_vec=q, diversity=1.5)
    con.close()
