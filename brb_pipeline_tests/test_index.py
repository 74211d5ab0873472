"""HNSW + BM25 indexes: build, persistence across reopen, multilingual findability."""

from __future__ import annotations

import numpy as np
import pytest

from brb_pipeline.core.store import duck
from brb_pipeline.core.store import index
from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.search.hybrid import lexical_sql, search, vector_sql
from brb_pipeline_tests.helpers.store import DIM, make_chunks, make_vectors

TEXTS = [
    "call me at +90 532 123 45 67 tomorrow",  # 0 phone with spaces
    "tamam görüşürüz yarın",  # 1 Turkish
    "مرحبا كيف حالك اليوم",  # 2 Arabic
    "party🎉 at my place",  # 3 word glued to an emoji
    "明日東京に行きます",  # 4 Japanese, no spaces
    "the code is 48213 and the gate is B7",  # 5 digits
    "nothing special here, just chatting",  # 6 filler
    "Ayşe'nin doğum günü partisi",  # 7 Turkish with apostrophe
]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("idx")
    p = store.write_partition(tmp / "staging", "batch-001", make_chunks("batch-001", "a", len(TEXTS), texts=TEXTS), make_vectors(len(TEXTS), 3), "m@1")
    con = duck.connect(tmp / "brb.duckdb")
    store.load_partitions(con, {"batch-001": p})
    reports = index.build_indexes(con, m=8, ef_construction=32)
    con.close()
    con = duck.connect(tmp / "brb.duckdb", read_only=True)  # the indexes survive close/reopen
    yield con, reports
    con.close()


def _lexical_ids(con, q):
    res = search(con, query_text=q, query_vec=None, mode="lexical", k=10)
    return [int(h.chunk_id.split(":")[1]) for h in res.hits]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("5321234567", 0),  # national number typed without separators
        ("532", 0),  # one group of the number
        ("+90 532 123 45 67", 0),  # the number as written
        ("905321234567", 0),  # E.164 digits
        ("görüşürüz", 1),  # Turkish as written
        ("gorusuruz", 1),  # Turkish typed without the Turkish keyboard
        ("حالك", 2),  # Arabic word
        ("party", 3),  # word glued to an emoji
        ("東京", 4),  # CJK bigram inside an unspaced run
        ("48213", 5),  # plain digits survive the tokenizer
        ("b7", 5),  # mixed letters and digits
        ("ayşe", 7),  # name before a Turkish apostrophe suffix
        ("GÖRÜŞÜRÜZ", 1),  # case-insensitive
    ],
)
def test_fts_multilingual_findability(indexed, query, expected):
    con, _ = indexed
    ids = _lexical_ids(con, query)
    assert ids and ids[0] == expected


@pytest.mark.parametrize("query", ["görüşürüz party", "+90 532 123 45 67", "東京 code", "the gate"])
def test_lexical_sql_scores_equal_the_fts_macro(indexed, query):
    con, _ = indexed
    q = index.fts_query_text(query)
    ours = con.execute(lexical_sql(), [q, 50]).fetchall()
    macro = con.execute(
        "SELECT chunk_id, s FROM (SELECT chunk_id, fts_main_chunks.match_bm25(chunk_id, ?) AS s FROM chunks) "
        "WHERE s IS NOT NULL ORDER BY s DESC, chunk_id",
        [q],
    ).fetchall()
    assert ours and [c for c, _ in ours] == [c for c, _ in macro]
    assert [s for _, s in ours] == pytest.approx([s for _, s in macro], rel=1e-12)


def test_unrelated_query_finds_nothing(indexed):
    con, _ = indexed
    assert _lexical_ids(con, "zebra") == []


def test_build_reports_and_status(indexed):
    con, reports = indexed
    hnsw, fts = reports
    assert hnsw.rows == fts.rows == len(TEXTS)
    assert hnsw.params == {"metric": "cosine", "m": 8, "ef_construction": 32}
    status = index.index_status(con)
    assert status["ready"] and status["store_rows"] == len(TEXTS)
    assert status["hnsw"]["present"] and status["hnsw"]["m"] == 8 and not status["hnsw"]["stale"]
    assert status["fts"]["ignore"] == index.FTS_IGNORE and status["fts"]["stemmer"] == "none"
    assert status["embedding_model"] == "m@1" and status["dim"] == DIM


def test_hnsw_used_for_unfiltered_queries_after_reopen(indexed):
    con, _ = indexed
    q = make_vectors(1, 99)[0].tolist()
    plan = "".join(r[1] for r in con.execute("EXPLAIN " + vector_sql(DIM, filtered=False), [q, 5]).fetchall())
    assert "HNSW_INDEX_SCAN" in plan
    res = search(con, query_text="", query_vec=np.asarray(q, np.float32), mode="vector", k=3)
    assert res.vector_strategy == "hnsw" and len(res.hits) == 3


@pytest.mark.parametrize(
    ("text", "region", "extra"),
    [
        # phone: digits as typed = E.164 digits, national number, national form with trunk 0;
        # no last-7 / last-10 suffixes (they match other countries' numbers)
        ("+90 532 123 45 67", "US", "905321234567 5321234567 05321234567"),
        ("0532 123 45 67", "TR", "05321234567 905321234567 5321234567"),  # national, with its region
        ("0532 123 45 67", "US", "05321234567"),  # not a US number: only its digits
        ("(415) 555-0100", "US", "4155550100 14155550100"),  # US formatting
        ("at 5 pm", "US", ""),  # short numbers are left to the tokenizer
        ("東京駅", "US", "東京 京駅"),  # CJK bigrams
        ("party🎉🎉", "US", "emoji1f389"),  # emoji glued to a word, one token per distinct emoji
        ("👍🏽 👍", "US", "emoji1f44d"),  # a skin tone is the same emoji
        ("👨\u200d👩\u200d👧 🇹🇷", "US", "emoji1f468x1f469x1f467 emoji1f1f9x1f1f7"),  # ZWJ family, flag
        ("❤️", "US", "emoji2764"),  # variation selector dropped
        ("", "US", ""),  # nothing
    ],
)
def test_lexical_extra(text, region, extra):
    assert index.lexical_extra(text, region) == extra


def test_build_without_store_and_bad_metric():
    con = duck.connect(None)
    with pytest.raises(StoreError, match="run `brb ingest` first"):
        index.build_fts(con)
    with pytest.raises(ValueError, match="unknown HNSW metric"):
        index.build_hnsw(con, metric="manhattan")
    con.execute("BEGIN TRANSACTION")
    with pytest.raises(RuntimeError, match="inside an explicit transaction"):
        index.build_hnsw(con)
    con.execute("ROLLBACK")
    assert index.index_status(con)["ready"] is False
