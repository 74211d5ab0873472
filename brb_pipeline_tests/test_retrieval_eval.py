"""The retrieval harness (benchmarks/bench_retrieval.py) and the question maker
(benchmarks/make_questions.py): scoring with intervals, the chunk -> message map, the rules the
frozen questions keep, and the frozen halves against the full demo archive they were made on."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from brb_pipeline.core.chunking import ChunkParams, chunk_messages
from brb_pipeline_tests.helpers.frames import message_frame
from brb_pipeline_tests.helpers import T0

ROOT = Path(__file__).resolve().parents[1]
QDIR = ROOT / "benchmarks" / "questions"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


B = _load("bench_retrieval")
M = _load("make_questions")


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
    ("ranks", "h1", "h5", "h10", "mrr"),
    [
        ([1, 1, 1, 1], 1.0, 1.0, 1.0, 1.0),  # perfect
        ([None, None], 0.0, 0.0, 0.0, 0.0),  # all missed
        ([1, 2, None, 4], 0.25, 0.75, 0.75, (1 + 0.5 + 0.25) / 4),  # a miss counts as 0
        ([5, 6], 0.0, 0.5, 1.0, (0.2 + 1 / 6) / 2),  # rank 5 is in the top 5, rank 6 is not
        ([11, 3], 0.0, 0.5, 0.5, (1 / 3) / 2),  # beyond @10 contributes nothing
        ([], 0.0, 0.0, 0.0, 0.0),  # no questions: zeros, not a division error
    ],
)
def test_quality(ranks, h1, h5, h10, mrr):
    s = B.quality(ranks, mrr_at=10, boot=200)
    assert s["n"] == len(ranks)
    assert (s["hit@1"], s["hit@5"], s["hit@10"]) == pytest.approx((h1, h5, h10), abs=1e-3)
    assert s["mrr@10"] == pytest.approx(mrr, abs=1e-3)
    for key in ("hit@1", "hit@5", "mrr@10"):
        lo, hi = s[key + "_ci"]
        assert lo <= s[key] + 1e-9 and s[key] <= hi + 1e-9


def test_bootstrap_interval_narrows_with_more_questions():
    few = B.bootstrap_ci([1.0, 0.0] * 10, n=500)
    many = B.bootstrap_ci([1.0, 0.0] * 500, n=500)
    assert few[0] < many[0] <= 0.5 <= many[1] < few[1]
    assert B.bootstrap_ci([1.0] * 5) == (1.0, 1.0)
    assert B.bootstrap_ci([]) == (0.0, 0.0)


def test_duplicate_slots_and_hit_rank_use_every_merged_chunk():
    hits = [{"chunk_id": "a", "chunk_ids": ["a", "b"], "chat_id": "c1", "start": "2018-01-01T10:00", "end": "2018-01-01T11:00"},
            {"chunk_id": "x", "chat_id": "c2", "start": "2018-01-01T10:00", "end": "2018-01-01T11:00"},
            {"chunk_id": "y", "chat_id": "c1", "start": "2018-01-01T10:30", "end": "2018-01-01T12:00"},
            {"chunk_id": "z", "chat_id": "c1", "start": "2018-01-02T10:30", "end": "2018-01-02T12:00"}]
    assert B.duplicate_slots(hits) == 1  # y overlaps the first hit of its chat; x is another chat
    assert B.hit_rank(hits, {"b"}) == 1  # a merged member counts
    assert B.hit_rank(hits, {"z"}) == 4
    assert B.hit_rank(hits, {"q"}) is None


def test_calibrate_flags_at_most_the_share_asked():
    found = [0.30 + 0.01 * i for i in range(50)]
    floor = B.calibrate(found, [0.2, 0.3])
    assert sum(x < floor for x in found) / len(found) <= 0.1
    assert B.calibrate([], [0.5]) == 0.0


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
        ({"questions": [{"id": "q1", "question": "x", "kind": "short", "chat_id": "c"}]}, "has no 'message_ids'"),
        ({"questions": [{"id": "q1", "question": "x", "kind": "short", "targets": []}]}, "no target message"),
        ({"questions": [{"id": "q1", "kind": "short", "targets": [{"ts": "x", "text": "y"}]}]}, "has no 'question'"),
        ({"questions": [{"id": "q1", "question": "x", "kind": "short", "chat_id": "c", "message_ids": ["m"]}] * 2},
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


def _item(kind, target, **extra):
    return {"id": "q1", "kind": kind, "target": {"ts": "2018-01-01T00:00:00+00:00", "text": target}, **extra}


@pytest.mark.parametrize(
    ("item", "question", "why"),
    [
        (_item("paraphrase", "We watched a scary film marathon all night"), "that horror movie night we stayed up", None),
        (_item("paraphrase", "We watched a scary film marathon all night"), "the scary films we watched", "shares 3"),
        (_item("paraphrase", "I love my dogs so much"), "how much I adore my dog", None),  # one shared (dog/dogs)
        (_item("paraphrase", "I love my dogs"), "loving dogs", "shares 2"),  # love/loving and dogs/dog are the same
        (_item("short", "We watched a scary film marathon all night"), "horror movie night", None),
        (_item("short", "We watched a scary film marathon all night"), "that horror movie night we had", "6 words"),
        (_item("contact", "The dentist moved my appointment", contact="Alex King"), "what did Alex say about the clinic", None),
        (_item("contact", "The dentist moved my appointment", contact="Alex King"), "the clinic visit", "not named"),
        (_item("exact", "a Kabalevsky piece on piano", token="Kabalevsky"), "the kabalevsky thing", None),
        (_item("exact", "a Kabalevsky piece on piano", token="Kabalevsky"), "that composer", "missing"),
        (_item("short", "anything"), "  ", "empty"),
    ],
)
def test_question_rules(item, question, why):
    got = M.check(item, question, M.stop_words())
    assert (got is None) if why is None else (why in got), got


def test_split_is_stratified_deterministic_and_disjoint():
    items = [{"id": f"q{i:03d}", "kind": M.KINDS[i % 4]} for i in range(41)]
    dev, test = M.split(items, seed=3)
    assert M.split(items, seed=3) == (dev, test)
    assert {x["id"] for x in dev}.isdisjoint({x["id"] for x in test})
    assert len(dev) + len(test) == 41
    for kind in M.KINDS:
        d, t = (sum(x["kind"] == kind for x in half) for half in (dev, test))
        assert abs(d - t) <= 1


def _halves():
    return [B.load_questions(QDIR / f"retrieval_{h}.json") for h in ("dev", "test")]


def test_frozen_halves_keep_their_rules_and_match_the_worksheet():
    dev, test = _halves()
    ws = json.loads((QDIR / "worksheet.json").read_text(encoding="utf-8"))
    items = {x["id"]: x for x in ws["items"]}
    stops = M.stop_words()
    ids = [q["id"] for q in dev["questions"] + test["questions"]]
    assert len(ids) == len(set(ids)) >= 150  # disjoint halves, enough questions
    for doc in (dev, test):
        assert {q["kind"] for q in doc["questions"]} == set(M.KINDS)
        assert doc["how_made"] and doc["rules"] == ws["rules"]
        for q in doc["questions"]:
            item = items[q["id"]]
            assert q["kind"] == item["kind"]
            assert M.check(item, q["question"], stops) is None, q["id"]
            assert q["targets"][0]["text"] == item["target"]["text"][:60]
    # Re-freezing the shipped answers reproduces the halves exactly (the split is by seed).
    answers = {}
    for line in (QDIR / "answers.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        answers[row["id"]] = row["question"]
    again = M.freeze(ws, answers, dev["split_seed"])
    assert again["dev"] == dev["questions"] and again["test"] == test["questions"]


@pytest.mark.slow  # scale: the whole 258,145-message demo archive
def test_frozen_targets_resolve_in_the_full_demo_archive(tmp_path):
    """Every target anchor lands on exactly one message of the archive the set was made on: the
    generator or the corpus changing under the set fails here instead of scoring silently."""
    from brb_pipeline.demo.generate import build_demo_archive
    from brb_pipeline.sources.imessage import read_imessage

    dev, test = _halves()
    archive = build_demo_archive(tmp_path / "archive", messages=None, seed=dev["archive"]["seed"])
    msgs = read_imessage(archive.chat_db).messages
    questions = dev["questions"] + test["questions"]
    resolved = B.resolve_targets(questions, msgs)
    assert {qid: len(p) for qid, p in resolved.items() if len(p) != 1} == {}


# ----------------------------------------------------------------------------- parent-child


P = _load("bench_parent_child")


def test_children_map_back_to_the_parent_holding_their_middle_message():
    msgs, chunks = _chunked()
    members = B.chunk_members(chunks, msgs)
    texts, middles, contacts = P.child_units(msgs, {}, 3, 2, 6 * 3600)
    # chat a: 14 messages -> [0,3) [2,5) ... [10,13) [11,14) = 7, then 3 -> 1; chat b: 5 -> 2
    assert len(texts) == 10 and len(middles) == 10
    assert all(t.startswith("Conversation with ") and len(t.splitlines()) == 4 for t in texts)
    holders = members.group_by("message_id").agg(pl.col("chunk_id"))
    held = dict(zip(holders["message_id"], holders["chunk_id"], strict=True))
    assert all(m in held for m in middles)  # every child's middle message is in some parent chunk
    info = {c: (ch, cv, st, en) for c, ch, cv, st, en in chunks.select(
        "chunk_id", "chat_id", "conversation", "start_ts", "end_ts").iter_rows()}
    a = chunks.filter(pl.col("chat_id") == "imessage:a").sort("position")["chunk_id"].to_list()
    b = chunks.filter(pl.col("chat_id") == "imessage:b")["chunk_id"].to_list()
    # Overlapping parents of one conversation count as one passage; the other chat is next.
    assert P._merge_rank([a[0], a[1], b[0]], info, {b[0]}, k=10) == 2
    assert P._merge_rank([a[0], a[3], b[0]], info, {a[3]}, k=10) == 2  # another conversation of chat a
    assert P._merge_rank([a[0], b[0]], info, {b[0]}, k=1) is None  # cut at k passages


def test_peer_passages_merge_windows_as_brb_and_are_judged_by_their_chunks():
    import duckdb

    L = _load("bench_long_chats")
    msgs, chunks = _chunked()
    con = duckdb.connect()
    con.register("chunks", chunks.to_arrow())
    w = L.Windows(con)
    a = chunks.filter(pl.col("chat_id") == "imessage:a").sort("position")["chunk_id"].to_list()
    b = chunks.filter(pl.col("chat_id") == "imessage:b")["chunk_id"].to_list()
    groups = w.groups([a[1], b[0], a[0], a[3]])
    # a[0] and a[1] overlap (stride 4 of 8): one passage at a[1]'s rank; b next; a[3] is chat a's
    # later conversation, its own passage.
    assert groups == [[a[0], a[1]], [b[0]], [a[3]]]
    assert w.passages([a[1], b[0]])[1] == w.meta[b[0]][6]
    hits = [{"chunk_ids": g} for g in groups]
    assert B.hit_rank(hits, {a[0]}) == 1 and B.hit_rank(hits, {a[3]}) == 3 and B.hit_rank(hits, {"z"}) is None
