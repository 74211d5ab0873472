"""Dates that are missing or impossible, edited and unsent messages, and local time in chunks."""

from __future__ import annotations

import json
import plistlib
import sqlite3
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from brb_pipeline.core.chunking import ChunkParams, chunk_messages, resolve_time_zone
from brb_pipeline.core.errors import SettingsError
from brb_pipeline.demo.chatdb_writer import apple_time
from brb_pipeline.sources.imessage import read_imessage
from brb_pipeline.sources.imessage_rows import edit_history
from brb_pipeline_tests.helpers import T0
from brb_pipeline_tests.helpers.frames import message_frame

# (raw message.date or None for NULL, why it is not a real send time)
BAD_DATES = [
    (None, "NULL, seen on real databases"),
    (0, "the unset value, 2001-01-01"),
    (-63_113_904_000, "year 1 in seconds"),
    (252_423_993_600, "year 9999 in seconds: read as ns, lands in 2001"),
    (apple_time(T0, "s") * 1000, "milliseconds read as ns: January 2001"),
    (apple_time(T0, "s") * 1_000_000, "microseconds read as ns: January 2001"),
    ("2024-03-01", "text"),
    (1e30, "a REAL beyond int64"),
    (-(2**63), "int64 minimum"),
]


def _read(make_chatdb, build):
    b = make_chatdb()
    h = b.add_handle("+15550102233")
    c = b.add_chat([h])
    out = build(b, h, c)
    b.close()
    return read_imessage(b.path), out


@pytest.mark.parametrize(("raw", "why"), BAD_DATES)
def test_bad_date_is_kept_without_time(make_chatdb, raw, why):
    def build(b, h, c):
        b.add_message(c, h, "before", ts=T0)
        return b.add_message(c, h, "undated words", ts=None, raw_date=raw)

    res, guid = _read(make_chatdb, build)
    row = res.messages.filter(pl.col("message_id") == f"imessage:{guid}").row(0, named=True)
    assert row["ts"] is None and row["text"] == "undated words", why
    assert res.stats["date_invalid"] == 1 and res.stats["messages"] == 2
    assert any("missing or impossible date" in w for w in res.warnings)


def test_valid_dates_in_both_units_still_read(make_chatdb):
    res, _ = _read(make_chatdb, lambda b, h, c: [b.add_message(c, h, "ns", ts=T0),
                                                 b.add_message(c, h, "s", ts=None, raw_date=apple_time(T0, "s"))])
    assert res.messages["ts"].to_list() == [T0, T0] and res.stats["date_invalid"] == 0


def test_undated_message_is_placed_by_rowid_in_its_chunk():
    msgs = message_frame([("imessage:a", m, f"message {m} about the trip plans", False, "+1555") for m in range(5)])
    # the third message (ROWID 3) lost its date: it stays between ROWID 2 and 4, untimed
    msgs = msgs.with_columns(pl.when(pl.col("source_rowid") == 3).then(None).otherwise(pl.col("ts")).alias("ts"))
    out = chunk_messages(msgs.sample(fraction=1.0, shuffle=True, seed=1), batch="b", contact_names={},
                         sender_names={"+1555": "Ayşe"}, params=ChunkParams(time_zone="UTC"))
    assert out.height == 1
    assert out["content"][0].splitlines() == [
        "Ayşe (09:00): message 0 about the trip plans",
        "Ayşe (09:01): message 1 about the trip plans",
        "Ayşe: message 2 about the trip plans",  # no time shown
        "Ayşe (09:03): message 3 about the trip plans",
        "Ayşe (09:04): message 4 about the trip plans",
    ]
    assert out["embedding_text"][0].splitlines()[0] == "Conversation with c:imessage:a, 2024-03-01"


def test_chat_with_no_date_at_all():
    msgs = message_frame([("imessage:a", m, f"undated message {m} with words", True, None) for m in range(3)])
    msgs = msgs.with_columns(pl.lit(None, dtype=pl.Datetime("us", "UTC")).alias("ts"))
    out = chunk_messages(msgs, batch="b", contact_names={}, sender_names={}, params=ChunkParams(time_zone="UTC"))
    assert out["content"][0].splitlines() == [f"Me: undated message {m} with words" for m in range(3)]
    assert out["embedding_text"][0].startswith("Conversation with c:imessage:a, date unknown\n")
    assert out["start_ts"][0] is None and out["end_ts"][0] is None


@pytest.mark.slow  # e2e: a whole `brb ingest`
def test_ingest_with_null_dates_runs_end_to_end(tmp_path):
    from brb_pipeline.core.store import duck
    from brb_pipeline.demo.chatdb_writer import ChatDbBuilder
    from brb_pipeline_tests.helpers.cli import brb

    (tmp_path / "src").mkdir()
    b = ChatDbBuilder(tmp_path / "src" / "chat.db")
    h = b.add_handle("+15550100200")
    c = b.add_chat([h])
    for i in range(20):
        b.add_message(c, h, f"readable message number {i} about the garden", ts=T0 + timedelta(minutes=i))
    b.add_message(c, h, "the undated zucchini message", ts=None)
    b.add_message(c, h, "the year one message", ts=None, raw_date=-63_113_904_000)
    b.close()
    home = tmp_path / "h"
    r = brb("ingest", "--chat-db", str(tmp_path / "src" / "chat.db"), "--progress", "none", "--no-insights",
            home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    con = sqlite3.connect(home / "brb.db")
    stats = json.loads(con.execute("SELECT stats_json FROM ingestion_runs ORDER BY started_at DESC").fetchone()[0])
    con.close()
    assert stats["stat_date_invalid"] == 2
    store = duck.connect(home / "brb.duckdb", read_only=True)
    contents = [r[0] for r in store.execute("SELECT content FROM chunks").fetchall()]
    store.close()
    lines = {ln for c in contents for ln in c.splitlines()}
    assert {ln for ln in lines if "undated zucchini" in ln or "year one" in ln} == {
        "+15550100200: the undated zucchini message", "+15550100200: the year one message"}


# Edits ----------------------------------------------------------------------------------------

VERSIONS = [("lets meet at the old cafe", T0), ("lets meet at the harbour", T0 + timedelta(minutes=2)),
            ("lets meet at the harbour at 7", T0 + timedelta(minutes=5))]


def test_edited_message_real_layout_final_text_wins(make_chatdb):
    res, guid = _read(make_chatdb, lambda b, h, c: b.add_edited_message(c, 0, VERSIONS, is_from_me=True))
    row = res.messages.row(0, named=True)
    assert (row["text"], row["edited"], row["text_source"]) == ("lets meet at the harbour at 7", True, "attributed_body")
    assert res.stats["edited"] == 1


def test_edited_message_layout_on_disk(make_chatdb):
    b = make_chatdb()
    c = b.add_chat([b.add_handle("+15550102233")])
    b.add_edited_message(c, 0, VERSIONS, is_from_me=True)
    b.close()
    con = sqlite3.connect(b.path)
    text, body, info, edited = con.execute(
        "SELECT text, attributedBody, message_summary_info, date_edited FROM message").fetchone()
    con.close()
    assert text is None and body is not None and edited == apple_time(VERSIONS[-1][1])
    plist = plistlib.loads(info)
    assert plist["ep"] == [0] and [v["d"] for v in plist["ec"]["0"]] == [apple_time(t, "s") for _, t in VERSIONS]
    assert edit_history(info) == ("lets meet at the harbour at 7", True, False)


def test_text_only_in_edit_history_is_recovered(make_chatdb):
    # attributedBody gone, text NULL: before the history was read this message was dropped as unsent
    res, _ = _read(make_chatdb, lambda b, h, c: b.add_edited_message(c, 0, VERSIONS, is_from_me=True, body=False))
    row = res.messages.row(0, named=True)
    assert (row["text"], row["edited"], row["text_source"]) == ("lets meet at the harbour at 7", True, "edit_history")
    assert res.stats["from_edit_history"] == 1 and res.stats["unsent_dropped"] == 0
    assert "old cafe" not in row["text"]  # replaced wording is never read


def test_unsent_by_history_is_dropped(make_chatdb):
    info = plistlib.dumps({"rp": [0], "ec": {}}, fmt=plistlib.FMT_BINARY)
    res, _ = _read(make_chatdb, lambda b, h, c: b.add_message(c, 0, None, ts=T0, is_from_me=True, summary_info=info))
    assert res.messages.height == 0 and res.stats["unsent_dropped"] == 1


def test_partly_unsent_keeps_what_remains(make_chatdb):
    res, _ = _read(make_chatdb, lambda b, h, c: b.add_edited_message(c, 0, VERSIONS[:1], is_from_me=True, retracted_parts=[1]))
    assert res.messages["text"].to_list() == ["lets meet at the old cafe"] and res.stats["partly_unsent"] == 1


@pytest.mark.parametrize("blob", [b"", b"not a plist", plistlib.dumps([1, 2]), plistlib.dumps({"ec": {"0": "x"}})])
def test_damaged_summary_info_is_ignored(blob):
    assert edit_history(blob)[0] is None


# Local time -----------------------------------------------------------------------------------


def test_times_shown_in_the_configured_zone():
    late = datetime(2024, 3, 1, 22, 30, tzinfo=UTC)  # 01:30 on 2 March in Istanbul (UTC+3)
    msgs = message_frame([("imessage:a", m, f"late night message {m} here", False, "+1555") for m in range(3)], t0=late)
    out = chunk_messages(msgs, batch="b", contact_names={}, sender_names={},
                         params=ChunkParams(time_zone="Europe/Istanbul"))
    assert out["content"][0].splitlines()[0] == "+1555 (01:30): late night message 0 here"
    assert out["embedding_text"][0].splitlines()[0] == "Conversation with c:imessage:a, 2024-03-02"
    assert out["start_ts"][0] == late  # stored UTC
    utc = chunk_messages(msgs, batch="b", contact_names={}, sender_names={}, params=ChunkParams(time_zone="UTC"))
    assert utc["content"][0].startswith("+1555 (22:30)")
    assert utc["embedding_text"][0].splitlines()[0] == "Conversation with c:imessage:a, 2024-03-01"


def test_machine_zone_from_tz_and_unknown_zone(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    assert resolve_time_zone("").key == "America/New_York"
    with pytest.raises(SettingsError, match="unknown time_zone 'Mars/Olympus'"):
        resolve_time_zone("Mars/Olympus")
