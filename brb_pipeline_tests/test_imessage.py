"""read_imessage on small real chat.db files built with ChatDbBuilder (Apple's DDL)."""

from __future__ import annotations

import sqlite3
import time
from datetime import timedelta

import polars as pl
import pytest

from brb_pipeline.core.errors import (
    CancelledError,
    DatabaseLockedError,
    NotADatabaseError,
    SourceMissingError,
    UnknownSchemaError,
)
from brb_pipeline.core.records import CHAT_SCHEMA, MESSAGE_SCHEMA
from brb_pipeline.sources.imessage import read_imessage
from brb_pipeline.sources.imessage_rows import parent_guid
from brb_pipeline_tests.helpers import T0

PHONE = "(555) 010-2233"
E164 = "+15550102233"


def _by_id(result, guid):
    rows = result.messages.filter(pl.col("message_id") == f"imessage:{guid}")
    return rows.row(0, named=True) if rows.height else None


# Each case: (builder kwargs, build(b, h, chat) -> guid of the message under test,
#             expected fields of that message or None when it must be dropped, expected stats).
CASES = [
    # ns dates (modern macOS) -> exact UTC microseconds
    ({}, lambda b, h, c: b.add_message(c, h, "hello", ts=T0 + timedelta(microseconds=123456)),
     {"ts": T0 + timedelta(microseconds=123456), "text": "hello", "text_source": "text", "sender": E164},
     {"messages": 1}),
    # seconds dates (old macOS), decided by magnitude
    ({"date_unit": "s"}, lambda b, h, c: b.add_message(c, h, "old", ts=T0),
     {"ts": T0, "text": "old"}, {"messages": 1}),
    # text '' counts as missing -> text from attributedBody
    ({}, lambda b, h, c: b.add_message(c, h, "from body é🎉", ts=T0, text_mode="body_empty"),
     {"text": "from body é🎉", "text_source": "attributed_body", "undecodable": False},
     {"from_attributed_body": 1}),
    # text NULL -> text from attributedBody
    ({}, lambda b, h, c: b.add_message(c, h, "null text", ts=T0, text_mode="body_null"),
     {"text": "null text", "text_source": "attributed_body"}, {"from_attributed_body": 1}),
    # attributedBody that decodes to nothing -> kept, flagged undecodable, no text
    ({}, lambda b, h, c: b.add_message(c, h, None, ts=T0, raw_body=b"\x00garbage\xff"),
     {"text": None, "text_source": "none", "undecodable": True}, {"undecodable": 1}),
    # edited, as macOS 13+ stores it: text NULL, the final version in attributedBody, every
    # version in message_summary_info -> the final text, edited=True
    ({}, lambda b, h, c: b.add_edited_message(c, h, [("first try", T0), ("final", T0 + timedelta(minutes=1))]),
     {"text": "final", "edited": True, "text_source": "attributed_body"}, {"edited": 1}),
    # edited, the final version only in the history (no attributedBody) -> recovered from it
    ({}, lambda b, h, c: b.add_edited_message(c, h, [("first try", T0), ("final", T0 + timedelta(minutes=1))],
                                              body=False),
     {"text": "final", "edited": True, "text_source": "edit_history"}, {"edited": 1, "from_edit_history": 1}),
    # unsent (retracted, no text, no attachment) -> dropped and counted
    ({}, lambda b, h, c: b.add_message(c, 0, None, ts=T0, is_from_me=True, date_retracted=T0, date_edited=T0),
     None, {"unsent_dropped": 1, "messages": 0}),
    # group rename (no text, item_type 2) -> kept as a group event
    ({}, lambda b, h, c: b.add_message(c, 0, None, ts=T0, is_from_me=True, item_type=2, group_title="x"),
     {"text": None, "extras": [{"kind": "event", "name": None, "mime": None, "bytes": None, "path": None,
                                "exists": None, "text": "renamed the group to x", "ref": None}]},
     {"group_events": 1, "system_skipped": 0}),
    # group photo changed (item_type 3, action 1): a system item -> skipped and counted
    ({}, lambda b, h, c: b.add_message(c, 0, None, ts=T0, is_from_me=True, item_type=3,
                                       columns={"group_action_type": 1}),
     None, {"system_skipped": 1}),
    # attachment with no text -> kept with its attachment count
    ({}, lambda b, h, c: b.add_message(c, h, None, ts=T0, attachments=2),
     {"text": None, "attachments": 2, "text_source": "none"}, {"messages": 1}),
    # U+FFFC placeholder text + attachment -> kept as stored
    ({}, lambda b, h, c: b.add_message(c, h, "look \ufffc", ts=T0, attachments=1, text_mode="body_null"),
     {"text": "look \ufffc", "attachments": 1}, {"from_attributed_body": 1}),
    # no chat join -> orphan chat id, counted
    ({}, lambda b, h, c: b.add_message(None, h, "lost", ts=T0),
     {"chat_id": "imessage:orphan", "sender": E164}, {"orphans": 1}),
    # chat join pointing at a chat row that is gone -> orphan too
    ({}, lambda b, h, c: b.add_message(77, h, "chat gone", ts=T0),
     {"chat_id": "imessage:orphan"}, {"orphans": 1}),
    # handle_id pointing at a vanished handle -> sender None, not from me, counted
    ({}, lambda b, h, c: b.add_message(c, 999, "ghost", ts=T0),
     {"sender": None, "is_from_me": False}, {"unknown_handle": 1}),
    # incoming with handle_id 0 in a one-person chat -> that person
    ({}, lambda b, h, c: b.add_message(c, 0, "zero", ts=T0),
     {"sender": E164}, {"unknown_handle": 0}),
    # from me -> sender None
    ({}, lambda b, h, c: b.add_message(c, 0, "mine", ts=T0, is_from_me=True),
     {"sender": None, "is_from_me": True}, {"messages": 1}),
]


@pytest.mark.parametrize("kwargs,build,expected,stats", CASES)
def test_message_rules(make_chatdb, kwargs, build, expected, stats):
    b = make_chatdb(**kwargs)
    h = b.add_handle(PHONE)
    c = b.add_chat([h])
    guid = build(b, h, c)
    path = b.close()
    r = read_imessage(path)
    assert r.messages.schema == MESSAGE_SCHEMA
    assert r.chats.schema == CHAT_SCHEMA
    row = _by_id(r, guid)
    if expected is None:
        assert row is None
    else:
        assert row is not None
        for k, v in expected.items():
            assert row[k] == v, k
        if row["chat_id"] != "imessage:orphan":
            assert row["chat_id"] == r.chats["chat_id"][0]
    for k, v in stats.items():
        assert r.stats[k] == v, k


def test_parent_guid_forms():
    assert parent_guid("p:0/ABC-1") == "ABC-1"
    assert parent_guid("p:12/ABC-1") == "ABC-1"
    assert parent_guid("bp:ABC-1") == "ABC-1"
    assert parent_guid("ABC-1") == "ABC-1"
    assert parent_guid(None) is None


def test_tapbacks_fold_final_state(make_chatdb):
    b = make_chatdb()
    h = b.add_handle(PHONE)
    c = b.add_chat([h])
    m1 = b.add_message(c, h, "first", ts=T0)
    m2 = b.add_message(c, 0, "second", ts=T0 + timedelta(seconds=1), is_from_me=True)
    t = T0 + timedelta(seconds=10)
    b.add_tapback(c, 0, m1, "love", ts=t, is_from_me=True)  # stays
    b.add_tapback(c, 0, m1, "laugh", ts=t, is_from_me=True, part=None)  # bp: form, later removed
    b.add_tapback(c, 0, m1, "laugh", ts=t + timedelta(seconds=5), is_from_me=True, remove=True)
    b.add_tapback(c, h, m2, "emoji", ts=t, emoji="🔥")  # emoji kind keeps its emoji
    b.add_tapback(c, h, m2, "like", ts=t)  # removed then re-added: present
    b.add_tapback(c, h, m2, "like", ts=t + timedelta(seconds=1), remove=True)
    b.add_tapback(c, h, m2, "like", ts=t + timedelta(seconds=2))
    b.add_tapback(c, h, "GONE-PARENT", "question", ts=t)  # parent missing
    r = read_imessage(b.close())
    assert r.messages.height == 2  # tapbacks never appear as messages
    rx1 = _by_id(r, m1)["reactions"]
    assert [(x["kind"], x["is_from_me"], x["sender"]) for x in rx1] == [("love", True, None)]
    rx2 = sorted(_by_id(r, m2)["reactions"], key=lambda x: x["kind"])
    assert [(x["kind"], x["sender"], x["emoji"]) for x in rx2] == [("emoji", E164, "🔥"), ("like", E164, None)]
    assert [x["ts"] for x in rx2 if x["kind"] == "like"] == [t + timedelta(seconds=2)]
    assert r.stats["tapbacks_folded"] == 7
    assert r.stats["tapbacks_orphaned"] == 1
    assert any("parent" in w for w in r.warnings)


def test_tapback_on_unsent_parent_is_orphaned(make_chatdb):
    b = make_chatdb()
    h = b.add_handle(PHONE)
    c = b.add_chat([h])
    gone = b.add_message(c, 0, None, ts=T0, is_from_me=True, date_retracted=T0)
    b.add_tapback(c, h, gone, "love", ts=T0)
    r = read_imessage(b.close())
    assert r.messages.height == 0
    assert r.stats["unsent_dropped"] == 1 and r.stats["tapbacks_orphaned"] == 1


def test_group_participants_and_senders(make_chatdb):
    b = make_chatdb()
    a = b.add_handle("+90 532 123 45 67")
    e = b.add_handle("Deniz@Example.COM")
    d = b.add_handle("(555) 010-2233")
    g = b.add_chat([a, e], display_name="Trip ✈️")
    g2 = b.add_chat([d], style=43)  # style 43 is a group even with one other person
    m_a = b.add_message(g, a, "selam", ts=T0)
    m_e = b.add_message(g, e, "hi all", ts=T0 + timedelta(seconds=1))
    m_me = b.add_message(g, 0, "hey", ts=T0 + timedelta(seconds=2), is_from_me=True)
    b.add_message(g2, d, "x", ts=T0)
    r = read_imessage(b.close())
    chats = {row["chat_id"]: row for row in r.chats.iter_rows(named=True)}
    grp = [v for v in chats.values() if v["display_name"] == "Trip ✈️"][0]
    assert grp["kind"] == "group"
    assert grp["participants"] == ["+905321234567", "deniz@example.com"]
    assert sum(v["kind"] == "group" for v in chats.values()) == 2
    assert _by_id(r, m_a)["sender"] == "+905321234567"
    assert _by_id(r, m_e)["sender"] == "deniz@example.com"
    assert _by_id(r, m_me)["sender"] is None


def test_old_macos_column_set(make_chatdb):
    # Legacy message table: no attributedBody, date_edited, date_retracted, emoji columns; dates in s.
    b = make_chatdb(legacy=True, date_unit="s")
    h = b.add_handle(PHONE)
    c = b.add_chat([h])
    m = b.add_message(c, h, "from 2012", ts=T0, attachments=1)
    b.add_tapback(c, 0, m, "like", ts=T0 + timedelta(seconds=3), is_from_me=True)
    r = read_imessage(b.close())
    row = _by_id(r, m)
    assert (row["text"], row["ts"], row["edited"], row["attachments"]) == ("from 2012", T0, False, 1)
    assert [x["kind"] for x in row["reactions"]] == ["like"]


def test_chunked_read_matches_single_chunk_and_reports_progress(make_chatdb):
    b = make_chatdb()
    h = b.add_handle(PHONE)
    c = b.add_chat([h])
    guids = [b.add_message(c, h, f"m{i}", ts=T0 + timedelta(seconds=i)) for i in range(9)]
    b.add_tapback(c, 0, guids[0], "love", ts=T0 + timedelta(seconds=30), is_from_me=True)
    path = b.close()
    seen = []
    small = read_imessage(path, chunk_rows=2, progress=lambda d, t: seen.append((d, t)))
    big = read_imessage(path)
    assert small.messages.equals(big.messages)
    assert seen[0] == (0, 10) and seen[-1] == (10, 10)
    assert len(seen) == 6  # start + 5 chunks of <= 2 rows


def test_reader_never_writes(make_chatdb):
    b = make_chatdb()
    h = b.add_handle(PHONE)
    b.add_message(b.add_chat([h]), h, "x", ts=T0)
    path = b.close()
    before = (path.read_bytes(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir()))
    read_imessage(path)
    after = (path.read_bytes(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir()))
    assert before == after


def test_cancel_between_chunks(make_chatdb):
    b = make_chatdb()
    h = b.add_handle(PHONE)
    c = b.add_chat([h])
    for i in range(5):
        b.add_message(c, h, f"m{i}", ts=T0)
    path = b.close()
    calls = []

    def cancel():
        calls.append(1)
        return len(calls) > 1  # let the first chunk through

    with pytest.raises(CancelledError, match="cancelled after 2 of 5"):
        read_imessage(path, chunk_rows=2, cancel=cancel)


def test_missing_file(tmp_path):
    with pytest.raises(SourceMissingError, match="chat.db not found"):
        read_imessage(tmp_path / "nope.db")


def test_text_file_is_not_a_database(tmp_path):
    p = tmp_path / "chat.db"
    p.write_text("hello, not sqlite")
    with pytest.raises(NotADatabaseError, match="not an SQLite database"):
        read_imessage(p)


def test_directory_is_not_a_database(tmp_path):
    with pytest.raises(NotADatabaseError, match="folder"):
        read_imessage(tmp_path)


def test_other_sqlite_is_unknown_schema(tmp_path):
    p = tmp_path / "other.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE notes (id INTEGER, body TEXT)")
    con.commit()
    con.close()
    with pytest.raises(UnknownSchemaError, match="no table 'message'") as e:
        read_imessage(p)
    assert "\n" not in str(e.value)


def test_message_table_without_required_column(tmp_path):
    p = tmp_path / "chat.db"
    con = sqlite3.connect(p)
    con.executescript(
        "CREATE TABLE message (ROWID INTEGER PRIMARY KEY, guid TEXT, text TEXT);"
        "CREATE TABLE handle (ROWID INTEGER PRIMARY KEY, id TEXT);"
        "CREATE TABLE chat (ROWID INTEGER PRIMARY KEY, guid TEXT);"
        "CREATE TABLE chat_message_join (chat_id INTEGER, message_id INTEGER);"
        "CREATE TABLE chat_handle_join (chat_id INTEGER, handle_id INTEGER);"
    )
    con.close()
    with pytest.raises(UnknownSchemaError, match="lacks columns"):
        read_imessage(p)


def test_locked_database_fails_fast(make_chatdb):
    b = make_chatdb()
    h = b.add_handle(PHONE)
    b.add_message(b.add_chat([h]), h, "x", ts=T0)
    path = b.close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        t = time.perf_counter()
        with pytest.raises(DatabaseLockedError, match="locked"):
            read_imessage(path, timeout_s=0.2)
        assert time.perf_counter() - t < 3
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_lock_taken_mid_read_becomes_one_line_error(make_chatdb):
    b = make_chatdb()
    h = b.add_handle(PHONE)
    c = b.add_chat([h])
    for i in range(6):
        b.add_message(c, h, f"m{i}", ts=T0)
    path = b.close()
    holder = sqlite3.connect(path, isolation_level=None)

    def progress(done, total):
        if done == 2:  # after the first chunk, another process takes an exclusive lock
            holder.execute("BEGIN EXCLUSIVE")

    try:
        with pytest.raises(DatabaseLockedError, match="locked by another process") as e:
            read_imessage(path, chunk_rows=2, progress=progress, timeout_s=0.2)
        assert "\n" not in str(e.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
