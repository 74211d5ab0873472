"""Search over the distilled memory: topic summaries indexed (vectors, HNSW, BM25) and found as
their own hit kind, filters on topics, chunk-only results unchanged without topics, and
profiles (`brb profile`, the commitments answer of `brb search "what did I promise NAME"`)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from brb_pipeline.core.search.sql import Filters
from brb_pipeline.core import metadata
from brb_pipeline.core.embedding.hashing import HashEmbedder
from brb_pipeline.core.search.hybrid import search
from brb_pipeline.core.search.profiles import is_commitment_question, read_profile
from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.store import duck, index
from brb_pipeline.core.store.topic_index import TOPIC_VECTORS, index_topics, topic_index_due
from brb_pipeline.stages.store import run_vector_index
from brb_pipeline.config.settings import Settings
from brb_pipeline_tests.helpers import T0
from brb_pipeline_tests.helpers.cli import cli
from brb_pipeline_tests.helpers.store import make_chunks, make_vectors
from brb_pipeline_tests.helpers.topics import TOPICS_DDL
from brb_pipeline_tests.helpers.topics import add_topics as _add_topics

DIM = 384  # the CLI tests' embedder (BRB_EMBEDDING_MODEL=hash)
MODEL = f"hash-{DIM}"
EMB = HashEmbedder(DIM)
PROFILES_DDL = (
    "CREATE TABLE profiles(contact_id VARCHAR PRIMARY KEY, relationship VARCHAR, tone VARCHAR, "
    "recurring_topics VARCHAR[], commitments JSON, n_topics INTEGER, model_id VARCHAR, prompt_version INTEGER)"
)
def _chunk_store(path: Path):
    """Chunks of "diego" and "maya" (random vectors, texts about the weekend), both indexes built."""
    p1 = store.write_partition(path.parent / "st", "b1", make_chunks("b1", "diego", 30), make_vectors(30, 1, DIM), MODEL)
    p2 = store.write_partition(path.parent / "st", "b2", make_chunks("b2", "maya", 20), make_vectors(20, 2, DIM), MODEL)
    con = duck.connect(path)
    store.load_partitions(con, {"b1": p1, "b2": p2})
    index.build_indexes(con, m=8, ef_construction=64)
    return con


def _topic_store(path: Path):
    con = _chunk_store(path)
    _add_topics(con)
    report = index_topics(con, lambda: EMB, m=8, ef_construction=64)
    assert report["topics_indexed"] == 3 and report["topics_embedded"] == 3
    return con


def _search(con, text, mode="hybrid", **kw):
    where = {f: kw.pop(f) for f in ("contact_ids", "channel", "since", "until", "chunk_ids") if f in kw}
    kw["filters"] = Filters(**where)
    return search(con, query_text=text, query_vec=EMB.embed_query(text) if mode != "lexical" else None,
                  mode=mode, k=kw.pop("k", 10), topics=kw.pop("topics", True), **kw)


def test_topics_are_indexed_once_and_found_by_paraphrase_and_exact_token(tmp_path):
    con = _topic_store(tmp_path / "brb.duckdb")
    assert con.execute(f"SELECT count(*) FROM {TOPIC_VECTORS}").fetchone()[0] == 3
    assert not topic_index_due(con)
    again = index_topics(con, lambda: pytest.fail("nothing changed: the embedder is not needed"))
    assert again["topics_embedded"] == 0
    res = _search(con, "signing the lease for the flat", mode="vector")
    topics = [h for h in res.hits if h.kind == "topic"]
    assert topics[0].topic_id == "t-lease"  # a paraphrase, by the summary's vector
    lex = _search(con, "zanzibar", mode="lexical")
    assert [h.topic_id for h in lex.hits if h.kind == "topic"] == ["t-zanzibar"]  # an exact token, by BM25
    con.execute("UPDATE topics SET summary = 'We chose Lisbon instead of Zanzibar.' WHERE topic_id = 't-zanzibar'")
    con.execute("DELETE FROM topics WHERE topic_id = 't-concert'")
    assert topic_index_due(con)
    changed = index_topics(con, lambda: EMB)
    assert (changed["topics_indexed"], changed["topics_embedded"]) == (2, 1)
    assert [h.topic_id for h in _search(con, "lisbon", mode="lexical").hits if h.kind == "topic"] == ["t-zanzibar"]
    assert con.execute(f"SELECT count(*) FROM {TOPIC_VECTORS}").fetchone()[0] == 2
    con.close()


def test_filters_apply_to_topics_and_few_reach_the_top(tmp_path):
    con = _topic_store(tmp_path / "brb.duckdb")
    kinds = lambda res: [(h.kind, getattr(h, "topic_id", None)) for h in res.hits if h.kind == "topic"]  # noqa: E731
    assert {t for _, t in kinds(_search(con, "tickets lease holiday"))} == {"t-lease", "t-zanzibar", "t-concert"}
    assert {t for _, t in kinds(_search(con, "tickets lease holiday", contact_ids=["maya"]))} == {"t-concert"}
    since = T0 + timedelta(days=30)
    assert {t for _, t in kinds(_search(con, "tickets lease holiday", since=since))} == {"t-zanzibar"}
    assert {t for _, t in kinds(_search(con, "tickets lease holiday", until=T0 + timedelta(days=1)))} == {"t-lease"}
    assert kinds(_search(con, "tickets lease holiday", channel="imessage")) == []  # topics span channels
    more = [(f"t-x{i}", "diego", "2024-05", "Lease", f"lease lease note {i}", 60 + i) for i in range(6)]
    for tid, contact, month, label, summary, day in more:
        con.execute("INSERT INTO topics VALUES (?, ?, 'b', ?, 'en', ?, ?, 'c', ?, ?, 'a', 'b', 'm', 1)",
                    [tid, contact, month, label, summary, T0 + timedelta(days=day), T0 + timedelta(days=day)])
    index_topics(con, lambda: EMB)
    res = _search(con, "lease", k=10)
    assert len(kinds(res)) == 3 and len(res.hits) == 10  # at most MAX_TOPICS topics in the top k
    assert [h.score for h in res.hits] == sorted((h.score for h in res.hits), reverse=True)
    con.close()


def test_no_topics_gives_todays_results_and_missing_tables_are_quiet(tmp_path):
    con = _chunk_store(tmp_path / "brb.duckdb")
    for mode in ("hybrid", "vector", "lexical"):
        before = [(h.chunk_id, h.score) for h in _search(con, "weekend chunk 3", mode=mode, topics=False).hits]
        with_flag = [(h.kind, h.chunk_id, h.score) for h in _search(con, "weekend chunk 3", mode=mode).hits]
        assert with_flag == [("chunk", c, s) for c, s in before]  # no topics table at all
        con.execute(TOPICS_DDL)  # an empty table: no model configured
        assert index_topics(con, lambda: pytest.fail("no topics: no embedder"))["topics_indexed"] == 0
        assert [(h.chunk_id, h.score) for h in _search(con, "weekend chunk 3", mode=mode).hits] == before
        con.execute("DROP TABLE topics")
    assert read_profile(con, "diego") is None  # no profiles table
    con.execute(PROFILES_DDL)
    assert read_profile(con, "diego") is None  # an empty one
    con.close()


def test_vector_stage_indexes_topics_added_to_a_published_store(tmp_path):
    s = Settings.load(tmp_path, embedding_model=MODEL)
    con = _chunk_store(s.duckdb_path)
    _add_topics(con)
    con.close()
    meta = run_vector_index(s, embedder=lambda _s: EMB)
    assert meta["published"] and meta["topics_indexed"] == 3 and meta["topics_embedded"] == 3
    con = duck.connect(s.duckdb_path, read_only=True)
    assert con.execute(f"SELECT count(*) FROM {TOPIC_VECTORS}").fetchone()[0] == 3
    con.close()
    assert run_vector_index(s, embedder=lambda _s: pytest.fail("up to date"))["reason"].startswith("store unchanged")


def _home(tmp_path: Path, *, profiles: bool = True) -> Path:
    """A home with brb.db contacts (Diego Alvarez, Maya Chen), chunks, topics and a profile for Diego."""
    s = Settings.load(tmp_path, embedding_model=MODEL)
    with metadata.connect(s.brb_db):
        pass
    metadata.replace_contacts(s.brb_db, pl.DataFrame([
        {"contact_id": cid, "display_name": name, "name_source": "addressbook", "kind": "person",
         "channels": ["imessage"], "handles": [], "batch": b, "rank": i}
        for i, (cid, name, b) in enumerate([("diego", "Diego Alvarez", "b1"), ("maya", "Maya Chen", "b2")])]))
    con = _topic_store(s.duckdb_path)
    if profiles:
        con.execute(PROFILES_DDL)
        con.execute("INSERT INTO profiles VALUES ('diego', 'close friend', 'warm, teasing', "
                    "['housing', 'travel'], ?, 2, 'tiny@1', 1)",
                    [json.dumps([{"text": "send Diego the signed lease", "date": "2024-03-28"},
                                 {"text": "book the dive school", "date": None}])])
    con.close()
    return tmp_path


def test_search_json_has_topic_hits_with_their_span(tmp_path):
    home = _home(tmp_path)
    r = cli("search", "diving holiday flights", "--json", home=home)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    topic = next(h for h in out["hits"] if h["kind"] == "topic")
    assert topic["topic_id"] == "t-zanzibar" and topic["contact"] == "Diego Alvarez"
    assert (topic["chat_id"], topic["first_message_id"], topic["last_message_id"]) == ("chat-diego", "t-zanzibar-m1",
                                                                                        "t-zanzibar-m9")
    assert topic["start"].startswith("2024-04-10T12:00") and topic["end"].startswith("2024-04-10T14:00")
    assert {h["kind"] for h in out["hits"]} == {"topic", "chunk"} and "profile" not in out
    text = cli("search", "diving holiday flights", home=home)
    assert "[topic] Diego Alvarez  2024-04-10T12:00 .. 2024-04-10T14:00" in text.stdout
    assert "(chat chat-diego, messages t-zanzibar-m1 .. t-zanzibar-m9)" in text.stdout


def test_what_did_i_promise_answers_from_the_profile_first(tmp_path):
    home = _home(tmp_path)
    out = json.loads(cli("search", "what did I promise Diego", "--json", home=home).stdout)
    assert list(out).index("profile") < list(out).index("hits")
    assert out["profile"] == {"contact_id": "diego", "contact": "Diego Alvarez", "relationship": "close friend",
                              "commitments": [{"text": "send Diego the signed lease", "date": "2024-03-28"},
                                              {"text": "book the dive school", "date": None}]}
    text = cli("search", "what did I promise Diego", home=home).stdout.splitlines()
    assert text[:4] == ["(searching Diego's conversations for: what did I promise)", "What you promised Diego Alvarez:",
                        "  - send Diego the signed lease (2024-03-28)", "  - book the dive school"]
    plain = json.loads(cli("search", "lease with Diego", "--json", home=home).stdout)
    assert "profile" not in plain  # not a question about promises


@pytest.mark.parametrize("question, asks", [
    ("what did I promise Diego", True),
    ("did I say I'd call her back", True),
    ("Ayşe'ye ne söz verdim", True),  # Turkish
    ("qué le prometí a Diego", True),  # Spanish
    ("was habe ich Diego versprochen", True),  # German
    ("qu'est-ce que j'ai promis à Diego", True),  # French
    ("where did Diego go on holiday", False),
    ("lease contract with Diego", False),
])
def test_commitment_questions(question, asks):
    assert is_commitment_question(question) is asks


def test_profile_command_prints_profile_and_topics_newest_first(tmp_path):
    home = _home(tmp_path)
    r = cli("profile", "Diego", home=home)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines() == [
        "Diego Alvarez",
        "relationship    close friend",
        "tone            warm, teasing",
        "recurring       housing, travel",
        "commitments",
        "  - send Diego the signed lease (2024-03-28)",
        "  - book the dive school",
        "topics          2 (newest first)",
        "  2024-04  Holiday plans  [2024-04-10T12:00 .. 2024-04-10T14:00, chat chat-diego]",
        "    We planned a diving holiday in Zanzibar for the summer and compared flights.",
        "  2024-03  Apartment lease  [2024-03-01T12:00 .. 2024-03-01T14:00, chat chat-diego]",
        "    Diego and I decided to sign the apartment lease contract before the end of March.",
    ]
    out = json.loads(cli("profile", "Diego", "--json", home=home).stdout)
    assert [t["topic_id"] for t in out["topics"]] == ["t-zanzibar", "t-lease"]
    assert out["profile"]["recurring_topics"] == ["housing", "travel"]


def test_profile_command_errors_are_one_line(tmp_path):
    home = _home(tmp_path / "full")
    r = cli("profile", "Zed", home=home)
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == "brb: error: no contact matches 'Zed': see `brb status` or use a handle (+15551234567, a@b.com)\n"
    r = cli("profile", "Maya", home=home)
    assert r.stderr == "brb: error: no distilled memory for Maya: set BRB_LLM_MODEL_PATH and run brb ingest\n"
    bare = _home(tmp_path / "bare", profiles=False)  # a store from before the memory
    r = cli("profile", "Diego", home=bare)
    assert r.stderr == "brb: error: no distilled memory for Diego: set BRB_LLM_MODEL_PATH and run brb ingest\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cli("profile", "Diego", home=empty)
    assert r.stderr == f"brb: error: no search store in {empty}: run `brb ingest` (or `brb demo`) first\n"


def test_forget_compaction_drops_the_persons_memory_and_keeps_the_rest(tmp_path):
    """compact_without (what `brb forget` runs on the store) leaves no topic, profile or topic
    vector of the forgotten contact in the new file, keeps the others searchable, and the old
    summary text is gone from the file's bytes (the scan finds it before, so it can fail)."""
    from brb_pipeline.core.store.compact import compact_without

    path = tmp_path / "brb.duckdb"
    con = _topic_store(path)
    con.execute(PROFILES_DDL)
    con.execute("INSERT INTO profiles VALUES ('diego', 'friend', 'warm', ['holidays'], "
                "'[{\"text\": \"sign the lease\", \"date\": null}]', 2, 'tiny@1', 1)")
    con.execute("INSERT INTO profiles VALUES ('maya', 'friend', 'warm', ['music'], '[]', 1, 'tiny@1', 1)")
    con.execute("CHECKPOINT")
    con.close()
    phrase = b"diving holiday in Zanzibar"
    assert phrase in path.read_bytes()
    compact_without(path, ["diego"])
    assert phrase not in path.read_bytes()
    con = duck.connect(path, read_only=True)
    try:
        assert con.execute("SELECT contact_id FROM topics").fetchall() == [("maya",)]
        assert con.execute("SELECT contact_id FROM profiles").fetchall() == [("maya",)]
        assert con.execute(f"SELECT topic_id FROM {TOPIC_VECTORS}").fetchall() == [("t-concert",)]
        assert not topic_index_due(con)  # the kept vectors and both topic indexes are current
        hits = _search(con, "jazz concert tickets", mode="lexical")
        assert [h.topic_id for h in hits.hits if h.kind == "topic"] == ["t-concert"]
    finally:
        con.close()
