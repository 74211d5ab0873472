"""What BM25 can find in real chunks: control and zero-width characters, emoji, long messages,
phone numbers. Chunks come from the chunking stage and go through a real DuckDB FTS index."""

from __future__ import annotations

import pytest

from brb_pipeline.core.store import duck
from brb_pipeline.core.store import index
from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.chunking import ChunkParams, chunk_messages, findable_text
from brb_pipeline.core.search.hybrid import search
from brb_pipeline_tests.helpers.frames import message_frame
from brb_pipeline_tests.helpers.store import make_vectors

LONG = " ".join(f"filler{i}" for i in range(600)) + " xylophone"  # ~5,000 chars, the last word past 2,000

# chat -> one message in it
MESSAGES = {
    "nul": "görüşürüz café\x00 then the zebra arrived",  # accent + NUL: fts strip_accents stopped at NUL
    "emoji": "what a party🎉 last night",
    "tone": "sounds good 👍🏽 see you there",
    "zwj": "the foo\u200dbar release is out today",
    "long": LONG,
    "phone": "my new number is +90 532 123 45 67 call me",
    "other": "+44 20 7123 4567 is the office line",  # the same last 7 digits, another country
    "plain": "nothing special here, just chatting about lunch",
}


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("findable")
    rows = [(f"imessage:{chat}", 0, text, False, "+15550001111") for chat, text in MESSAGES.items()]
    chunks = chunk_messages(message_frame(rows), batch="batch-000", contact_names={}, sender_names={},
                            params=ChunkParams(time_zone="UTC"))
    p = store.write_partition(tmp / "staging", "batch-000", chunks, make_vectors(chunks.height, 1), "m@1")
    c = duck.connect(tmp / "brb.duckdb")
    store.load_partitions(c, {"batch-000": p})
    index.build_fts(c)
    yield c
    c.close()


def _chats(con, query):
    res = search(con, query_text=query, query_vec=None, mode="lexical", k=20)
    chat = dict(con.execute("SELECT chunk_id, chat_id FROM chunks").fetchall())
    return {chat[h.chunk_id].split(":", 1)[1] for h in res.hits}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("zebra", {"nul"}),  # after a NUL in a chunk with accents
        ("🎉", {"emoji"}),  # emoji as a token
        ("party", {"emoji"}),  # the word glued to it still
        ("👍", {"tone"}),  # a skin-toned thumbs up is a thumbs up
        ("foobar", {"zwj"}),  # zero-width joiner inside a word removed
        ("foo\u200dbar", {"zwj"}),  # ... in the query too
        ("xylophone", {"long"}),  # the end of a 5,000-character message
        ("05321234567", {"phone"}),  # national form with trunk prefix
        ("+90 532 123 45 67", {"phone"}),  # as written (E.164 digits, national number)
        ("1234567", set()),  # last 7 digits: no longer a token (both numbers end in them)
        ("02071234567", {"other"}),  # the London number in its national form
    ],
)
def test_lexical_finds(con, query, expected):
    assert _chats(con, query) == expected


def test_long_message_is_continued_not_cut(con):
    lines = [ln for (c,) in con.execute("SELECT content FROM chunks WHERE chat_id = 'imessage:long'").fetchall()
             for ln in c.splitlines()]
    assert len(lines) == 3 and lines[0].endswith("…") and lines[1].startswith("+15550001111 (09:00): …")
    assert all(len(ln) <= 2000 + 2 + len("+15550001111 (09:00): ") for ln in lines)


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        ("a\x00b", "a b"),  # NUL -> space
        ("tab\tand\nnewline", "tab\tand\nnewline"),  # kept (line formatting handles them)
        ("bell\x07 esc\x1b del\x7f c1\x85", "bell  esc  del  c1 "),  # other C0/C1 controls
        ("foo\u200bbar foo\u200cbar foo\u2060bar \ufeffbom", "foobar foobar foobar bom"),
        ("👨\u200d👩\u200d👧", "👨\u200d👩\u200d👧"),  # a ZWJ between emoji is kept
        (None, ""),
    ],
)
def test_findable_text(text, clean):
    assert findable_text(text) == clean
