"""Chunking: windows, overlap, conversation gaps, ids and text formats."""

from datetime import datetime, timezone

import pytest

from brb_pipeline.core.chunking import (
    CHUNK_SCHEMA,
    ChunkParams,
    chunk_messages,
    conversation_ids,
    truncate_graphemes,
    split_graphemes,
    window_bounds,
)
from brb_pipeline_tests.helpers.frames import message_frame

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "n, window, stride, expected",
    [
        (0, 8, 4, []),  # nothing to chunk
        (3, 8, 4, [(0, 3)]),  # shorter than a window: one chunk
        (8, 8, 4, [(0, 8)]),  # exactly one window
        (10, 8, 4, [(0, 8), (2, 10)]),  # tail window aligned to the end, not a 2-message fragment
        (16, 8, 4, [(0, 8), (4, 12), (8, 16)]),  # regular overlap of window - stride
        (20, 8, 4, [(0, 8), (4, 12), (8, 16), (12, 20)]),
        (5, 2, 2, [(0, 2), (2, 4), (3, 5)]),  # no overlap except the aligned tail
        (4, 1, 1, [(0, 1), (1, 2), (2, 3), (3, 4)]),  # one message per chunk
    ],
)
def test_window_bounds(n, window, stride, expected):
    assert window_bounds(n, window, stride) == expected


def test_every_message_is_covered_and_boundaries_appear_twice():
    bounds = window_bounds(37, 8, 4)
    covered = [0] * 37
    for a, b in bounds:
        for i in range(a, b):
            covered[i] += 1
    assert min(covered) >= 1
    assert covered[4] == 2 and covered[7] == 2  # messages on a window boundary are in two chunks


@pytest.mark.parametrize(
    "offsets_s, gap_s, expected",
    [
        ([0, 60, 120], 3600, [0, 0, 0]),  # one conversation
        ([0, 60, 60 + 3601], 3600, [0, 0, 1]),  # silence just above the gap splits
        ([0, 3600], 3600, [0, 0]),  # exactly the gap does not split
        ([0, 10_000, 20_000, 20_010], 3600, [0, 1, 2, 2]),
    ],
)
def test_conversation_ids(offsets_s, gap_s, expected):
    assert conversation_ids([o * 1_000_000 for o in offsets_s], gap_s) == expected


def test_params_reject_stride_larger_than_window():
    with pytest.raises(ValueError, match="stride"):
        ChunkParams(window=4, stride=5)


@pytest.mark.parametrize(
    "text, limit, expected",
    [
        ("hello", 10, "hello"),  # short text unchanged
        ("hello world", 5, "hello…"),
        ("ab👍🏽cd", 3, "ab…"),  # a skin-tone modifier is not separated from its emoji
        ("ok 👨‍👩‍👧 yes", 5, "ok …"),  # a ZWJ family is never cut after the joiner
        ("cafe\u0301!", 4, "caf…"),  # combining accent stays with its letter
    ],
)
def test_truncate_graphemes(text, limit, expected):
    assert truncate_graphemes(text, limit) == expected


def _messages(rows):
    """rows: (chat_id, minutes, text, is_from_me, sender)."""
    return message_frame(rows, t0=T0)


def test_chunk_messages_windows_gaps_and_texts():
    rows = [("imessage:a", i, f"message number {i} about the trip", i % 2 == 0, "+15550001111") for i in range(10)]
    rows += [("imessage:a", 600 + i, f"later talk {i} about dinner plans", i % 2 == 1, "+15550001111") for i in range(3)]
    msgs = _messages(rows)
    out = chunk_messages(msgs, batch="batch-000", contact_names={"c:imessage:a": "Ayşe Yılmaz"},
                         sender_names={"+15550001111": "Ayşe"}, params=ChunkParams(gap_s=3600, time_zone="UTC"))
    assert out.schema == CHUNK_SCHEMA
    # 10 messages -> 2 windows; a 10-hour silence starts a conversation of 3 messages -> 1 window
    assert out["message_count"].to_list() == [8, 8, 3]
    assert out["conversation"].to_list() == [0, 0, 1]
    assert out["position"].to_list() == [0, 1, 2]
    first = out.row(0, named=True)
    assert first["content"].splitlines()[0] == "Me (09:00): message number 0 about the trip"
    assert first["content"].splitlines()[1] == "Ayşe (09:01): message number 1 about the trip"
    # embedded: contact and day in the header, the lines without clock times
    emb_lines = first["embedding_text"].splitlines()
    assert emb_lines[0] == "Conversation with Ayşe Yılmaz, 2024-03-01"
    assert emb_lines[1:3] == ["Me: message number 0 about the trip", "Ayşe: message number 1 about the trip"]
    assert len(emb_lines) == 9
    assert out["chunk_id"].n_unique() == 3


def test_chunk_ids_are_stable_and_prefix_applied():
    msgs = _messages([("imessage:b", i, f"stable text {i} with words", False, "+15550002222") for i in range(12)])
    a = chunk_messages(msgs, batch="b", contact_names={}, sender_names={})
    b = chunk_messages(msgs.sample(fraction=1.0, shuffle=True, seed=3), batch="b", contact_names={}, sender_names={})
    assert a["chunk_id"].to_list() == b["chunk_id"].to_list()  # input order does not matter
    p = chunk_messages(msgs, batch="b", contact_names={}, sender_names={},
                       params=ChunkParams(document_prefix="search_document: "))
    assert all(t.startswith("search_document: Conversation with") for t in p["embedding_text"])


def test_min_chars_drops_tiny_conversations_and_empty_input():
    msgs = _messages([("imessage:c", 0, "ok", False, "+15550003333")])
    assert chunk_messages(msgs, batch="b", contact_names={}, sender_names={}).height == 0
    empty = _messages([])
    assert chunk_messages(empty, batch="b", contact_names={}, sender_names={}).schema == CHUNK_SCHEMA


def test_bad_input_one_megabyte_emoji_rtl():
    big = " ".join(f"w{i}" for i in range(150_000))  # ~1 MB message, every word distinct
    msgs = _messages([
        ("imessage:d", 0, big, False, "+15550004444"),
        ("imessage:d", 1, "🎉🎉🎉👨‍👩‍👧", True, None),
        ("imessage:d", 2, "مرحبا كيف حالك اليوم", False, "+15550004444"),
        ("imessage:d", 3, None, False, "+15550004444"),
    ])
    out = chunk_messages(msgs, batch="b", contact_names={}, sender_names={})
    # The 1 MB message is continued, not cut: lines of <= 2000 chars (~530 of them); with the
    # three other messages they are covered by windows of 8 advancing by 4.
    n_pieces = len(split_graphemes(big, 2000))
    assert 500 < n_pieces < 560
    assert out.height == len(window_bounds(n_pieces + 3, 8, 4))
    lines = [ln for c in out["content"] for ln in c.splitlines()]
    assert max(len(ln) for ln in lines) <= 2000 + 2 + len("+15550004444 (09:00): ")
    by_line = dict.fromkeys(lines)  # windows overlap: each line once, in order
    pieces = [ln.split(": ", 1)[1].strip("…") for ln in by_line if ln.startswith("+15550004444 (09:00)")]
    assert len(pieces) == n_pieces and " ".join(pieces).split() == big.split()  # every word kept, in order
    last = out["content"][-1]
    assert "🎉🎉🎉👨‍👩‍👧" in last and "مرحبا كيف حالك اليوم" in last
    assert out["message_count"][0] == 1 and out["message_count"][-1] == 4  # messages, not lines
    assert out["first_message_id"].n_unique() == 1  # every window starts inside the long message
    assert out["chunk_id"].n_unique() == out.height  # windows inside one message get distinct ids
