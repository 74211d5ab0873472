"""Mail reader: stores written by the demo mail writer from the real DDL, read back; the channel
off by default; an ingestion of the demo archive with Mail where a mail-only phrase is found."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from brb_pipeline.core.contacts.resolve import resolve_contacts
from brb_pipeline.core.errors import DatabaseLockedError, NotADatabaseError, SourceMissingError, UnknownSchemaError
from brb_pipeline.core.records import CHAT_SCHEMA, MESSAGE_SCHEMA, Person
from brb_pipeline.demo.mail_writer import MAIL_ONLY_PHRASE, MailRecord, rfc822, write_mail_store
from brb_pipeline.stages import ingest
from brb_pipeline.config.settings import Settings, default_mail_dir
from brb_pipeline.sources.imessage import read_imessage
from brb_pipeline.sources.mail import locate_envelope_index, read_mail
from brb_pipeline.sources.mail_body import cut_text, decode_message, emlx_message, html_to_text

from brb_pipeline_tests.helpers import T0

ME = ("Me", "me@icloud.com")
DIEGO = ("Diego Ramos", "Diego.Ramos@Example.com")
ANA = ("Ana", "ana@example.org")
LIST = ("Club News", "news@lists.example.org")
S = timedelta(minutes=1)


def _records() -> list[MailRecord]:
    return [
        MailRecord(7, "INBOX", DIEGO, [ME], "Concert", T0, rfc822(DIEGO, [ME], "Concert", T0, "Tickets are 40 each.")),
        MailRecord(7, "Sent Messages", ME, [DIEGO], "Concert", T0 + S,
                   rfc822(ME, [DIEGO], "Re: Concert", T0 + S, "Count me in.\n\nOn Fri, Diego wrote:\n> Tickets"),
                   reply=True),
        MailRecord(8, "INBOX", ANA, [ME, DIEGO], "Picnic", T0 + 2 * S,
                   rfc822(ANA, [ME, DIEGO], "Picnic", T0 + 2 * S, "Sunday at noon?"), attachments=2),
        MailRecord(9, "INBOX", LIST, [ME], "Digest", T0 + 3 * S,
                   rfc822(LIST, [ME], "Digest", T0 + 3 * S, "News of the week", headers={"List-Id": "<club>"})),
        MailRecord(10, "INBOX", ("Bot", "no-reply@service.example"), [ME], "Receipt", T0 + 4 * S,
                   rfc822(("Bot", "no-reply@service.example"), [ME], "Receipt", T0 + 4 * S, "Paid.")),
        MailRecord(11, "INBOX", ANA, [ME], "Flagged list", T0 + 5 * S,
                   rfc822(ANA, [ME], "Flagged list", T0 + 5 * S, "bulk"), list_flag=True),
        MailRecord(12, "INBOX", ANA, [ME], "Bulk", T0 + 6 * S,
                   rfc822(ANA, [ME], "Bulk", T0 + 6 * S, "sale", headers={"Precedence": "bulk"})),
    ]


@pytest.fixture()
def store(tmp_path) -> Path:
    return write_mail_store(tmp_path / "Mail", _records())


def test_store_reads_back_with_exact_schema(store):
    res = read_mail(store)
    assert res.messages.schema == MESSAGE_SCHEMA and res.chats.schema == CHAT_SCHEMA
    rows = res.messages.select("message_id", "chat_id", "sender", "is_from_me", "ts", "text", "attachments").rows()
    assert rows == [
        # an original carries its subject; the sender lower-cased like an iMessage e-mail handle
        ("mail:100001", "mail:7", "diego.ramos@example.com", False, T0, "Concert\n\nTickets are 40 each.", 0),
        # a reply in Sent Messages: mine, no subject repeated, quote cut
        ("mail:100002", "mail:7", None, True, T0 + S, "Count me in.", 0),
        ("mail:100003", "mail:8", "ana@example.org", False, T0 + 2 * S, "Picnic\n\nSunday at noon?", 2),
    ]
    assert res.chats.rows() == [
        ("mail", "mail:7", "direct", "Diego Ramos", ["diego.ramos@example.com"]),  # partner's display name
        ("mail", "mail:8", "group", None, ["ana@example.org", "diego.ramos@example.com"]),  # owner excluded
    ]
    # List-Id header, noreply sender, the index's list flag, Precedence: bulk
    assert res.stats["list_excluded"] == 4 and res.stats["quotes_cut"] == 1 and res.stats["owner_addresses"] == 1


def test_lists_kept_when_exclusion_is_off(store):
    res = read_mail(store, exclude_lists=False)
    assert res.stats["list_excluded"] == 0 and res.messages.height == 7
    senders = set(res.messages.get_column("sender").drop_nulls())
    assert {"news@lists.example.org", "no-reply@service.example"} <= senders
    assert ["news@lists.example.org"] in res.chats.get_column("participants").to_list()


@pytest.mark.parametrize(
    "setup, error, fragment",
    [
        # the file does not exist
        (lambda p: p.parent / "missing", SourceMissingError, "not found"),
        # a text file
        (lambda p: p.write_text("not a database") and p, NotADatabaseError, "not an SQLite"),
        # an SQLite file of something else
        (lambda p: _other_db(p), UnknownSchemaError, "messages"),
    ],
)
def test_bad_input_one_line_errors(tmp_path, setup, error, fragment):
    path = setup(tmp_path / "Envelope Index")
    with pytest.raises(error) as e:
        read_mail(path)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def _other_db(path: Path) -> Path:
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE ZABCDRECORD (Z_PK INTEGER PRIMARY KEY)")
    return path


def test_missing_mail_folder_is_one_line(tmp_path):
    (tmp_path / "Mail" / "V10").mkdir(parents=True)
    with pytest.raises(SourceMissingError) as e:
        locate_envelope_index(tmp_path / "Mail")
    assert "Envelope Index not found" in str(e.value) and "\n" not in str(e.value)


def test_locked_store(store):
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(DatabaseLockedError) as e:
            read_mail(store, timeout_s=0.1)
        assert "locked" in str(e.value) and "\n" not in str(e.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_broken_bodies_and_absurd_dates_are_counted_not_fatal(tmp_path):
    ok = rfc822(DIEGO, [ME], "x", T0, "fine")
    recs = [
        MailRecord(1, "INBOX", DIEGO, [ME], "Cut off", T0, ok, emlx="truncated"),
        MailRecord(1, "INBOX", DIEGO, [ME], "Garbage", T0, ok, emlx="garbage"),
        MailRecord(1, "INBOX", DIEGO, [ME], "Partial", T0, ok, emlx="partial"),
        MailRecord(1, "INBOX", DIEGO, [ME], "No body", T0, None),
        *(MailRecord(1, "INBOX", DIEGO, [ME], "bad date", None, ok, raw_date=v) for v in (0, -5, 10**12, "soon")),
        MailRecord(1, "INBOX", DIEGO, [ME], "No date", None, ok),
    ]
    res = read_mail(write_mail_store(tmp_path / "Mail", recs))
    by_subject = {r["text"].split("\n")[0]: r for r in res.messages.iter_rows(named=True)}
    # a truncated or garbage body is no message: skipped and counted, never a message with content
    assert "Cut off" not in by_subject and "Garbage" not in by_subject
    assert by_subject["Partial"]["text"] == "Partial\n\nfine" and not by_subject["Partial"]["undecodable"]
    assert by_subject["No body"]["text"] == "No body" and not by_subject["No body"]["undecodable"]
    assert res.stats["body_undecodable"] == 2 and res.stats["body_missing"] == 1
    assert res.stats["bad_timestamp"] == 5 and res.messages.height == 2 == res.stats["messages_read"]
    assert any("2 messages were skipped: their body file is truncated" in w for w in res.warnings)
    assert any("date" in w for w in res.warnings)


def test_apple_epoch_store_is_read_by_magnitude(tmp_path):
    apple = int(T0.timestamp()) - 978307200
    recs = [MailRecord(1, "INBOX", DIEGO, [ME], "Old clock", None, rfc822(DIEGO, [ME], "x", T0, "hi"), raw_date=apple)]
    assert read_mail(write_mail_store(tmp_path / "Mail", recs)).messages["ts"].to_list() == [T0]


def test_drafts_deleted_and_duplicate_copies_are_skipped(tmp_path):
    raw = rfc822(DIEGO, [ME], "x", T0, "one message")
    recs = [
        MailRecord(1, "INBOX", DIEGO, [ME], "x", T0, raw),
        MailRecord(1, "Archive", DIEGO, [ME], "x", T0, raw, global_id=100_001),  # same message, other mailbox
        MailRecord(0, "Drafts", None, [DIEGO], "draft", T0, None),
        MailRecord(1, "INBOX", DIEGO, [ME], "gone", T0, raw, deleted=True),
    ]
    res = read_mail(write_mail_store(tmp_path / "Mail", recs))
    assert res.messages.get_column("message_id").to_list() == ["mail:100001"]
    assert (res.stats["duplicate_copies"], res.stats["drafts_skipped"], res.stats["deleted_skipped"]) == (1, 1, 1)


@pytest.mark.parametrize(
    "raw, expected, flags",
    [
        # base64 UTF-8
        (rfc822(DIEGO, [ME], "s", T0, "Görüşürüz 🎉", encoding="base64"), "Görüşürüz 🎉", {}),
        # quoted-printable with a soft line break and =C3=A9
        (rfc822(DIEGO, [ME], "s", T0, "café " + "long " * 30, encoding="qp"), "café " + ("long " * 30).strip(), {}),
        # a non-UTF-8 charset (Turkish ISO-8859-9)
        (rfc822(DIEGO, [ME], "s", T0, "Şimdi değil, yarın", charset="iso-8859-9"), "Şimdi değil, yarın", {}),
        # HTML only: entities, blocks, script and the quoted blockquote dropped
        (rfc822(DIEGO, [ME], "s", T0, "", html="<p>Fish &amp; chips</p><script>x()</script><div>at 8</div>"
                "<blockquote>old text</blockquote>"), "Fish & chips\n\nat 8", {"html": True}),
        # multipart/alternative: the plain part wins
        (rfc822(DIEGO, [ME], "s", T0, "plain one", html="<p>html one</p>"), "plain one", {"html": False}),
        # an unknown charset: decoded as UTF-8
        (b"Content-Type: text/plain; charset=x-nope\r\n\r\nhello\r\n", "hello", {}),
        # bytes invalid in the declared charset: replaced, flagged
        (b"Content-Type: text/plain; charset=utf-8\r\n\r\nbad \xff byte\r\n", "bad \ufffd byte", {"replaced": True}),
    ],
)
def test_mime_decoding(raw, expected, flags):
    body = decode_message(raw)
    assert body.text == expected and not body.broken
    for k, v in flags.items():
        assert getattr(body, k) is v


def test_attachment_parts_are_not_the_body():
    raw = (b"Content-Type: multipart/mixed; boundary=B\r\n\r\n--B\r\nContent-Type: text/plain\r\n"
           b"Content-Disposition: attachment; filename=notes.txt\r\n\r\nattached notes\r\n--B\r\n"
           b"Content-Type: text/plain\r\n\r\nthe real text\r\n--B--\r\n")
    assert decode_message(raw).text == "the real text"


@pytest.mark.parametrize(
    "text, expected, quote, sig",
    [
        # attribution wrapped over two lines, then > lines
        ("Yes!\n\nOn Tue, Mar 5, 2024 at 10:00 AM Diego Ramos\n<diego@example.com> wrote:\n> are you in?\n> ok",
         "Yes!", True, False),
        # > lines without an attribution
        ("Agreed.\n> you said this\n>> and this", "Agreed.", True, False),
        # a "-- " signature line and what follows
        ("See you.\n\n-- \nDiego Ramos\n+1 555 0100", "See you.", False, True),
        # the mobile footer
        ("On my way\n\nSent from my iPhone", "On my way", False, True),
        # German client attribution
        ("Gern.\n\nAm 05.03.2024 um 10:00 schrieb Ana <ana@example.org>:\n> Kommst du?", "Gern.", True, False),
        # a line starting "On" that is not an attribution stays
        ("On Monday we hiked.\nIt rained.", "On Monday we hiked.\nIt rained.", False, False),
        # all quote: a cut never removes a whole message, the text is kept
        ("> only a quote", "> only a quote", False, False),
    ],
)
def test_quote_and_signature_cutting(text, expected, quote, sig):
    assert cut_text(text) == (expected, quote, sig)


def test_emlx_container():
    raw = b"Subject: x\r\n\r\nbody"
    assert emlx_message(f"{len(raw)}\n".encode() + raw + b"<?xml plist?>") == raw
    assert emlx_message(f"{len(raw) + 10}\n".encode() + raw) is None  # truncated
    assert emlx_message(b"no length\n" + raw) is None
    assert html_to_text("<p>a<br>b</p>") == "\na\nb\n"


def test_mail_sender_is_the_same_contact_as_the_imessage_handle(store, make_chatdb):
    b = make_chatdb()
    h = b.add_handle("diego.ramos@example.com")
    b.add_message(b.add_chat([h]), h, "see you tonight", ts=T0)
    im, mail = read_imessage(b.close()), read_mail(store)
    people = [Person("AddressBook-v22.abcddb", 1, "Diego Ramos", emails=["Diego.Ramos@example.COM"])]
    res = resolve_contacts(pl.concat([im.messages, mail.messages]), pl.concat([im.chats, mail.chats]), people)
    diego = res.contacts.filter(pl.col("display_name") == "Diego Ramos").row(0, named=True)
    assert diego["channels"] == ["imessage", "mail"] and diego["contact_id"] == "c:diego.ramos@example.com"
    mine = res.messages.filter(pl.col("chat_id").is_in(["mail:7"]) | (pl.col("channel") == "imessage"))
    assert set(mine.get_column("contact_id")) == {"c:diego.ramos@example.com"}


def test_settings_defaults_mail_off():
    s = Settings(home=Path("/nonexistent"))
    assert s.mail_enabled is False and s.mail_exclude_lists is True and s.channels()["mail"] is False
    assert default_mail_dir("darwin") == Path.home() / "Library" / "Mail" and default_mail_dir("linux") is None


def test_mail_off_is_never_opened(tmp_path, demo_archive_small):
    # A Mail folder whose index is not a database: opening it would fail the snapshot.
    bad = tmp_path / "Mail"
    (bad / "V10" / "MailData").mkdir(parents=True)
    (bad / "V10" / "MailData" / "Envelope Index").write_text("would raise if opened")
    s = Settings(home=tmp_path / "home", chat_db=demo_archive_small.chat_db, mail_dir=bad,
                 addressbook_dir=demo_archive_small.addressbook_dir, embedding_model="hash")
    ingest.run_snapshot(s)
    ingest.run_parse(s)
    manifest = json.loads(s.paths.snapshot_manifest.read_text())
    assert manifest["mail_db"] is None and not (s.snapshot_dir / "Mail").exists()
    assert manifest["channels"]["mail"] is False
    assert "mail" not in pl.read_parquet(s.paths.parsed_messages).get_column("channel").to_list()
    on = Settings(home=tmp_path / "home2", chat_db=demo_archive_small.chat_db, mail_dir=bad, mail_enabled=True)
    with pytest.raises(NotADatabaseError) as e:  # turned on, the same folder is read (and refused)
        ingest.run_snapshot(on)
    assert "Mail Envelope Index" in str(e.value) and "\n" not in str(e.value)


@pytest.fixture(scope="module")
def mail_home(tmp_path_factory):
    """The demo archive with Mail, ingested (hash embedder, no insights)."""
    from brb_pipeline.core.embedding.models import HashEmbedder
    from brb_pipeline.demo.generate import build_demo_archive
    from brb_pipeline.orchestration.runner import run_ingest

    root = tmp_path_factory.mktemp("mail_home")
    archive = build_demo_archive(root / "demo", messages=600, seed=7, mail=True)
    s = Settings(home=root / "home", chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir,
                 mail_dir=archive.mail_dir, mail_enabled=True, embedding_model="hash")
    run_ingest(s, embedder=HashEmbedder(), analyze=False)
    return s, archive


def test_demo_ingest_with_mail_finds_a_mail_only_phrase(mail_home):
    from brb_pipeline.core import metadata
    from brb_pipeline.core.embedding.models import HashEmbedder
    from brb_pipeline.search.query import run_search

    s, archive = mail_home
    assert archive.counts["mail_expected_messages"] == 8
    parsed = pl.read_parquet(s.paths.parsed_messages)
    assert parsed.filter(pl.col("channel") == "mail").height == archive.counts["mail_expected_messages"]
    # the mail partners are iMessage contacts with e-mail handles: one contact across both channels
    contacts = {c["contact_id"]: c for c in metadata.read_contacts(s.brb_db).iter_rows(named=True)}
    partner = pl.read_parquet(s.paths.messages).filter(pl.col("chat_id") == "mail:1")["contact_id"].unique().to_list()
    assert len(partner) == 1 and contacts[partner[0]]["channels"] == ["imessage", "mail"]
    hits = run_search(s, MAIL_ONLY_PHRASE, embedder=HashEmbedder(), mode="lexical")["hits"]
    assert hits and hits[0]["channel"] == "mail" and hits[0]["chat_id"] == "mail:1"


def test_a_forgotten_person_is_scrubbed_from_the_mail_snapshot(tmp_path, monkeypatch):
    """Their direct thread, their lines in a group thread, the owner's mail and drafts only to
    them go from the index and the bodies; the others' mail in the group stays, read back with
    the same text, its bodies rewritten without their address or a quote of their mail."""
    from brb_pipeline.core import metadata
    from brb_pipeline.privacy.forgotten import remember
    from brb_pipeline_tests.helpers.bytescan import scan, summary

    monkeypatch.setenv("BRB_KEY_DIR", str(tmp_path / "keys"))
    quote = "Great!\n\nOn Sat, Diego Ramos <Diego.Ramos@Example.com> wrote:\n> I will bring lemonade"
    records = _records() + [
        MailRecord(0, "Drafts", None, [DIEGO], "unsent", T0 + 7 * S, rfc822(ME, [DIEGO], "unsent", T0, "draft text")),
        MailRecord(8, "Sent Messages", ME, [DIEGO], "Picnic", T0 + 8 * S,
                   rfc822(ME, [DIEGO], "Re: Picnic", T0 + 8 * S, "Just to you: bring the blanket"), reply=True),
        MailRecord(8, "INBOX", DIEGO, [ME, ANA], "Picnic", T0 + 9 * S,
                   rfc822(DIEGO, [ME, ANA], "Re: Picnic", T0 + 9 * S, "I will bring lemonade"), reply=True),
        MailRecord(8, "INBOX", ANA, [ME, DIEGO], "Picnic", T0 + 10 * S,
                   rfc822(ANA, [ME, DIEGO], "Re: Picnic", T0 + 10 * S, quote, encoding="base64"), reply=True),
        MailRecord(8, "Sent Messages", ME, [ANA, DIEGO], "Picnic", T0 + 11 * S,
                   rfc822(ME, [ANA, DIEGO], "Re: Picnic", T0 + 11 * S, "See you both there"), reply=True),
    ]
    store = write_mail_store(tmp_path / "Mail", records)
    s = Settings(home=tmp_path / "home", imessage_enabled=False, mail_dir=tmp_path / "Mail", mail_enabled=True)
    needles = ["diego", "lemonade", "bring the blanket", "draft text", "Tickets are 40"]
    assert {f.needle for f in scan(tmp_path / "Mail", needles)} == set(needles)  # the scan finds them
    s.home.mkdir()
    with metadata.connect(s.brb_db) as c:
        remember(s, c, ["diego.ramos@example.com"], [])
    ingest.run_snapshot(s)
    copy = s.snapshot_dir / "Mail" / "V10" / "MailData" / "Envelope Index"
    found = scan(s.snapshot_dir / "Mail", needles)
    assert not found, summary(found)
    con = sqlite3.connect(copy)
    assert con.execute("SELECT count(*) FROM messages").fetchone()[0] == len(records) - 5
    con.close()
    before, after = read_mail(store), read_mail(copy)
    assert "mail:7" not in after.chats["chat_id"].to_list()
    assert after.chats.filter(pl.col("chat_id") == "mail:8")["participants"].to_list() == [["ana@example.org"]]
    others = (pl.col("sender") == "ana@example.org") | (pl.col("message_id") == f"mail:{100_000 + len(records)}")
    assert after.messages.filter(others).height == 3  # Ana's two in the thread, the owner's reply to both
    assert after.messages.filter(others).select("message_id", "text").equals(
        before.messages.filter(others).select("message_id", "text"))
    assert after.messages.height == before.messages.height - 4  # Diego's three, the owner's one to him


def test_search_channel_filter_end_to_end(mail_home):
    """`brb search --channel`: mail only gets mail hits, another channel none of them, no filter both."""
    from brb_pipeline_tests.helpers.cli import brb

    s, _ = mail_home

    def hits(*extra: str) -> list[dict]:
        r = brb("search", "saturday morning", "--mode", "lexical", "-k", "20", "--json", *extra, home=s.home)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout)["hits"]

    everything, mail, imessage = hits(), hits("--channel", "mail"), hits("--channel", "imessage")
    assert {h["channel"] for h in everything} == {"imessage", "mail"}
    assert mail and {h["channel"] for h in mail} == {"mail"} and mail[0]["chat_id"] == "mail:1"
    assert imessage and {h["channel"] for h in imessage} == {"imessage"}
    assert {h["chunk_id"] for h in mail} | {h["chunk_id"] for h in imessage} >= {h["chunk_id"] for h in everything}
