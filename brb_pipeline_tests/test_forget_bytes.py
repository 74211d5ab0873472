"""`brb forget` and `brb delete-all` checked on bytes: every file under the home, raw and through
its own reader (SQLite, DuckDB, Parquet), for a forgotten person's phrases, name and handles.

One demo archive, one home, real `brb` subprocesses (hash embedder). The person has a direct
chat and writes in group chats, so their lines must go from shared conversations too. The scan
is shown to work first: before `forget` it finds the person everywhere, and plain deletes (no
secure_delete, no VACUUM, no store rewrite) leave them in the bytes where readers no longer see
them.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline_tests.helpers.bytescan import scan, summary
from brb_pipeline_tests.helpers.cli import ENV, brb
from brb_pipeline_tests.helpers.forget import needles as _needles
from brb_pipeline_tests.helpers.forget import pick_person as _pick_person
from brb_pipeline_tests.helpers.homes import copy_home


@pytest.fixture(scope="module")
def world(tmp_path_factory, template_homes):
    """An ingested home, the person to forget, what to look for, and copies of the stores."""
    root = tmp_path_factory.mktemp("forget_bytes")
    template, archive = template_homes.get("imessage-700")  # 700 messages, seed 21, `brb ingest`
    env = {**ENV, "BRB_KEY_DIR": str(root / "keys")}
    home = copy_home(template, root / "home")
    person = _pick_person(home, archive)
    needles = _needles(archive, person)
    before = root / "before"  # brb.db and brb.duckdb as they were, for the plain-delete checks
    before.mkdir()
    for name in ("brb.db", "brb.db-wal", "brb.duckdb"):
        if (home / name).exists():
            shutil.copyfile(home / name, before / name)
    return {"root": root, "archive": archive, "env": env, "home": home, "person": person,
            "needles": needles, "before": before}


def test_the_scan_finds_the_person_before_forget(world):
    found = scan(world["home"], world["needles"])
    files = {f.path.split("/")[0] for f in found}
    # everywhere brb keeps data: both stores, staging, the snapshot
    assert {"brb.db", "brb.duckdb", "staging", "snapshot"} <= files, summary(found)
    # each kind of needle is found: name, a handle, a direct-chat phrase, a group-chat line
    needles = world["needles"]
    assert {needles[0], needles[1], needles[-4], needles[-1]} <= {f.needle for f in found}, summary(found)
    # the 3-D map packs its points (gzip): only its reader shows the person there
    packed = {f.needle for f in found if f.path.endswith("map_3d.html") and f.where == "html:points"}
    assert needles[0] in packed, summary(found)


def test_plain_deletes_leave_the_person_in_the_bytes(world, tmp_path):
    """What `forget` must do more than delete: a plain DELETE leaves the rows in the files, where
    only the raw-bytes scan sees them (this is the scan failing on purpose)."""
    from brb_pipeline.core.store import duck

    for name in ("brb.db", "brb.db-wal", "brb.duckdb"):
        if (world["before"] / name).exists():
            shutil.copyfile(world["before"] / name, tmp_path / name)
    person, needles = world["person"], world["needles"]
    con = duck.connect(tmp_path / "brb.duckdb")
    # their chunks and every chunk quoting them (their lines and name in group chats)
    con.execute("DELETE FROM chunks WHERE contact_id = ? OR list_bool_or([contains(lower(content), lower(n)) "
                "FOR n IN ?::VARCHAR[]]) OR list_bool_or([contains(lower(embedding_text), lower(n)) FOR n IN ?::VARCHAR[]])", [person["contact_id"], needles, needles])
    con.execute("CHECKPOINT")
    con.close()
    db = sqlite3.connect(tmp_path / "brb.db")
    db.execute("PRAGMA secure_delete = OFF")
    db.execute("DELETE FROM contacts WHERE display_name LIKE ? OR handles_json LIKE ?",
               (f"%{person['name']}%", f"%{person['handles'][0]}%"))
    db.execute("DELETE FROM members WHERE person_id = ?", (person["contact_id"],))  # a person's id is their contact's
    db.execute("DELETE FROM people WHERE person_id = ?", (person["contact_id"],))
    db.execute("DELETE FROM clusters")
    db.execute("DELETE FROM search_log") if db.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'search_log'").fetchone() else None
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    found = scan(tmp_path, needles)
    readers = [f for f in found if f.where != "bytes"]
    raw = {f.path for f in found if f.where == "bytes"}
    # the readers see nothing of the person any more ...
    assert not [f for f in readers if f.path in ("brb.duckdb", "brb.db")], summary(readers)
    # ... but the bytes still hold them: deleted DuckDB rows and SQLite free pages
    assert {"brb.duckdb", "brb.db"} <= raw, summary(found)


@pytest.mark.slow  # e2e: forget, re-ingest, delete and byte scans
def test_forget_reingest_and_delete_all_leave_no_trace(world):
    home, env, person, needles = world["home"], world["env"], world["person"], world["needles"]
    archive = world["archive"]
    (home / "brb.duckdb.lines").write_bytes(b"line vectors kept from an unfinished run")  # anyone's chunk ids
    r = brb("forget", "--contact", person["name"], "--yes", home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not (home / "brb.duckdb.lines").exists()
    assert not (home / ".forget-salt").exists()
    keys = list(Path(env["BRB_KEY_DIR"]).iterdir())
    assert len(keys) == 1 and oct(keys[0].stat().st_mode & 0o777) == "0o600"
    found = scan(home, needles)
    assert not found, "after forget:\n" + summary(found)

    # the next ingestion copies chat.db and the AddressBook again: the copy is scrubbed (the
    # insights are left out to keep the test short: their inputs, the chunks, are scanned)
    r = brb("ingest", "--chat-db", str(archive.chat_db), "--addressbook", str(archive.addressbook_dir),
            "--progress", "none", "--no-insights", home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    found = scan(home, needles)
    assert not found, "after a re-ingest:\n" + summary(found)
    # ... and the others are all still there
    con = sqlite3.connect(home / "brb.db")
    names = [n for (n,) in con.execute("SELECT display_name FROM contacts")]
    con.close()
    assert len(names) > 10 and person["name"] not in names
    r = brb("search", "the", "--json", home=home, env=env)
    assert r.returncode == 0 and '"hits"' in r.stdout, r.stderr[-2000:]

    r = brb("delete-all", "--yes", home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert scan(home, needles) == []
    assert not home.exists() or list(home.iterdir()) == []
    assert list(Path(env["BRB_KEY_DIR"]).iterdir()) == []  # the key is shredded with the home
    assert archive.chat_db.exists()  # the source is never touched
    os.sync()


def _legacy_home(tmp_path, monkeypatch, handle: str):
    """A home forgotten before the keyed hash: a salted sha256 digest and the salt beside it."""
    import hashlib

    from brb_pipeline.core import metadata
    from brb_pipeline.privacy.forgotten import FORGOTTEN_DDL
    from brb_pipeline.config.settings import Settings

    monkeypatch.setenv("BRB_KEY_DIR", str(tmp_path / "keys"))
    s = Settings(home=tmp_path / "home")
    s.home.mkdir()
    salt = os.urandom(16)
    (s.home / ".forget-salt").write_bytes(salt)
    with metadata.connect(s.brb_db) as c:
        c.execute(FORGOTTEN_DDL)
        c.execute("INSERT INTO forgotten VALUES ('handle', ?)", (hashlib.sha256(salt + handle.encode()).hexdigest(),))
    return s


def test_a_salted_home_is_rekeyed_when_the_handle_is_seen_again(tmp_path, monkeypatch):
    from brb_pipeline.privacy.forgotten import forgotten_rules, migrate_legacy

    s = _legacy_home(tmp_path, monkeypatch, "+16175550000")
    rules = forgotten_rules(s)
    assert rules.is_handle("+16175550000") and not rules.is_handle("+16175550001")  # still read with the salt
    assert migrate_legacy(s, rules, {"+16175550000", "+16175550001"}, set()) == 1
    assert not (s.home / ".forget-salt").exists()  # no salted digest left: the salt goes
    con = sqlite3.connect(s.brb_db)
    digests = [d for (k, d) in con.execute("SELECT kind, digest FROM forgotten") if k == "handle"]
    con.close()
    assert len(digests) == 1 and digests[0].startswith("hmac:")
    assert forgotten_rules(s).is_handle("+16175550000")  # read with the key from now on


def test_a_lost_key_is_an_error_not_a_silent_resurrection(tmp_path, monkeypatch):
    from brb_pipeline.core.errors import BrbError
    from brb_pipeline.privacy.forgotten import forgotten_rules, key_file, migrate_legacy

    s = _legacy_home(tmp_path, monkeypatch, "+16175550000")
    migrate_legacy(s, forgotten_rules(s), {"+16175550000"}, set())
    con = sqlite3.connect(s.brb_db)
    (key_id,) = con.execute("SELECT digest FROM forgotten WHERE kind = 'keyid'").fetchone()  # the key's name
    con.close()
    key_file(s, key_id).unlink()
    with pytest.raises(BrbError, match="forget key .* is missing"):
        forgotten_rules(s)
    key_file(s, key_id).write_text(os.urandom(32).hex())  # another key: its check digest does not match
    with pytest.raises(BrbError, match="not the one it was made with"):
        forgotten_rules(s)


@pytest.fixture(scope="module")
def mail_world(tmp_path_factory):
    """A home ingested with Mail on, and the partner of the demo's kayak thread (a direct mail
    thread; they are also a recipient in the book-club group thread, where they never write)."""
    from brb_pipeline.config.settings import Settings

    root = tmp_path_factory.mktemp("forget_mail")
    archive = build_demo_archive(root / "archive", messages=300, seed=5, mail=True)
    env = {**ENV, "BRB_KEY_DIR": str(root / "keys")}
    home = root / "home"
    args = ("--chat-db", str(archive.chat_db), "--addressbook", str(archive.addressbook_dir),
            "--mail", str(archive.mail_dir), "--progress", "none")
    r = brb("ingest", *args, home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    msgs = pl.read_parquet(Settings(home=home).paths.messages)
    (cid,) = msgs.filter(pl.col("chat_id") == "mail:1")["contact_id"].unique().to_list()
    con = sqlite3.connect(home / "brb.db")
    name, handles = con.execute("SELECT display_name, handles_json FROM contacts WHERE contact_id = ?", (cid,)).fetchone()
    con.close()
    return {"archive": archive, "env": env, "home": home, "args": args, "name": name,
            "handles": sorted(json.loads(handles))}


@pytest.mark.slow  # e2e: a Mail ingest, forget and a byte scan
def test_forget_removes_a_mail_partner_from_the_mail_copy_too(mail_world):
    from brb_pipeline.demo.mail_writer import MAIL_ONLY_PHRASE

    home, env, args = mail_world["home"], mail_world["env"], mail_world["args"]
    # their phrases: the base64 body of the first message and the HTML body of their reply
    needles = [mail_world["name"], *mail_world["handles"], MAIL_ONLY_PHRASE, "see you at the dock"]
    found = scan(home, needles)
    in_mail = {(f.needle, f.where) for f in found if f.path.startswith("snapshot/Mail/")}
    index = "snapshot/Mail/V10/MailData/Envelope Index"
    assert {(MAIL_ONLY_PHRASE, "emlx:body"), ("see you at the dock", "emlx:body"),
            (mail_world["name"], "emlx:header")} <= in_mail, summary(found)
    assert {f.needle for f in found if f.path == index} >= {mail_world["name"], *mail_world["handles"]}, summary(found)
    # the group thread they only received mail in names them in its kept messages' headers
    group = [f for f in found if f.path.startswith("snapshot/Mail/") and f.path.endswith(("/6.emlx", "/7.emlx"))]
    assert {f.needle for f in group} >= {mail_world["name"], mail_world["handles"][0]}, summary(found)

    r = brb("forget", "--contact", mail_world["name"], "--yes", home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    found = scan(home, needles)
    assert not found, "after forget:\n" + summary(found)
    # the next ingestion copies Mail again: the index and the bodies are scrubbed
    r = brb("ingest", *args, "--no-insights", home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (home / index).exists()
    found = scan(home, needles)
    assert not found, "after a re-ingest:\n" + summary(found)
    # what others wrote stays: the group thread's reply is read from its rewritten body
    kept = scan(home / "snapshot" / "Mail", ["I vote for The Overstory", "Ideas for next month"])
    assert {f.needle for f in kept if f.where == "emlx:body"} == {"I vote for The Overstory", "Ideas for next month"}
    r = brb("search", "Overstory", "--channel", "mail", "--mode", "lexical", "--json", home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    hits = json.loads(r.stdout)["hits"]
    assert hits and hits[0]["chat_id"] == "mail:3" and "I vote for The Overstory" in hits[0]["text"]
