"""The demo archive generator: small builds read back through the real readers."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

from brb_pipeline.core.records.handles import normalize_handle
from brb_pipeline.demo.generate import MULTILINGUAL, build_demo_archive
from brb_pipeline.demo.people import demo_corpus_path
from brb_pipeline.sources.addressbook import read_addressbook
from brb_pipeline.sources.imessage import read_imessage
from brb_pipeline.sources.whatsapp import read_whatsapp


@pytest.fixture(scope="module")
def demo(demo_archive_small):
    return demo_archive_small, read_imessage(demo_archive_small.chat_db)


def test_corpus_path_exists():
    p = demo_corpus_path()
    assert p.name == "dataset.json" and p.stat().st_size > 10_000_000


def test_reader_keeps_exactly_the_expected_messages(demo):
    a, r = demo
    c = a.counts
    assert c["corpus_messages"] == 600
    assert r.stats["messages"] == c["expected_messages"] == (600 + c["attachments"] + c["multilingual"]
                                                              + c["group_events"] + c["rich_messages"])
    assert c["group_events"] >= 3 and c["rich_messages"] == 7
    assert r.stats["messages_read"] == c["message_rows"]
    # Every rule of the reader had something to act on, with the counts the generator wrote.
    assert r.stats["unsent_dropped"] == c["unsent"] >= 2
    assert r.stats["system_skipped"] == c["system_messages"] >= 1
    assert r.stats["orphans"] == c["orphans"] >= 2
    assert r.stats["unknown_handle"] == c["vanished_handle_messages"] >= 1
    assert r.stats["edited"] == c["edited"]
    assert r.stats["undecodable"] == 0


def test_attributed_body_share_and_both_empty_forms(demo):
    a, r = demo
    share = r.stats["from_attributed_body"] / r.stats["messages"]
    assert 0.2 < share < 0.4  # ~30 % attributedBody-only
    con = sqlite3.connect(a.chat_db)
    null_text, empty_text = con.execute(
        "SELECT SUM(text IS NULL AND attributedBody IS NOT NULL), SUM(text = '' AND attributedBody IS NOT NULL) "
        "FROM message WHERE associated_message_type = 0"
    ).fetchone()
    con.close()
    assert null_text == a.counts["body_null"] > 30
    assert empty_text == a.counts["body_empty"] > 30
    assert r.stats["from_attributed_body"] == null_text + empty_text
    assert r.messages.filter(pl.col("text_source") == "attributed_body")["text"].null_count() == 0


def test_tapbacks_folded(demo):
    a, r = demo
    c = a.counts
    assert r.stats["tapbacks_folded"] == c["tapbacks"] + c["tapback_removals"]
    assert r.stats["tapbacks_orphaned"] == c["tapbacks_orphaned"] == 1
    n_reactions = r.messages["reactions"].list.len().sum()
    # Each tapback leaves at most one reaction; removals take some away.
    assert c["tapbacks"] - c["tapback_removals"] <= n_reactions <= c["tapbacks"]
    assert n_reactions > 0


def test_group_chats_and_handles(demo):
    a, r = demo
    groups = r.chats.filter(pl.col("kind") == "group")
    assert groups.height == a.counts["groups"] >= 3
    assert groups["display_name"].drop_nulls().len() >= 1
    assert groups["participants"].list.len().min() >= 2
    in_groups = r.messages.filter(pl.col("chat_id").is_in(groups["chat_id"].implode()) & ~pl.col("is_from_me"))
    assert in_groups["sender"].n_unique() >= 3  # several people talk in the groups
    handles = r.chats["participants"].explode().drop_nulls().unique().to_list()
    assert all(h.startswith("+") or "@" in h for h in handles)
    assert all(normalize_handle(h) == h for h in handles)  # stored already canonical
    assert any(h.startswith(("+44", "+90", "+971", "+49", "+33", "+81")) for h in handles)


def test_multilingual_messages_are_searchable(demo):
    _, r = demo
    texts = set(r.messages["text"].drop_nulls().to_list())
    assert {t for _, t in MULTILINGUAL} <= texts
    assert any("İstanbul" in t for t in texts)
    assert any("\u0645\u0631\u062d\u0628\u0627" in t for t in texts)  # Arabic "marhaba"
    assert r.messages.filter(pl.col("text").str.contains("\ufffc"))["attachments"].min() >= 1


def test_addressbook_names_stores_and_conflicts(demo):
    a, r = demo
    ab = read_addressbook(a.addressbook_dir)
    assert len(ab.files) == 2 and any("Sources" in str(f) for f in ab.files)
    numbers: dict[str, set[str]] = {}
    for p in ab.people:
        for raw in p.phones + p.emails:
            numbers.setdefault(normalize_handle(raw), set()).add(p.display_name)
    contacts = set(r.chats["participants"].explode().drop_nulls().to_list())
    named = contacts & set(numbers)
    assert 0.6 < len(named) / len(contacts) < 0.95  # ~80 % of contacts have a card
    conflicts = [h for h, names in numbers.items() if len(names) > 1]
    assert 1 <= len(conflicts) <= a.counts["addressbook_conflicts"]
    typed = [raw for p in ab.people for raw in p.phones]
    assert any("(" in t for t in typed) and any(t.startswith("+90 ") or t.startswith("+44 ") for t in typed)


def test_whatsapp_store_when_asked(demo):
    a, _ = demo
    assert a.whatsapp_db is not None
    w = read_whatsapp(a.whatsapp_db)
    assert w.messages.height == a.counts["whatsapp_messages"] > 0
    assert w.chats.height == a.counts["whatsapp_chats"]
    assert (w.chats["kind"] == "group").sum() == 1


def _dump(path: Path) -> list[tuple]:
    con = sqlite3.connect(path)
    rows = con.execute(
        "SELECT guid, text, attributedBody, handle_id, date, associated_message_guid, associated_message_type "
        "FROM message ORDER BY ROWID"
    ).fetchall()
    con.close()
    return rows


def test_every_attachment_file_is_there_but_the_one_left_out_on_purpose(demo_archive_small, caplog):
    """The demo archive's files match its chat.db: of every attachment a message points at, only
    the deliberate missing photo is absent; it is counted, and no run warns about it."""
    from brb_pipeline.demo.rich import MISSING_PHOTO

    a = demo_archive_small
    with caplog.at_level("WARNING"):
        r = read_imessage(a.chat_db, attachments_dir=a.attachments_dir)
    assert r.stats["attachments_listed"] >= 4 + a.counts["attachments"]
    assert r.stats["attachments_missing"] == a.counts["rich_attachments_missing"] == 1
    missing = [e for ex in r.messages["extras"].drop_nulls().to_list() for e in ex
               if e["kind"] in ("file", "sticker", "voice") and not e["exists"]]
    assert [e["name"] for e in missing] == [MISSING_PHOTO]
    said = " ".join(r.warnings) + caplog.text
    assert "not in the attachments folder" not in said and MISSING_PHOTO not in said


def test_deterministic_for_a_seed(tmp_path):
    a1 = build_demo_archive(tmp_path / "a", messages=300, seed=11)
    a2 = build_demo_archive(tmp_path / "b", messages=300, seed=11)
    a3 = build_demo_archive(tmp_path / "c", messages=300, seed=12)
    assert a1.counts == a2.counts
    assert _dump(a1.chat_db) == _dump(a2.chat_db)
    for f1 in sorted(a1.addressbook_dir.rglob("*.abcddb")):  # same cards, same Sources/<UUID> path
        f2 = a2.addressbook_dir / f1.relative_to(a1.addressbook_dir)
        assert list(sqlite3.connect(f1).iterdump()) == list(sqlite3.connect(f2).iterdump())
    assert _dump(a1.chat_db) != _dump(a3.chat_db)
    assert a1.whatsapp_db is None and not (tmp_path / "a" / "ChatStorage.sqlite").exists()
    # Rebuilding into the same folder replaces the earlier demo archive.
    again = build_demo_archive(tmp_path / "a", messages=300, seed=11)
    assert _dump(again.chat_db) == _dump(a2.chat_db)


def test_refuses_a_folder_with_a_real_chat_db(tmp_path):
    (tmp_path / "chat.db").write_bytes(b"pretend this is someone's archive")
    with pytest.raises(FileExistsError, match="not a demo archive"):
        build_demo_archive(tmp_path, messages=50)
    assert (tmp_path / "chat.db").read_bytes() == b"pretend this is someone's archive"


def test_split_contacts_spreads_each_participant_over_more_people(tmp_path):
    one = build_demo_archive(tmp_path / "one", messages=3000, seed=5)
    three = build_demo_archive(tmp_path / "three", messages=3000, seed=5, split_contacts=3)
    assert three.counts["corpus_messages"] == one.counts["corpus_messages"] == 3000
    assert one.counts["contacts"] < three.counts["contacts"] <= 3 * one.counts["contacts"]

    def busiest(a) -> int:
        frame = pl.DataFrame(read_imessage(a.chat_db).messages)
        return frame.filter(~pl.col("is_from_me")).group_by("sender").len()["len"].max()  # messages received

    assert busiest(three) < busiest(one)


def _small_corpus(monkeypatch, conversations: int = 12) -> int:
    """Make the demo draw from the corpus' first conversations only; returns their message count."""
    from brb_pipeline.demo import people

    small = people.load_corpus()[:conversations]
    monkeypatch.setattr(people, "load_corpus", lambda: small)
    return sum(len(m) for _, m in small)


def test_within_the_corpus_the_draw_is_the_shuffled_corpus_as_before():
    import random

    from brb_pipeline.demo.people import corpus_cycles, load_corpus

    shuffled = list(load_corpus())
    random.Random(7).shuffle(shuffled)
    assert corpus_cycles(6000, 7) == shuffled
    assert corpus_cycles(None, 7) == list(load_corpus())


def test_past_the_corpus_more_passes_with_new_people_later(tmp_path, monkeypatch):
    size = _small_corpus(monkeypatch)
    n = 2 * size + size // 2  # two whole passes and half of a third
    one = build_demo_archive(tmp_path / "one", messages=None, seed=3)
    big = build_demo_archive(tmp_path / "big", messages=n, seed=3)
    again = build_demo_archive(tmp_path / "again", messages=n, seed=3)
    assert one.counts["corpus_messages"] == size and big.counts["corpus_messages"] == n
    assert 2 * one.counts["contacts"] < big.counts["contacts"] <= 3 * one.counts["contacts"]
    assert big.counts == again.counts and _dump(big.chat_db) == _dump(again.chat_db)
    con = sqlite3.connect(big.chat_db)
    handles = [h for (h,) in con.execute("SELECT id FROM handle")]
    guids = [g for (g,) in con.execute("SELECT guid FROM chat")]
    years = {y for (y,) in con.execute("SELECT DISTINCT date / 1000000000 / 31536000 FROM message WHERE date > 0")}
    con.close()
    assert len(handles) == len(set(handles)) and len(guids) == len(set(guids))
    assert len(years) >= 3  # each pass a year after the one before
    r = read_imessage(big.chat_db)
    assert len(r.messages) == big.counts["expected_messages"]
