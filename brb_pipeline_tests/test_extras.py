"""What a message holds besides its text (issue 31): attachments, link previews, replies, voice
messages, group events: read from chat.db's real columns, shown in passages, returned in
``--json`` hits, and gone from disk after ``brb forget``."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

from brb_pipeline.core.records.extras import human_size, kind_word, render_extras
from brb_pipeline.demo import rich
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline.demo.mail_writer import MAIL_FILE
from brb_pipeline.sources.imessage import read_imessage
from brb_pipeline.sources.typedstream import audio_transcription, encode_attributed_body
from brb_pipeline.sources.imessage_extras import group_event, link_preview, resolve_attachment
from brb_pipeline_tests.helpers.bytescan import scan, summary
from brb_pipeline_tests.helpers.cli import ENV, brb

T0 = datetime(2024, 3, 5, 18, 0, tzinfo=timezone.utc)
A = "~/Library/Messages/Attachments"


def test_link_preview_reads_the_keyed_archive_and_refuses_junk():
    payload = rich.url_payload("https://ex.com/a", "A title", "A summary")
    assert link_preview(payload) == ("https://ex.com/a", "A title", "A summary")
    for junk in (b"bplist00 not really", b"", None, b"\x00" * 40, rich.url_payload("", "", "")):
        assert link_preview(junk) is None


def test_attachment_paths_resolve_under_the_folder_given_and_are_only_checked(tmp_path):
    (tmp_path / "ab" / "01").mkdir(parents=True)
    (tmp_path / "ab" / "01" / "x.pdf").write_bytes(b"%PDF")
    assert resolve_attachment(f"{A}/ab/01/x.pdf", tmp_path) == (str(tmp_path / "ab/01/x.pdf"), True)
    assert resolve_attachment(f"{A}/ab/01/gone.pdf", tmp_path) == (str(tmp_path / "ab/01/gone.pdf"), False)
    assert resolve_attachment(None, tmp_path) == (None, False)
    assert resolve_attachment("/abs/elsewhere.jpg", tmp_path) == ("/abs/elsewhere.jpg", False)


def test_group_events_and_tags_read_as_short_lines():
    assert group_event(2, 0, "Ski trip") == "renamed the group to Ski trip"
    assert (group_event(1, 0, None), group_event(1, 1, None), group_event(3, 0, None)) == ("added", "removed", "left the group")
    assert group_event(3, 1, None) is None and group_event(0, 0, None) is None  # photo change, plain message
    assert (kind_word("application/pdf", "r.pdf"), kind_word("image/heic", "i.heic"), kind_word(None, "a.docx")) == \
        ("PDF", "photo", "DOCX")
    assert (human_size(1_250_000), human_size(999), human_size(0)) == ("1.2 MB", "999 B", None)
    names = {"+15550001": "Sam"}
    f = {"kind": "file", "name": "report.pdf", "mime": "application/pdf", "bytes": 1_250_000, "path": "/p",
         "exists": True, "text": None, "ref": None}
    reply = {"kind": "reply", "name": "+15550001", "text": "are we on for Saturday?", "ref": "imessage:G"}
    assert render_extras("here \ufffc", [reply, f], names) == (
        '↪ replying to Sam: "are we on for Saturday?" here \ufffc [attachment: report.pdf, PDF, 1.2 MB]', False, 1)
    event = {"kind": "event", "name": "+15550001", "text": "added"}
    assert render_extras(None, [event], names) == ("added Sam", True, 0)
    assert render_extras("x", None, names) == ("x", False, 0)


def _rich_chatdb(make_chatdb, root: Path):
    b = make_chatdb()
    sam = b.add_handle("+15550001")
    kim = b.add_handle("+15550002")
    chat = b.add_chat([sam], style=45, identifier="+15550001", guid="iMessage;-;+15550001")
    group = b.add_chat([sam, kim], style=43, identifier="chat1", guid="iMessage;+;chat1")
    asked = b.add_message(chat, sam, "are we still on for Saturday?", ts=T0)
    files = [rich._file(root, 1, "report.pdf", "application/pdf", "com.adobe.pdf", 1_250_000),
             rich._file(root, 2, "gone.heic", "image/heic", "public.heic", 10, present=False)]
    b.add_message(chat, sam, "\ufffc\ufffc", ts=T0 + timedelta(minutes=1), files=files)
    b.add_message(chat, sam, "\ufffc", ts=T0 + timedelta(minutes=2),
                  columns={"is_audio_message": 1,
                           "attributedBody": encode_attributed_body("\ufffc", transcription="flour,  then rest")},
                  files=[rich._file(root, 3, "Audio Message.caf", None, "com.apple.coreaudio-format", 9)])
    b.add_message(chat, 0, "https://ex.com/bread", ts=T0 + timedelta(minutes=3), is_from_me=True,
                  columns={"balloon_bundle_id": rich.URL_BALLOON,
                           "payload_data": rich.url_payload("https://ex.com/bread", "Bread", "Flour, water")})
    b.add_message(chat, 0, "https://ex.com/x", ts=T0 + timedelta(minutes=4), is_from_me=True,
                  columns={"balloon_bundle_id": rich.URL_BALLOON, "payload_data": b"junk"})
    b.add_message(chat, 0, "yes!", ts=T0 + timedelta(minutes=5), is_from_me=True,
                  columns={"thread_originator_guid": asked})
    b.add_message(chat, 0, "what?", ts=T0 + timedelta(minutes=6), is_from_me=True,
                  columns={"thread_originator_guid": "NOT-IN-THE-ARCHIVE"})
    b.add_message(group, 0, None, ts=T0, is_from_me=True, item_type=1, columns={"group_action_type": 0, "other_handle": kim})
    b.add_message(group, sam, None, ts=T0 + timedelta(minutes=1), item_type=2, group_title="Ski trip")
    b.add_message(group, kim, None, ts=T0 + timedelta(minutes=2), item_type=3, columns={"group_action_type": 0})
    b.add_unjoined_file({"filename": f"{A}/zz/x.jpg", "transfer_name": "x.jpg"})
    return b.close()


def test_reader_lists_every_extra_and_counts_bad_input(make_chatdb, tmp_path, caplog):
    root = tmp_path / "Attachments"
    db = _rich_chatdb(make_chatdb, root)
    r = read_imessage(db, attachments_dir=root)
    st = r.stats
    assert (st["attachments_listed"], st["attachments_missing"], st["attachments_unjoined"]) == (3, 1, 1)
    assert (st["link_previews"], st["link_previews_undecodable"]) == (1, 1)
    assert (st["replies"], st["replies_unresolved"], st["group_events"], st["voice_messages"]) == (2, 1, 3, 1)
    ex = {t: e for t, e in zip(r.messages["text"].to_list(), r.messages["extras"].to_list())}
    pdf, gone = ex["\ufffc\ufffc"]
    assert (pdf["name"], pdf["kind"], pdf["bytes"], pdf["exists"]) == ("report.pdf", "file", 1_250_000, True)
    assert Path(pdf["path"]).is_file() and Path(pdf["path"]).is_relative_to(root)
    assert (gone["exists"], gone["path"].endswith("gone.heic")) == (False, True)
    assert ex["\ufffc"][0]["kind"] == "voice" and ex["\ufffc"][0]["text"] == "flour, then rest"
    assert st["voice_transcriptions"] == 1
    assert ex["https://ex.com/bread"][0] == {**ex["https://ex.com/bread"][0], "kind": "link", "name": "Bread",
                                             "text": "Flour, water", "ref": "https://ex.com/bread"}
    assert ex["https://ex.com/x"] is None  # undecodable: the URL stays, counted
    assert ex["yes!"][0]["text"] == "are we still on for Saturday?" and ex["yes!"][0]["name"] == "+15550001"
    assert ex["what?"][0]["text"] is None
    events = r.messages.filter(pl.col("text").is_null() & pl.col("extras").is_not_null())["extras"].to_list()
    assert sorted(e[0]["text"] for e in events) == ["added", "left the group", "renamed the group to Ski trip"]
    assert r.messages.height == 10
    # Warnings and logs are counts: no file name, path, title or text.
    said = " ".join(r.warnings) + caplog.text
    for secret in ("report.pdf", "gone.heic", "Bread", "Saturday", str(root)):
        assert secret not in said


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    root = tmp_path_factory.mktemp("extras")
    archive = build_demo_archive(root / "archive", messages=600, seed=7)  # has group chats
    home = root / "home"
    r = brb("ingest", "--chat-db", str(archive.chat_db), "--addressbook", str(archive.addressbook_dir),
            "--attachments", str(archive.attachments_dir), "--progress", "none", "--no-insights", home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    assert archive.counts["group_events"] >= 3 and archive.counts["rich_messages"] == 7
    return home, archive


def _search(home: Path, query: str) -> dict:
    r = brb("search", query, "--json", "-k", "3", home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_demo_extras_show_in_search_output_and_json(home):
    home, archive = home
    for query, shown in (("quarterly report PDF", f"[attachment: {rich.REPORT}, PDF, 1.2 MB]"),
                         ("sticker", "[sticker]"), ("flour starter overnight", f"[voice message: {rich.VOICE_TRANSCRIPT}]"),
                         ("sourdough starter", f"[link: {rich.SOURDOUGH_TITLE} — {rich.SOURDOUGH_SUMMARY}]"),
                         ("Saturday ski trip", "↪ replying to "), ("renamed the group", " renamed the group to ")):
        hits = _search(home, query)["hits"]
        assert any(shown in h["text"] for h in hits), (query, [h["text"] for h in hits])
        plain = brb("search", query, "-k", "3", home=home)  # the text a person reads shows it too
        assert plain.returncode == 0 and shown in plain.stdout, (query, plain.stdout[-1500:])
    hits = _search(home, "quarterly report PDF")["hits"]
    files = {f.get("name") or f.get("url"): f for h in hits for f in h["files"]}
    report = files[rich.REPORT]
    assert report["exists"] and Path(report["path"]).is_file()
    assert Path(report["path"]).is_relative_to(archive.attachments_dir)
    assert report["mime"] == "application/pdf" and report["bytes"] == 1_250_000
    links = {f["url"]: f for h in _search(home, "sourdough starter")["hits"] for f in h["files"] if f["kind"] == "link"}
    assert links[rich.SOURDOUGH_URL]["title"] == rich.SOURDOUGH_TITLE
    plain = brb("search", "sourdough starter", home=home)
    assert rich.SOURDOUGH_TITLE in plain.stdout


def test_search_sessions_carry_the_files_as_one_shot_json_does(home):
    """``brb search -`` (one JSON line per query line) gives each hit the same ``files`` as a
    one-shot ``brb search --json``, from an index read once for the session."""
    import subprocess
    import sys

    home, archive = home
    queries = ["quarterly report PDF", "sourdough starter", "quarterly report PDF"]
    r = subprocess.run([sys.executable, "-m", "brb_pipeline.cli", "search", "-", "-k", "3", "--home", str(home)],
                       input="\n".join(queries) + "\n", capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    answers = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(answers) == 3
    for q, got in zip(queries, answers):
        want = _search(home, q)
        assert [h["files"] for h in got["hits"]] == [h["files"] for h in want["hits"]], q
    names = {f.get("name") for h in answers[0]["hits"] for f in h["files"]}
    assert rich.REPORT in names
    urls = {f.get("url") for h in answers[1]["hits"] for f in h["files"]}
    assert rich.SOURDOUGH_URL in urls


def test_file_index_reads_plain_and_sealed_staging_alike(home, tmp_path):
    """The one-shot lookup reads a plain staged file with DuckDB and a sealed one with polars:
    both give the same index, and a contact filter keeps only those conversations."""
    from brb_pipeline import keys as _keys
    _keys.install()  # an encrypted home's files open with its key
    from brb_pipeline.core.crypto import files
    from brb_pipeline.search.hit_files import extras_index

    home, _ = home
    staged = home / "staging" / "messages.parquet"
    plain = tmp_path / "messages.parquet"
    plain.write_bytes(files.read_bytes(staged))  # decrypted when sealed
    assert not files.sealed(plain)
    every = extras_index(staged)
    assert every and extras_index(plain) == every
    chat = next(c for c, rows in every.items() if any(e["name"] == rich.REPORT for _, _, es in rows for e in es))
    contact = files.read_parquet(plain, columns=["chat_id", "contact_id"]).filter(
        pl.col("chat_id") == chat)["contact_id"][0]
    for path in (staged, plain):
        only = extras_index(path, [contact])
        assert chat in only and only[chat] == every[chat] and extras_index(path, ["nobody"]) == {}


def test_assistant_lines_carry_the_files_with_their_paths(home):
    from brb_pipeline.assistant.lines import Transcript

    home, archive = home
    t = Transcript.load(home / "staging" / "messages.parquet", home / "staging" / "parsed_chats.parquet",
                        contact_names={}, handle_names={})
    lines = [t.line(i) for i in range(len(t))]
    report = next(ln for ln in lines if rich.REPORT in ln["text"])
    assert f"[attachment: {rich.REPORT}, PDF, 1.2 MB]" in report["text"]
    (f,) = report["files"]
    assert f["name"] == rich.REPORT and f["exists"] and Path(f["path"]).is_relative_to(archive.attachments_dir)
    assert any(ln["text"].startswith("renamed the group to ") for ln in lines)


def test_forget_removes_the_extras_from_disk(home):
    home, archive = home
    top = next(h for h in _search(home, "quarterly report PDF")["hits"] if rich.REPORT in h["text"])
    needles = [rich.REPORT, "DEMO-ATT-0001", rich.SOURDOUGH_TITLE, rich.SOURDOUGH_SUMMARY]
    assert {f.needle for f in scan(home, needles)} == set(needles)  # the scan sees them first
    r = brb("forget", "--contact", top["contact"], "--yes", home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    found = scan(home, needles)
    assert not found, summary(found)


def test_whatsapp_media_rows_read_as_extras(tmp_path):
    from brb_pipeline.demo.whatsapp_writer import WAChatRecord, WAMessageRecord, write_whatsapp
    from brb_pipeline.sources.whatsapp import read_whatsapp

    jid, p = "905321234567@s.whatsapp.net", tmp_path / "ChatStorage.sqlite"
    write_whatsapp(p, [WAChatRecord(jid, "Ayşe", False)], [
        WAMessageRecord(jid, False, None, T0, "hi", "s1"),
        WAMessageRecord(jid, False, None, T0, None, "s2", media_path="Media/x/a1.pdf", media_type=8,
                        media_bytes=1_250_000, media_title="report.pdf"),
        WAMessageRecord(jid, False, None, T0, None, "s3", media_path="Media/x/b.opus", media_type=3, media_seconds=42),
        WAMessageRecord(jid, True, None, T0, None, "s4", media_path="Media/x/c.jpg", media_bytes=2000,
                        media_title="sunset at Kaş"),
        WAMessageRecord(jid, False, None, T0, None, "s5", media_path="Media/x/d.webp", media_type=15),
    ])
    r = read_whatsapp(p)
    bodies = [render_extras(row["text"], row["extras"], {})[0] for row in r.messages.iter_rows(named=True)]
    assert bodies == ["hi", "[attachment: report.pdf, PDF, 1.2 MB]", "[voice message, 0:42]",
                      "[attachment: c.jpg, photo, 2.0 KB — sunset at Kaş]", "[sticker]"]
    doc = r.messages.get_column("extras")[1][0]
    assert doc["path"] == "Media/x/a1.pdf" and doc["exists"] is None and doc["text"] is None
    assert r.stats["attachments"] == 4


@pytest.fixture(scope="module")
def wa_home(tmp_path_factory, template_homes):
    """A copy of the session's ``all-700`` home: the demo archive with WhatsApp and Mail, ingested."""
    return template_homes.copy("all-700", tmp_path_factory.mktemp("wa-extras") / "home")


def test_whatsapp_and_mail_files_are_searchable_in_json_and_forgotten(wa_home):
    home, _archive = wa_home
    hits = _search(home, "Kira sözleşmesi PDF")["hits"]
    assert any("[attachment: Kira sözleşmesi 2025.pdf, PDF, 482.1 KB]" in h["text"] for h in hits), [h["text"] for h in hits]
    files = [f for h in hits for f in h["files"]]
    doc = next(f for f in files if f.get("name") == "Kira sözleşmesi 2025.pdf")
    assert doc["bytes"] == 482_133 and doc["path"].endswith("/7f3c2e.pdf")
    top = next(h for h in hits if "Kira sözleşmesi" in h["text"])
    assert "[voice message, 0:42]" in top["text"]  # sent a minute after the document, same window
    assert any(f.get("seconds") == 42 and f["kind"] == "voice" for f in top["files"])
    mail = _search(home, "Overstory reading guide PDF")["hits"]
    assert any(f"[attachment: {MAIL_FILE}, PDF, 14.0 KB]" in h["text"] for h in mail), [h["text"] for h in mail]
    mf = next(f for h in mail for f in h["files"] if f.get("name") == MAIL_FILE)
    assert mf["mime"] == "application/pdf" and mf["bytes"] == 14_000 and mf["path"] is None
    needles = ["Kira sözleşmesi 2025.pdf", "7f3c2e.pdf", "9a1b04.opus"]
    assert {f.needle for f in scan(home, needles)} == set(needles)
    r = brb("forget", "--contact", top["contact"], "--yes", home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    found = scan(home, needles)
    assert not found, summary(found)
    mail_top = next(h for h in mail if MAIL_FILE in h["text"])
    assert {f.needle for f in scan(home, [MAIL_FILE])} == {MAIL_FILE}
    r = brb("forget", "--contact", mail_top["contact"], "--yes", home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    found = scan(home, [MAIL_FILE])
    assert not found, summary(found)


def test_a_reaction_kind_newer_than_the_reader_is_counted_never_a_message(make_chatdb, caplog):
    b = make_chatdb()
    sam = b.add_handle("+15550001")
    chat = b.add_chat([sam], style=45, identifier="+15550001", guid="iMessage;-;+15550001")
    parent = b.add_message(chat, sam, "dinner at 8?", ts=T0)
    b.add_tapback(chat, 0, parent, "emoji", ts=T0 + timedelta(minutes=1), is_from_me=True, emoji="🫠")
    for atype in (2012, 3012, 2999):  # kinds a later macOS may write; one with Apple's fallback text
        b.add_message(chat, sam, "Reacted \u201cdinner at 8?\u201d", ts=T0 + timedelta(minutes=2),
                      associated_guid=f"p:0/{parent}", associated_type=atype)
    r = read_imessage(b.close())
    assert r.messages["text"].to_list() == ["dinner at 8?"]
    (rx,) = r.messages["reactions"].to_list()
    assert [(x["kind"], x["emoji"]) for x in rx] == [("emoji", "🫠")]
    assert (r.stats["tapbacks_unknown"], r.stats["tapbacks_folded"], r.stats["tapbacks_orphaned"]) == (3, 1, 0)
    assert any("newer than this reader" in w for w in r.warnings)
    assert "dinner" not in " ".join(r.warnings) + caplog.text


def test_voice_transcription_is_read_from_the_attribute_dictionary_only():
    blob = encode_attributed_body("\ufffc", transcription="call me  back")
    assert audio_transcription(blob) == "call me back"
    for none in (encode_attributed_body("\ufffc"), encode_attributed_body("call me back"), b"junk", None,
                 blob[: len(blob) - 20]):
        assert audio_transcription(none) is None


def test_caf_length_from_the_header_only(tmp_path):
    from brb_pipeline.sources.caf import caf_seconds, write_caf

    for seconds, opus in ((42.0, True), (7.5, False), (0.4, True), (3600.0, True)):
        write_caf(tmp_path / "a.caf", seconds, opus=opus)
        assert caf_seconds(tmp_path / "a.caf") == pytest.approx(seconds, abs=0.001)
    good = (tmp_path / "a.caf").read_bytes()
    for name, data in (("short.caf", good[:20]), ("foreign.caf", b"RIFF" + good[4:]), ("empty.caf", b""),
                       ("junk.caf", b"caff\x00\x01\x00\x00desc" + b"\xff" * 8 + b"\x00" * 4)):
        (tmp_path / name).write_bytes(data)
        assert caf_seconds(tmp_path / name) is None, name
    assert caf_seconds(tmp_path / "missing.caf") is None


def test_voice_length_is_read_only_when_opted_in(make_chatdb, tmp_path, monkeypatch):
    """chat.db holds no length for a voice message: with ``voice_lengths`` the .caf header gives
    it ("[voice message, 0:42]"); without, no attachment file is opened at all."""
    from brb_pipeline.sources import imessage_extras
    from brb_pipeline.sources.caf import write_caf

    root = tmp_path / "Attachments"
    b = make_chatdb()
    sam = b.add_handle("+15550001")
    chat = b.add_chat([sam], style=45, identifier="+15550001", guid="iMessage;-;+15550001")
    spec = rich._file(root, 5, "Audio Message.caf", None, "com.apple.coreaudio-format", 0)
    write_caf(root / spec["filename"][len(A) + 1:], 42.2)
    b.add_message(chat, sam, "\ufffc", ts=T0, columns={"is_audio_message": 1}, files=[spec])
    db = b.close()

    def never(path):
        raise AssertionError("an attachment file was opened without the opt-in")

    with monkeypatch.context() as m:
        m.setattr(imessage_extras, "caf_seconds", never)
        off = read_imessage(db, attachments_dir=root)
    (entry,) = off.messages["extras"][0]
    assert entry["kind"] == "voice" and entry["ref"] is None and off.stats["voice_lengths_read"] == 0
    on = read_imessage(db, attachments_dir=root, voice_lengths=True)
    (entry,) = on.messages["extras"][0]
    assert entry["ref"] == "42" and on.stats["voice_lengths_read"] == 1
    assert render_extras("\ufffc", [entry], {})[0].endswith("[voice message, 0:42]")
    assert render_extras(None, [{**entry, "text": "see you at six"}], {})[0] == "[voice message, 0:42: see you at six]"
