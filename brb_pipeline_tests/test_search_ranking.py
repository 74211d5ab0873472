"""Issue 29's ranking: the lexical weight follows BM25 coverage, quoted phrases rank first, a routed
name stays in the BM25 query, dates said in words become since/until. Real DuckDB stores in tmp dirs."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from brb_pipeline.core.search.dates import when
from brb_pipeline.core.search.fusion import Fusion, both_bests_first, fuse, phrase_first, quoted_phrases
from brb_pipeline.core.search.hybrid import search
from brb_pipeline.core.search.resident import Resident
from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.store import duck, index
from brb_pipeline_tests.helpers.store import make_chunks, make_vectors

HOLDER = "Hey Sam, great to chat with you again! So much has happened since the fair."
TEXTS = [
    "so hey sam, again great chat with you, hey sam so great to you again",  # more of the words, no phrase
    "again and again, great news: a chat with you soon, great",
    "Priya said the pottery class was great fun",
    "we talked about the pottery class and glazes",
    HOLDER,
    "the weekend hike by the lake was cold",
    "sailing lessons start in May, bring a jacket",
    "movie night: the horror one again, with popcorn",
] * 2


@pytest.fixture
def con(tmp_path):
    n = len(TEXTS)
    texts = [t if i < 8 else f"{t} (later)" for i, t in enumerate(TEXTS)]
    vecs = make_vectors(n, 5)
    p = store.write_partition(tmp_path / "st", "b1", make_chunks("b1", "mel", n, texts=texts), vecs, "m@1")
    c = duck.connect(tmp_path / "brb.duckdb")
    store.load_partitions(c, {"b1": p})
    index.build_indexes(c, m=8, ef_construction=64)
    yield c
    c.close()


def _vec():
    return make_vectors(1, 9)[0]


def test_coverage_weight_ramps_between_the_base_and_the_covered_weight():
    f = Fusion(lexical_weight=0.05, specific_lexical_weight=0.7, covered_lexical_weight=0.5,
               coverage_from=0.4, coverage_full=0.8)
    assert f.weight_for(False, None) == 0.05 and f.weight_for(False, 0.4) == 0.05
    assert f.weight_for(False, 0.6) == pytest.approx(0.275) and f.weight_for(False, 0.9) == 0.5
    assert f.weight_for(True, 0.0) == 0.7  # a rare name or number still decides first
    assert Fusion(covered_lexical_weight=None).weight_for(False, 1.0) == 0.05


@pytest.mark.parametrize("text", ["pottery class", "great chat with you", "zzz unknownword", "the"])
def test_coverage_is_the_same_from_sql_and_from_memory(con, text):
    mem = Resident.load(con)
    sql = search(con, query_text=text, query_vec=_vec(), mode="hybrid", k=5)
    held = search(con, query_text=text, query_vec=_vec(), mode="hybrid", k=5, resident=mem)
    assert sql.lexical_coverage == pytest.approx(held.lexical_coverage, abs=1e-9)
    assert [h.chunk_id for h in sql.hits] == [h.chunk_id for h in held.hits]
    if text == "pottery class":  # one chunk holds both words: all of the idf mass
        assert sql.lexical_coverage == pytest.approx(1.0)
    if text == "zzz unknownword":
        assert sql.lexical_coverage == 0.0


def test_coverage_raises_the_lexical_weight_in_hybrid(con):
    """A query vector pointing away from the pottery chunks: at the fixed 0.05 weight the vector
    list decides; with the covered weight, BM25's full coverage puts a pottery chunk first."""
    mem = Resident.load(con)
    rows = con.execute("SELECT chunk_id, content, embedding FROM chunks").fetchall()
    away = -np.sum([np.asarray(r[2], np.float32) for r in rows if "pottery" in r[1]], axis=0)
    texts = {r[0]: r[1] for r in rows}
    kw = dict(query_text="pottery class", query_vec=away, k=3, resident=mem, merge=False)
    low = search(con, fusion=Fusion(covered_lexical_weight=None), **kw)
    high = search(con, fusion=Fusion(covered_lexical_weight=0.9, coverage_from=0.5, coverage_full=0.5,
                                     disagreement_depth=None), **kw)
    assert high.lexical_coverage == pytest.approx(1.0)
    assert "pottery" not in texts[low.hits[0].chunk_id]
    assert "pottery" in texts[high.hits[0].chunk_id]
    # The lists disagree outright here (each one's best is outside the other's top 10), so the
    # default keeps both bests on top: the vector's first, BM25's (a pottery chunk) second.
    both = search(con, fusion=Fusion(covered_lexical_weight=0.9, coverage_from=0.5, coverage_full=0.5), **kw)
    lex_best = search(con, **{**kw, "mode": "lexical", "query_vec": None}).hits[0].chunk_id
    assert "pottery" in texts[lex_best]
    assert [h.chunk_id for h in both.hits[:2]] == [low.hits[0].chunk_id, lex_best]


def test_both_bests_first_only_when_the_lists_disagree():
    fused = [("l1", 0.9), ("x", 0.8), ("y", 0.5), ("v1", 0.4), ("z", 0.1)]
    vec = [("v1", 0.6), ("y", 0.5), ("x", 0.4)]
    lex = [("l1", 9.0), ("x", 3.0), ("z", 1.0)]
    out = both_bests_first(fused, vec, lex, 10)
    assert [d for d, _ in out] == ["v1", "l1", "x", "y", "z"]
    scores = [s for _, s in out]
    assert scores == sorted(scores, reverse=True) and len(out) == len(fused)  # nothing lost, still ordered
    # BM25's best in the vector top-n (or the vector's in BM25's): they agree, the fused order stands
    assert both_bests_first(fused, [*vec, ("l1", 0.1)], lex, 10) == fused
    assert both_bests_first(fused, [*vec, ("l1", 0.1)], lex, 3) == out  # ... unless deeper than n
    assert both_bests_first(fused, vec, [*lex, ("v1", 0.5)], 10) == fused
    assert both_bests_first(fused, vec, lex, None) == fused
    assert both_bests_first(fused, [], lex, 10) == fused and both_bests_first([], vec, lex, 10) == []
    # through fuse: the default applies it, whichever method
    assert [d for d, _ in fuse(vec, lex, Fusion())][:2] == ["v1", "l1"]
    assert [d for d, _ in fuse(vec, lex, Fusion("rrf", 1.0))][:2] == ["v1", "l1"]


@pytest.mark.parametrize("mode", ["hybrid", "lexical", "vector"])
@pytest.mark.parametrize("resident", [False, True])
def test_a_quoted_phrase_ranks_first(con, mode, resident):
    mem = Resident.load(con) if resident else None
    q = '"Hey Sam, great to chat with you again! So"'
    plain = search(con, query_text=q.strip('"'), query_vec=_vec(), mode="lexical", k=5, resident=mem)
    assert HOLDER not in (plain.hits[0].content or "")  # unquoted, BM25 puts the word-stuffed chunk first
    res = search(con, query_text=q, query_vec=_vec() if mode != "lexical" else None, mode=mode, k=5, resident=mem)
    assert res.phrases == ["Hey Sam, great to chat with you again! So"]
    assert HOLDER in res.hits[0].content


def test_every_quoted_phrase_applies_and_nothing_is_dropped():
    fused = [("a", 0.9), ("b", 0.8), ("c", 0.7)]
    texts = {"a": ("a", "great chat"), "b": ("b", "Great to chat, Sam! The pottery class"), "c": ("c", "pottery class")}
    assert quoted_phrases('“great to chat” and "pottery class"') == ["great to chat", "pottery class"]
    assert [d for d, _ in phrase_first(fused, texts, ["great to chat", "pottery class"])] == ["b", "a", "c"]
    assert [d for d, _ in phrase_first(fused, texts, ["pottery class"])] == ["b", "c", "a"]
    assert [d for d, _ in phrase_first(fused, texts, ["not said anywhere"])] == ["a", "b", "c"]
    assert quoted_phrases('a "?!" c') == []


def test_the_lexical_text_keeps_a_routed_name(con):
    """Routing cuts "Priya" from the embedded text; BM25 still ranks on it."""
    cut = search(con, query_text="what did say about the class", query_vec=None, mode="lexical", k=1)
    kept = search(con, query_text="what did say about the class", lexical_text="what did Priya say about the class",
                  query_vec=None, mode="lexical", k=1)
    assert "Priya" not in cut.hits[0].content
    assert "Priya" in kept.hits[0].content


NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(("query", "since", "until"), [
    ("what did we eat last summer", datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 9, 1, tzinfo=UTC)),
    ("the trip in May 2023", datetime(2023, 5, 1, tzinfo=UTC), datetime(2023, 6, 1, tzinfo=UTC)),
    ("what did Dave say two weeks ago", NOW - timedelta(days=21), NOW - timedelta(days=7)),
    ("since March 2024", datetime(2024, 3, 1, tzinfo=UTC), None),
    ("photos before 2020", None, datetime(2020, 1, 1, tzinfo=UTC)),
    ("last winter", datetime(2025, 12, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)),
    ("yesterday", datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC)),
    ("last month", datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)),
])
def test_dates_in_words(query, since, until):
    w = when(query, NOW)
    assert w is not None and w.resolved and (w.since, w.until) == (since, until)


@pytest.mark.parametrize("query", ["movie recommendations", "I may go to the park", "chunk 2023",
                                   "", "\x00\x01 control", "x" * 10000])
def test_a_query_without_a_date_is_not_read_as_one(query):
    assert when(query, NOW) is None


def test_an_event_date_is_said_not_resolved():
    w = when("what happened before the wedding", NOW)
    assert w is not None and not w.resolved and w.phrase == "before the wedding" and w.since is None


def test_a_query_without_a_date_never_imports_dateparser():
    code = ("import sys; from brb_pipeline.core.search.dates import when; when('movie night popcorn'); "
            "assert 'dateparser' not in sys.modules; when('two weeks ago'); assert 'dateparser' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_searcher_reads_dates_and_explicit_bounds_win(con, tmp_path, monkeypatch):
    from brb_pipeline.search import query as q

    calls = []

    def fake_search(_con, **kw):  # the real search is above; here only what Searcher hands it
        calls.append(kw)
        from brb_pipeline.core.search.hybrid import SearchResult
        return SearchResult(query=kw["query_text"], mode=kw["mode"])

    monkeypatch.setattr(q, "search", fake_search)
    s = q.Searcher.__new__(q.Searcher)
    s.settings = type("S", (), {"brb_db": tmp_path / "none.db", "default_region": "US", "hnsw_ef_search": 64,
                                "search_min_similarity": 0.0, "search_fusion": "score", "search_lexical_weight": 0.05,
                                "search_specific_lexical_weight": 0.7, "search_rare_df_share": 1e-4, "rrf_k": 60})()
    s.embedder, s.con, s.stored_model, s.resident, s._names = None, con, None, None, {}
    s.people, s._people_router = None, None  # no people table: the contact router below decides
    s._router = type("R", (), {"route": staticmethod(lambda text: type("X", (), {"contact_ids": [], "query": text,
                                                                                   "matched": []})())})()
    out = s.search("pottery in March 2024", mode="lexical", log=False)  # the store's chunks are in March 2024
    assert out["routing"]["dates"]["since"].startswith("2024-03-01") and calls[-1]["filters"].since.month == 3
    assert out["query"] == "pottery in March 2024" and calls[-1]["query_text"] == "pottery in March 2024"
    out = s.search("pottery in May 2023", mode="lexical", log=False)  # nothing then: said, not applied
    assert out["routing"]["dates"]["applied"] is False and calls[-1]["filters"].since is None
    mine = datetime(2020, 1, 1, tzinfo=UTC)
    out = s.search("pottery in May 2023", mode="lexical", log=False, since=mine)
    assert "dates" not in out["routing"] and calls[-1]["filters"].since == mine and calls[-1]["filters"].until is None
    out = s.search("pottery before the wedding", mode="lexical", log=False)
    assert out["routing"]["dates"]["resolved"] is False and calls[-1]["filters"].since is None
    out = s.search("pottery class", mode="lexical", log=False)
    assert "dates" not in out["routing"] and calls[-1]["query_text"] == "pottery class"


def test_agreement_depth_keeps_the_low_weight_when_the_lists_disagree():
    from brb_pipeline.core.search.fusion import fuse

    vector = [("v1", 0.9), ("v2", 0.8), ("l1", 0.1)]
    lexical = [("l1", 9.0), ("v2", 1.0)]
    f = Fusion(covered_lexical_weight=0.9, coverage_from=0.5, coverage_full=0.5)
    assert fuse(vector, lexical, f, coverage=1.0)[0][0] == "l1"  # covered: BM25 leads
    near = Fusion(covered_lexical_weight=0.9, coverage_from=0.5, coverage_full=0.5, agreement_depth=2)
    assert fuse(vector, lexical, near, coverage=1.0)[0][0] == "v1"  # l1 is not in the vector top 2
    far = Fusion(covered_lexical_weight=0.9, coverage_from=0.5, coverage_full=0.5, agreement_depth=3)
    assert fuse(vector, lexical, far, coverage=1.0)[0][0] == "l1"
