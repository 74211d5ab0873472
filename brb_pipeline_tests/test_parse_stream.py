"""Parsing in blocks: the block readers, the streamed staging files and the stages reading them
give exactly what the whole-archive frames give (real chat.db / WhatsApp stores in tmp dirs)."""

from __future__ import annotations

import shutil
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from brb_pipeline.core import metadata
from brb_pipeline.core.contacts.batching import batch_fingerprints
from brb_pipeline.core.contacts.resolve import resolve_contacts
from brb_pipeline.core.errors import CancelledError
from brb_pipeline.core.contacts.stats import contact_stats
from brb_pipeline.demo.whatsapp_writer import WAChatRecord, WAMessageRecord, write_whatsapp
from brb_pipeline.stages import ingest
from brb_pipeline.privacy.forgotten import forgotten_filter
from brb_pipeline.privacy.forget import forget_contacts
from brb_pipeline.config.settings import Settings
from brb_pipeline.sources.addressbook import read_addressbook
from brb_pipeline.sources.imessage import IMessageStream, read_imessage
from brb_pipeline.sources.whatsapp import WhatsAppStream, read_whatsapp

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)
AYSE = "905321234567@s.whatsapp.net"


def _collect(stream):
    with stream:
        blocks = list(stream.blocks())
        return blocks, stream.result()


def test_imessage_blocks_are_the_whole_read_in_pieces(demo_archive_small):
    whole = read_imessage(demo_archive_small.chat_db)
    blocks, result = _collect(IMessageStream(demo_archive_small.chat_db, chunk_rows=97))
    assert len(blocks) == -(-whole.stats["messages_read"] // 97)  # one block per chunk of source rows
    assert max(b.height for b in blocks) <= 97
    assert pl.concat(blocks).equals(whole.messages)
    # Tapbacks and their parents fall in different blocks; the reactions still land.
    assert whole.messages["reactions"].list.len().sum() > 0 and result.stats["tapbacks_folded"] > 0
    assert (result.chats.equals(whole.chats), result.stats, result.warnings) == (True, whole.stats, whole.warnings)
    assert result.messages.height == 0


def test_whatsapp_blocks_are_the_whole_read_in_pieces(demo_archive_small):
    whole = read_whatsapp(demo_archive_small.whatsapp_db)
    blocks, result = _collect(WhatsAppStream(demo_archive_small.whatsapp_db, chunk_rows=5))
    assert len(blocks) > 2 and pl.concat(blocks).equals(whole.messages)
    assert (result.chats.equals(whole.chats), result.stats) == (True, whole.stats)


def test_result_before_the_last_block_is_refused(demo_archive_small):
    with IMessageStream(demo_archive_small.chat_db, chunk_rows=50) as stream:
        next(stream.blocks())
        with pytest.raises(RuntimeError, match="before every block"):
            stream.result()


def test_whatsapp_repeated_ids_are_found_across_blocks(tmp_path):
    path = tmp_path / "ChatStorage.sqlite"
    write_whatsapp(path, [WAChatRecord(AYSE, "Ayşe", False)], [WAMessageRecord(AYSE, False, AYSE, T0, "hi", "S1")])
    sql = ("INSERT INTO ZWAMESSAGE (Z_PK, ZCHATSESSION, ZISFROMME, ZFROMJID, ZMESSAGEDATE, ZSTANZAID, ZTEXT, ZMESSAGETYPE)"
           " VALUES (?, 1, 0, ?, 731000000, ?, 'x', 0)")
    with sqlite3.connect(path) as c:
        c.execute(sql, (100, AYSE, None))  # no stanza id: "pk-100"
        c.execute(sql, (101, AYSE, " S1\t"))  # the same id as row 1 once trimmed
        c.execute(sql, (102, AYSE, "pk-100"))  # a stanza id equal to row 100's fallback
        c.execute(sql, (103, AYSE, "S2"))  # unique
    one = read_whatsapp(path)
    ids = dict(zip(one.messages["source_rowid"].to_list(), one.messages["message_id"].to_list()))
    assert ids == {1: "whatsapp:S1", 100: "whatsapp:pk-100", 101: "whatsapp:S1#101",
                   102: "whatsapp:pk-100#102", 103: "whatsapp:S2"}
    assert one.stats["duplicate_ids"] == 2
    by_row = read_whatsapp(path, chunk_rows=1)  # every row in its own block
    assert by_row.messages.equals(one.messages) and by_row.stats == one.stats


@pytest.mark.parametrize(
    "sizes, budget, groups",
    [
        ([5, 5, 5], 10, [["a", "b"], ["c"]]),  # fill up to the budget, then a new group
        ([12, 3, 3], 10, [["a"], ["b", "c"]]),  # a batch above the budget stands alone
        ([10, 10], 10, [["a"], ["b"]]),  # exactly the budget
        ([], 10, []),  # no batches
    ],
)
def test_pack_batches(sizes, budget, groups):
    per = pl.DataFrame({"batch": list("abc"[: len(sizes)]), "messages": sizes}, schema={"batch": pl.Utf8, "messages": pl.Int64})
    assert ingest._pack_batches(per, budget) == groups


@pytest.fixture()
def small_blocks(monkeypatch):
    """Blocks of 100 rows and one batch per fingerprint read, so a small archive spans many."""
    monkeypatch.setattr(ingest, "_BLOCK_ROWS", 100)
    monkeypatch.setattr(ingest, "_FINGERPRINT_ROWS", 1)


def _settings(home: Path, archive) -> Settings:
    return Settings(home=home, chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir,
                    whatsapp_db=archive.whatsapp_db, whatsapp_enabled=True, embedding_model="hash",
                    top_batch_size=3)  # several batches from a small archive


def _whole_parse(s: Settings, archive) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What run_parse wrote before it streamed: both channels whole, then the forgotten filter."""
    im, wa = read_imessage(archive.chat_db), read_whatsapp(archive.whatsapp_db)
    msgs, chats, _ = forgotten_filter(s, pl.concat([im.messages, wa.messages]), pl.concat([im.chats, wa.chats]))
    return msgs, chats


def test_streamed_stages_equal_the_whole_frame_stages(tmp_path, demo_archive_small, small_blocks):
    s = _settings(tmp_path / "home", demo_archive_small)
    ingest.run_snapshot(s)
    meta = ingest.run_parse(s)
    msgs, chats = _whole_parse(s, demo_archive_small)
    parsed = s.paths.parsed_messages
    md = pq.ParquetFile(parsed).metadata  # one row group per block of at most 100 source rows
    assert md.num_row_groups > 5 and max(md.row_group(i).num_rows for i in range(md.num_row_groups)) <= 100
    assert pl.read_parquet(parsed).equals(msgs) and pl.read_parquet(s.paths.parsed_chats).equals(chats)
    assert (meta["messages"], meta["first_ts"], meta["last_ts"]) == (msgs.height, str(msgs["ts"].min()), str(msgs["ts"].max()))

    ingest.run_contacts(s)
    people = read_addressbook(demo_archive_small.addressbook_dir).people
    res = resolve_contacts(msgs, chats, people, default_region=s.default_region)
    contacts = metadata.read_contacts(s.brb_db)
    expected = res.messages.join(contacts.select("contact_id", "batch"), on="contact_id", how="left", maintain_order="left")
    # grouped by batch (parsed order within a batch), one batch per row group
    expected = expected.sort("batch", nulls_last=True, maintain_order=True)
    assert pl.read_parquet(s.paths.messages).equals(expected)
    grouped = pq.ParquetFile(s.paths.messages)
    per_group = [grouped.read_row_group(i, columns=["batch"]).column("batch").unique().to_pylist()
                 for i in range(grouped.num_row_groups)]
    assert len(per_group) == expected["batch"].n_unique() and all(len(g) == 1 for g in per_group)
    # brb.db keeps counts as integers and times as ISO text
    iso = pl.col("first_ts", "last_ts").map_elements(lambda t: t.isoformat(), return_dtype=pl.Utf8)
    stats = contact_stats(res.messages).with_columns(iso, pl.col("messages", "sent", "received").cast(pl.Int64))
    assert contacts.select(stats.columns).sort("contact_id").equals(stats.sort("contact_id"))

    keys, _, _ = ingest.run_batches(s, "hash-64")
    stored = {b["batch"]: b["fingerprint"] for b in metadata.all_batches(s.brb_db)}
    assert len(keys) > 3 and stored == batch_fingerprints(expected)


def test_forgotten_contacts_are_filtered_block_by_block(tmp_path, demo_archive_small, small_blocks):
    s = _settings(tmp_path / "home", demo_archive_small)
    ingest.run_snapshot(s)
    ingest.run_parse(s)
    ingest.run_contacts(s)
    ingest.run_batches(s, "hash-64")
    contacts = metadata.read_contacts(s.brb_db).filter(pl.col("kind") != "unknown")
    gone = [contacts.filter(pl.col("kind") == "direct")["contact_id"][0],
            contacts.filter(pl.col("kind") == "group")["contact_id"][0]]
    forget_contacts(s, gone)  # removes the snapshot too: the next run takes a new one
    ingest.run_snapshot(s)
    # run_snapshot deletes them from its copy; unscrubbed copies test the parse filter behind it
    shutil.copyfile(demo_archive_small.chat_db, s.snapshot_dir / "chat.db")
    shutil.copyfile(demo_archive_small.whatsapp_db, s.snapshot_dir / "ChatStorage.sqlite")
    meta = ingest.run_parse(s)
    msgs, chats = _whole_parse(s, demo_archive_small)
    assert meta["forgotten_messages_skipped"] > 0
    assert meta["messages"] == msgs.height
    assert pl.read_parquet(s.paths.parsed_messages).equals(msgs) and pl.read_parquet(s.paths.parsed_chats).equals(chats)


def test_a_cancelled_parse_keeps_the_previous_file(tmp_path, demo_archive_small, small_blocks):
    s = _settings(tmp_path / "home", demo_archive_small)
    ingest.run_snapshot(s)
    ingest.run_parse(s)
    before = s.paths.parsed_messages.read_bytes()
    polls = []

    def cancel() -> bool:
        polls.append(1)
        return len(polls) > 3  # three blocks are written to the temp file first

    with pytest.raises(CancelledError):
        ingest.run_parse(s, cancel=cancel)
    assert s.paths.parsed_messages.read_bytes() == before
    assert sorted(p.name for p in s.staging_dir.iterdir()) == ["parsed_chats.parquet", "parsed_messages.parquet"]
