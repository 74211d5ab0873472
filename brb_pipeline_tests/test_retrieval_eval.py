"""The retrieval harness (benchmarks/bench_retrieval.py): its scoring, its chunk -> message map,
and the shipped question set against the default demo archive it was written for."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from brb_pipeline.core.chunking import ChunkParams, chunk_messages
from brb_pipeline_tests.frames import message_frame
from brb_pipeline_tests.conftest import T0

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "benchmarks" / "questions_demo.json"


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_retrieval", ROOT / "benchmarks" / "bench_retrieval.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_retrieval"] = mod
    spec.loader.exec_module(mod)
    return mod


B = _load_bench()


# ----------------------------------------------------------------------------- scoring


@pytest.mark.parametrize(
    ("hits", "relevant", "expected"),
    [
        (["a", "b", "c"], {"a"}, 1),  # first hit relevant
        (["a", "b", "c"], {"c", "b"}, 2),  # the first relevant one counts, not the best-scored id
        (["a", "b", "c"], {"z"}, None),  # nothing relevant returned
        ([], {"a"}, None),  # no hits at all
        (["a", "b"], set(), None),  # a question with no relevant chunk can never hit
    ],
)
def test_first_relevant_rank(hits, relevant, expected):
    assert B.first_relevant_rank(hits, relevant) == expected


@pytest.mark.parametrize(
    ("ranks", "top1", "top5", "mrr", "misses"),
    [
        ([1, 1, 1, 1], 1.0, 1.0, 1.0, 0),  # perfect
        ([None, None], 0.0, 0.0, 0.0, 2),  # all missed
        ([1, 2, None, 4], 0.25, 0.75, (1 + 0.5 + 0.25) / 4, 1),  # mixed, a miss counts as 0
        ([5, 6], 0.0, 0.5, (0.2 + 1 / 6) / 2, 0),  # rank 5 is in top-5, rank 6 is not
        ([11, 3], 0.0, 0.5, (1 / 3) / 2, 1),  # beyond @10 contributes nothing and is a miss
        ([], 0.0, 0.0, 0.0, 0),  # no questions: zeros, not a division error
    ],
)
def test_summarize_ranks(ranks, top1, top5, mrr, misses):
    s = B.summarize_ranks(ranks, mrr_at=10)
    assert s["n"] == len(ranks)
    assert s["top1"] == pytest.approx(top1, abs=1e-4)
    assert s["top5"] == pytest.approx(top5, abs=1e-4)
    assert s["mrr@10"] == pytest.approx(mrr, abs=1e-4)
    assert s["misses"] == misses


def test_latency_summary():
    s = B.latency_summary([float(i) for i in range(1, 101)])
    assert s["p50_ms"] == pytest.approx(50.5)
    assert s["p95_ms"] == pytest.approx(95.05)
    assert B.latency_summary([]) == {"p50_ms": 0.0, "p95_ms": 0.0, "mean_ms": 0.0}


# ----------------------------------------------------------------------------- chunk membership


def _messages(rows):
    """rows: (chat_id, minutes, text). Message ids are assigned against time order on purpose."""
    return message_frame([(chat, minutes, text, bool(i % 2), "+15550001111")
                          for i, (chat, minutes, text) in enumerate(rows)],
                         message_id=lambda i: f"imessage:m{(97 * i) % 1000:04d}", t0=T0)


def _chunked():
    # chat a: 14 messages written out of time order, then a 10-hour silence and 3 more;
    # chat b: 5 messages interleaved in time with chat a.
    rows = [("imessage:a", m, f"talk number {m} about the lake trip") for m in [13, 2, 0, 7, 1, 12, 3, 4, 5, 6, 8, 9, 10, 11]]
    rows += [("imessage:a", 600 + m, f"later talk {m} about dinner plans") for m in range(3)]
    rows += [("imessage:b", m, f"other chat message {m} about the concert") for m in range(5)]
    msgs = _messages(rows)
    chunks = chunk_messages(msgs, batch="batch-000", contact_names={}, sender_names={},
                            params=ChunkParams(window=8, stride=4, gap_s=6 * 3600))
    return msgs, chunks


def test_chunk_members_match_the_windows_chunking_made():
    msgs, chunks = _chunked()
    members = B.chunk_members(chunks, msgs)
    got = {cid: set(g["message_id"]) for (cid,), g in members.group_by(["chunk_id"])}
    # The expected windows, from the chat's time order: a = 14 -> [0,8), [4,12), [6,14); then 3; b = 5.
    order_a = msgs.filter(pl.col("chat_id") == "imessage:a").sort("ts")["message_id"].to_list()
    order_b = msgs.filter(pl.col("chat_id") == "imessage:b").sort("ts")["message_id"].to_list()
    expected = [set(order_a[0:8]), set(order_a[4:12]), set(order_a[6:14]), set(order_a[14:17]), set(order_b)]
    assert sorted(map(sorted, got.values())) == sorted(map(sorted, expected))
    # Every chunk's member count is its message_count, and chunks never cross chats.
    counts = dict(zip(chunks["chunk_id"], chunks["message_count"], strict=True))
    assert all(len(v) == counts[k] for k, v in got.items())
    chat_of = dict(zip(chunks["chunk_id"], chunks["chat_id"], strict=True))
    assert members.filter(pl.col("chat_id") != pl.col("chunk_id").replace_strict(chat_of)).height == 0


def test_relevant_chunks_counts_overlap_and_respects_chat():
    msgs, chunks = _chunked()
    members = B.chunk_members(chunks, msgs)
    order_a = msgs.filter(pl.col("chat_id") == "imessage:a").sort("ts")["message_id"].to_list()
    order_b = msgs.filter(pl.col("chat_id") == "imessage:b").sort("ts")["message_id"].to_list()
    by_first = dict(zip(chunks["first_message_id"], chunks["chunk_id"], strict=True))
    resolved = {
        "q1": [("imessage:a", order_a[5])],  # inside two overlapping windows
        "q2": [("imessage:a", order_a[0]), ("imessage:a", order_a[15])],  # two conversations
        "q3": [("imessage:a", order_b[0])],  # right message, wrong chat
        "q4": [],  # nothing resolved
    }
    rel = B.relevant_chunks(members, resolved)
    assert rel["q1"] == {by_first[order_a[0]], by_first[order_a[4]]}
    assert rel["q2"] == {by_first[order_a[0]], by_first[order_a[14]]}
    assert rel["q3"] == set()
    assert rel["q4"] == set()


def _target(msgs, i, *, shift_s=0, prefix_len=60):
    row = msgs.row(i, named=True)
    return {"ts": (row["ts"] + timedelta(seconds=shift_s)).isoformat(), "text": row["text"][:prefix_len]}


def test_resolve_targets_by_time_and_text():
    msgs, _ = _chunked()
    mid = msgs["message_id"].to_list()
    chat = msgs["chat_id"].to_list()
    questions = [
        # exact time and prefix -> that message
        {"id": "exact", "targets": [_target(msgs, 3)]},
        # clock off by one second -> still that message
        {"id": "skew", "targets": [_target(msgs, 3, shift_s=1)]},
        # time far off but the 20-char prefix is unique in the archive -> found by text
        {"id": "moved", "targets": [_target(msgs, 17, shift_s=86400, prefix_len=20)]},
        # time far off and the prefix is shared by every "talk number" message -> not guessed
        {"id": "ambiguous", "targets": [{"ts": "2030-01-01T00:00:00+00:00", "text": "talk number"}]},
        # the text changed (edited message) -> nothing
        {"id": "edited", "targets": [{**_target(msgs, 3), "text": "something else entirely"}]},
        # no targets: the given ids, only those that exist
        {"id": "ids", "chat_id": chat[0], "message_ids": [mid[0], "imessage:gone"]},
    ]
    got = B.resolve_targets(questions, msgs)
    assert got == {
        "exact": [(chat[3], mid[3])],
        "skew": [(chat[3], mid[3])],
        "moved": [(chat[17], mid[17])],
        "ambiguous": [],
        "edited": [],
        "ids": [(chat[0], mid[0])],
    }


def test_chunk_members_rejects_store_from_another_ingest():
    msgs, chunks = _chunked()
    stale = chunks.with_columns(pl.lit("imessage:gone").alias("first_message_id"))
    with pytest.raises(ValueError, match="different ingests"):
        B.chunk_members(stale, msgs)


# ----------------------------------------------------------------------------- question files


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "no 'questions' list"),
        ({"questions": [{"id": "q1", "question": "x", "kind": "lexical", "chat_id": "c"}]}, "has no 'message_ids'"),
        ({"questions": [{"id": "q1", "question": "x", "kind": "lexical", "chat_id": "c", "message_ids": []}]},
         "no target message"),
        ({"questions": [{"id": "q1", "question": "x", "kind": "lexical", "chat_id": "c", "message_ids": ["m"]}] * 2},
         "duplicate question id q1"),
    ],
)
def test_load_questions_rejects_malformed_files(tmp_path, doc, message):
    p = tmp_path / "q.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=message):
        B.load_questions(p)


def test_load_questions_rejects_non_json(tmp_path):
    p = tmp_path / "q.json"
    p.write_bytes(b"\x00\x01not json")
    with pytest.raises(json.JSONDecodeError):
        B.load_questions(p)


@pytest.fixture(scope="module")
def demo_default(tmp_path_factory):
    """The default-size demo archive (the one the shipped questions were written for), read back."""
    from brb_pipeline.demo.generate import build_demo_archive
    from brb_pipeline.sources.addressbook import read_addressbook
    from brb_pipeline.sources.imessage import read_imessage

    doc = B.load_questions(QUESTIONS)
    arch = doc["archive"]
    archive = build_demo_archive(tmp_path_factory.mktemp("demo") / "archive", messages=arch["messages"],
                                 seed=arch["seed"])
    read = read_imessage(archive.chat_db)
    people = read_addressbook(archive.addressbook_dir).people
    return doc, read, people


def test_shipped_questions_resolve_in_the_default_demo_archive(demo_default):
    doc, read, _ = demo_default
    questions = doc["questions"]
    assert 40 <= len(questions) <= 60
    resolved = B.resolve_targets(questions, read.messages)
    # Every target anchor lands on exactly the message the question names, in its chat: the
    # generator or the corpus changing under the set fails here rather than scoring silently.
    for q in questions:
        assert resolved[q["id"]] == [(q["chat_id"], m) for m in q["message_ids"]], q["id"]
    text = {m: t for m, t in read.messages.select("message_id", "text").iter_rows()}
    for q in questions:
        for mid in q["message_ids"]:
            # A paraphrase, not a copy of the answer.
            assert q["question"].strip().lower() != (text[mid] or "").strip().lower(), q["id"]


def test_shipped_questions_are_well_formed(demo_default):
    doc, _, _ = demo_default
    questions = doc["questions"]
    assert {q["kind"] for q in questions} == set(B.KINDS)
    assert all(doc["kinds"][k] == sum(q["kind"] == k for q in questions) for k in B.KINDS)
    assert len({q["id"] for q in questions}) == len(questions)
    assert len({q["question"] for q in questions}) == len(questions)
    langs = {q["lang"] for q in questions if q["kind"] == "multilingual"}
    assert {"tr", "ar"} <= langs
    assert all(q["lang"] == "en" for q in questions if q["kind"] != "multilingual")
    assert doc["how_made"] and doc["hit_rule"]


def test_shipped_questions_name_no_contact(demo_default):
    """No question routes to a contact: none names one (display names come from the demo AddressBook)."""
    from brb_pipeline.core.contacts import resolve_contacts
    from brb_pipeline.core.routing import ContactRef, route_query

    doc, read, people = demo_default
    res = resolve_contacts(read.messages, read.chats, people)
    refs = [ContactRef(r["contact_id"], r["display_name"], tuple(r.get("handles") or []))
            for r in res.contacts.iter_rows(named=True)]
    assert len(refs) > 50  # the check is against the real contact list, not an empty one
    routed = {q["id"]: route_query(q["question"], refs).matched for q in doc["questions"]}
    assert {qid: m for qid, m in routed.items() if m} == {}
