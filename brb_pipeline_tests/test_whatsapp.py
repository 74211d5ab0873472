"""WhatsApp reader: stores written by the demo writer from the real DDL, read back."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

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
from brb_pipeline.demo.whatsapp_writer import WAChatRecord, WAMessageRecord, write_whatsapp
from brb_pipeline.sources.whatsapp import read_whatsapp

T0 = datetime(2024, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
AYSE = "905321234567@s.whatsapp.net"
OMAR = "15550102233@s.whatsapp.net"
ZED = "447700900123@s.whatsapp.net"
GROUP = "120363012345678901@g.us"

CHATS = [
    WAChatRecord(AYSE, "Ayşe", False),
    WAChatRecord(GROUP, "Hiking club", True, members=[(OMAR, "Omar K"), (ZED, "Zed"), (AYSE, "Ayşe")]),
    WAChatRecord("status@broadcast", "", False, session_type=3),
]


def _msgs() -> list[WAMessageRecord]:
    s = timedelta(seconds=1)
    return [
        WAMessageRecord(AYSE, False, AYSE, T0, "Merhaba!", "S1"),
        WAMessageRecord(AYSE, True, None, T0 + 90 * s, "hi 👋", "S2"),
        WAMessageRecord(AYSE, False, AYSE, T0 + 120 * s, None, "S3", media_path="Media/photo.jpg"),
        WAMessageRecord(AYSE, False, AYSE, T0 + 121 * s, None, "S4"),  # no text, no media: skipped
        WAMessageRecord(GROUP, False, OMAR, T0 + 200 * s, "who's in?", "S5"),
        WAMessageRecord(GROUP, False, ZED, T0 + 0.25 * s, "me", "S6"),
        WAMessageRecord(GROUP, True, None, T0 + 300 * s, "me too", "S7"),
        WAMessageRecord("status@broadcast", False, OMAR, T0, "my status", "S8"),  # status: skipped
    ]


@pytest.fixture()
def store(tmp_path) -> Path:
    path = tmp_path / "ChatStorage.sqlite"
    write_whatsapp(path, CHATS, _msgs())
    return path


def test_writer_output_reads_back_with_exact_schema(store):
    res = read_whatsapp(store)
    assert res.messages.schema == MESSAGE_SCHEMA
    assert res.chats.schema == CHAT_SCHEMA
    rows = res.messages.sort("ts", "message_id").select(
        "message_id", "chat_id", "sender", "is_from_me", "text", "attachments", "ts"
    ).rows()
    g, a = f"whatsapp:{GROUP}", f"whatsapp:{AYSE}"
    assert rows == [
        ("whatsapp:S1", a, "+905321234567", False, "Merhaba!", 0, T0),  # direct, sender from ZFROMJID
        ("whatsapp:S6", g, "+447700900123", False, "me", 0, T0 + timedelta(seconds=0.25)),  # sub-second kept
        ("whatsapp:S2", a, None, True, "hi 👋", 0, T0 + timedelta(seconds=90)),  # mine: no sender
        ("whatsapp:S3", a, "+905321234567", False, None, 1, T0 + timedelta(seconds=120)),  # media only
        ("whatsapp:S5", g, "+15550102233", False, "who's in?", 0, T0 + timedelta(seconds=200)),  # group member
        ("whatsapp:S7", g, None, True, "me too", 0, T0 + timedelta(seconds=300)),
    ]
    assert res.messages.get_column("channel").unique().to_list() == ["whatsapp"]
    assert res.messages.filter(pl.col("text").is_null()).get_column("text_source").to_list() == ["none"]
    assert res.stats["status_skipped"] == 1
    assert res.stats["empty_skipped"] == 1
    assert res.stats["attachments"] == 1
    assert res.stats["messages_read"] == 6


def test_chats_direct_and_group_with_participants(store):
    chats = read_whatsapp(store).chats.sort("chat_id").rows()
    assert chats == [
        # group: name from ZPARTNERNAME, members from ZWAGROUPMEMBER, normalized and sorted
        ("whatsapp", f"whatsapp:{GROUP}", "group", "Hiking club", ["+15550102233", "+447700900123", "+905321234567"]),
        # direct: the partner's JID as the only participant
        ("whatsapp", f"whatsapp:{AYSE}", "direct", "Ayşe", ["+905321234567"]),
    ]  # the status broadcast session is not a chat


@pytest.mark.parametrize(
    "setup, error, fragment",
    [
        # the file does not exist
        (lambda p: p.parent / "missing.sqlite", SourceMissingError, "not found"),
        # a text file
        (lambda p: p.write_text("not a database") and p, NotADatabaseError, "not an SQLite"),
        # an SQLite file of something else (an AddressBook-like table set)
        (lambda p: _other_db(p), UnknownSchemaError, "ZWACHATSESSION"),
        # an old store lacking a column we need
        (lambda p: _old_store(p), UnknownSchemaError, "ZSTANZAID"),
    ],
)
def test_bad_input_one_line_errors(tmp_path, setup, error, fragment):
    path = setup(tmp_path / "ChatStorage.sqlite")
    with pytest.raises(error) as e:
        read_whatsapp(path)
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)


def _other_db(path: Path) -> Path:
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE ZABCDRECORD (Z_PK INTEGER PRIMARY KEY, ZFIRSTNAME VARCHAR)")
    return path


def _old_store(path: Path) -> Path:
    write_whatsapp(path, CHATS[:1], _msgs()[:1])
    with sqlite3.connect(path) as c:
        c.execute("ALTER TABLE ZWAMESSAGE DROP COLUMN ZSTANZAID")
    return path


def test_locked_store(store):
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(DatabaseLockedError) as e:
            read_whatsapp(store, timeout_s=0.1)
        assert "locked" in str(e.value) and "\n" not in str(e.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_odd_rows(store):
    with sqlite3.connect(store) as c:
        # message without a stanza id: id falls back to Z_PK
        c.execute("INSERT INTO ZWAMESSAGE (Z_PK, ZCHATSESSION, ZISFROMME, ZFROMJID, ZMESSAGEDATE, ZTEXT, ZMESSAGETYPE) VALUES (100, 1, 0, ?, 731000000.5, 'x', 0)", (AYSE,))
        # a repeated stanza id: made unique with Z_PK
        c.execute("INSERT INTO ZWAMESSAGE (Z_PK, ZCHATSESSION, ZISFROMME, ZFROMJID, ZMESSAGEDATE, ZSTANZAID, ZTEXT, ZMESSAGETYPE) VALUES (101, 1, 0, ?, 731000001, 'S1', 'again', 0)", (AYSE,))
        # NULL date and a text date: skipped and counted
        c.execute("INSERT INTO ZWAMESSAGE (Z_PK, ZCHATSESSION, ZISFROMME, ZMESSAGEDATE, ZSTANZAID, ZTEXT, ZMESSAGETYPE) VALUES (102, 1, 0, NULL, 'S102', 'y', 0)")
        c.execute("INSERT INTO ZWAMESSAGE (Z_PK, ZCHATSESSION, ZISFROMME, ZMESSAGEDATE, ZSTANZAID, ZTEXT, ZMESSAGETYPE) VALUES (103, 1, 0, 'yesterday', 'S103', 'y', 0)")
        # a session that does not exist: orphan chat
        c.execute("INSERT INTO ZWAMESSAGE (Z_PK, ZCHATSESSION, ZISFROMME, ZFROMJID, ZMESSAGEDATE, ZSTANZAID, ZTEXT, ZMESSAGETYPE) VALUES (104, 99, 0, ?, 731000002, 'S104', 'z', 0)", (OMAR,))
        # invalid UTF-8 in the text: replaced, counted
        c.execute("INSERT INTO ZWAMESSAGE (Z_PK, ZCHATSESSION, ZISFROMME, ZFROMJID, ZMESSAGEDATE, ZSTANZAID, ZTEXT, ZMESSAGETYPE) VALUES (105, 1, 0, ?, 731000003, 'S105', CAST(x'6869ff' AS TEXT), 0)", (AYSE,))
        # a group event (system message type 6): skipped
        c.execute("INSERT INTO ZWAMESSAGE (Z_PK, ZCHATSESSION, ZISFROMME, ZMESSAGEDATE, ZSTANZAID, ZTEXT, ZMESSAGETYPE) VALUES (106, 2, 0, 731000004, 'S106', 'Omar joined', 6)")
        # incoming group message whose member row is missing: sender unknown, message kept
        c.execute("INSERT INTO ZWAMESSAGE (Z_PK, ZCHATSESSION, ZISFROMME, ZFROMJID, ZGROUPMEMBER, ZMESSAGEDATE, ZSTANZAID, ZTEXT, ZMESSAGETYPE) VALUES (107, 2, 0, ?, 555, 731000005, 'S107', 'hm', 0)", (GROUP,))
    res = read_whatsapp(store)
    m = {r["source_rowid"]: r for r in res.messages.iter_rows(named=True)}
    assert m[100]["message_id"] == "whatsapp:pk-100"
    assert m[101]["message_id"] == "whatsapp:S1#101" and m[1]["message_id"] == "whatsapp:S1"
    assert 102 not in m and 103 not in m and res.stats["bad_timestamp"] == 2
    assert m[104]["chat_id"] == "whatsapp:orphan" and res.stats["orphans"] == 1
    assert m[105]["text"] == "hi\ufffd" and res.stats["undecodable_text"] == 1
    assert 106 not in m and res.stats["system_skipped"] == 1
    assert m[107]["sender"] is None and res.stats["unknown_sender"] == 1
    assert res.messages.get_column("message_id").is_unique().all()
    assert any("orphan" not in w and "date" in w for w in res.warnings)


def test_progress_and_cancel(store):
    seen = []
    read_whatsapp(store, progress=lambda done, total: seen.append((done, total)), chunk_rows=3)
    assert seen == [(0, 8), (3, 8), (6, 8), (8, 8)]
    with pytest.raises(CancelledError):
        read_whatsapp(store, cancel=lambda: True)


def test_empty_store(tmp_path):
    path = tmp_path / "ChatStorage.sqlite"
    write_whatsapp(path, [], [])
    res = read_whatsapp(path)
    assert res.messages.height == 0 and res.messages.schema == MESSAGE_SCHEMA
    assert res.chats.height == 0 and res.chats.schema == CHAT_SCHEMA


def test_reader_never_writes(store):
    before = store.read_bytes()
    read_whatsapp(store)
    assert store.read_bytes() == before
    assert not Path(str(store) + "-journal").exists() and not Path(str(store) + "-wal").exists()


def test_wal_store_with_uncheckpointed_messages_is_read(store):
    # WhatsApp keeps its store in WAL mode; a live writer may hold frames not yet checkpointed.
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute(
        "INSERT INTO ZWAMESSAGE (Z_PK, ZCHATSESSION, ZISFROMME, ZMESSAGEDATE, ZSTANZAID, ZTEXT, ZMESSAGETYPE)"
        " VALUES (200, 1, 1, 731000000, 'WAL1', 'in the wal', 0)"
    )
    try:
        assert Path(str(store) + "-wal").stat().st_size > 0
        res = read_whatsapp(store)
        assert "whatsapp:WAL1" in res.messages.get_column("message_id").to_list()
    finally:
        writer.close()
