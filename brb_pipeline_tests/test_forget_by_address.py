"""`--contact` with an exact address, and the forget key of a moved home (issue 33).

A Mail-only home (real ingest: Dagster, SQLite, DuckDB; hash embedder) where Kwame writes alone
and in a thread with Marta: the thread, named by its members' addresses, is a conversation and
never a person, so ``--contact kwame.mensah@example.com`` is Kwame. Then the home moves to
another folder: its forget key is found by the id kept in its brb.db, not by its old path; a
home keyed by its path (before that id) is re-keyed on first use and moves as well.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import timedelta

import polars as pl
import pytest

from brb_pipeline.core.contacts.lookup import find_contacts
from brb_pipeline.core.embedding.models import HashEmbedder
from brb_pipeline.core.errors import BrbError
from brb_pipeline.demo.mail_writer import MailRecord, rfc822, write_mail_store
from brb_pipeline.privacy.forgotten import forgotten_rules, key_file
from brb_pipeline.keys.keystore import home_path_id
from brb_pipeline.orchestration.runner import run_ingest
from brb_pipeline.config.settings import Settings

from brb_pipeline_tests.helpers import T0
from brb_pipeline_tests.helpers.cli import cli

ME = ("Me", "me@icloud.com")
KWAME = ("Kwame Mensah", "kwame.mensah@example.com")
MARTA = ("", "marta.kowalski@example.org")
BOATENG = ("Kwame Boateng", "k.boateng@example.net")
H = timedelta(hours=9)


def _records() -> list[MailRecord]:
    def mail(thread, box, sender, to, subject, i, body, **kw):
        return MailRecord(thread, box, sender, to, subject, T0 + i * H,
                          rfc822(sender, to, ("Re: " if kw.get("reply") else "") + subject, T0 + i * H, body), **kw)

    return [
        mail(1, "INBOX", KWAME, [ME], "Flat viewing", 0, "The viewing of the flat on Elm Street is at noon."),
        mail(1, "Sent Messages", ME, [KWAME], "Flat viewing", 1, "Noon works, I'll bring the deposit cheque.", reply=True),
        mail(2, "INBOX", KWAME, [ME, MARTA], "Choir rota", 2, "Marta and I swap the choir rota next week."),
        mail(2, "INBOX", MARTA, [ME, KWAME], "Choir rota", 3, "Fine by me, the rota swap is agreed.", reply=True),
        mail(3, "INBOX", MARTA, [ME], "Seeds", 4, "The tomato seeds arrived, shall I keep half for you?"),
        mail(4, "INBOX", BOATENG, [ME], "Invoice", 5, "Your bicycle repair invoice is attached as promised."),
        # the owner is known by their Sent mail: some stays whoever is forgotten
        mail(3, "Sent Messages", ME, [MARTA], "Seeds", 6, "Yes please, half of the seeds would be lovely.", reply=True),
        mail(4, "Sent Messages", ME, [BOATENG], "Invoice", 7, "Thanks, the invoice is paid today.", reply=True),
    ]


def _ingest(s: Settings) -> None:
    run_ingest(s, embedder=HashEmbedder(), analyze=False)


@pytest.fixture()
def home(tmp_path, monkeypatch) -> Settings:
    monkeypatch.setenv("BRB_KEY_DIR", str(tmp_path / "keys"))
    write_mail_store(tmp_path / "Mail", _records())
    s = Settings(home=tmp_path / "home", imessage_enabled=False, mail_dir=tmp_path / "Mail", mail_enabled=True,
                 embedding_model="hash", encryption=False)
    _ingest(s)
    return s


def _contacts(s: Settings) -> dict[str, dict]:
    con = sqlite3.connect(s.brb_db)
    rows = con.execute("SELECT contact_id, display_name, kind, handles_json FROM contacts").fetchall()
    con.close()
    return {cid: {"name": n, "kind": k, "handles": json.loads(h)} for cid, n, k, h in rows}


def _senders(s: Settings) -> set[str]:
    return set(pl.read_parquet(s.paths.messages)["sender"].drop_nulls())


def test_an_exact_address_is_that_person_and_a_thread_never_is(home):
    contacts = _contacts(home)
    group = next(c for c in contacts.values() if c["kind"] == "group")
    assert KWAME[1] in group["handles"] and KWAME[1] in group["name"]  # the thread named by its addresses
    (kwame,) = find_contacts(home.brb_db, [KWAME[1]])
    assert contacts[kwame]["name"] == "Kwame Mensah" and contacts[kwame]["kind"] != "group"
    (marta,) = find_contacts(home.brb_db, ["Marta.Kowalski@Example.org"])  # normalized like the handle
    assert contacts[marta]["kind"] != "group" and marta != kwame
    with pytest.raises(BrbError) as e:  # ambiguity lists the people only
        find_contacts(home.brb_db, ["Kwame"])
    assert "matches 2 people (Kwame Boateng, Kwame Mensah...)" in str(e.value) and "&" not in str(e.value)
    # the thread is still found by its id, and by its whole name when no person has that name
    gid = next(cid for cid, c in contacts.items() if c["kind"] == "group")
    assert find_contacts(home.brb_db, [gid]) == find_contacts(home.brb_db, [group["name"]]) == [gid]

    r = cli("search", "choir rota", "--contact", KWAME[1], "--mode", "lexical", "--json", home=home.home)
    assert r.exit_code == 0, r.stderr
    r = cli("forget", "--contact", KWAME[1], "--yes", home=home.home)
    assert r.exit_code == 0, r.stderr
    assert KWAME[1] not in _senders(home) and MARTA[1] in _senders(home)


def test_a_moved_home_keeps_its_forget_key(home, tmp_path):
    assert cli("forget", "--contact", KWAME[1], "--yes", home=home.home).exit_code == 0
    assert not key_file(home).exists()  # not kept under the home's path any more
    moved = Settings(home=tmp_path / "elsewhere" / "home", imessage_enabled=False, mail_dir=home.mail_dir,
                     mail_enabled=True, embedding_model="hash", encryption=False)
    moved.home.parent.mkdir()
    shutil.move(home.home, moved.home)
    assert forgotten_rules(moved).is_handle(KWAME[1])  # the key is found: Kwame stays forgotten
    r = cli("forget", "--contact", "marta.kowalski@example.org", "--yes", home=moved.home)
    assert r.exit_code == 0, r.stderr
    _ingest(moved)  # a re-ingest of the moved home brings neither back
    assert not _senders(moved) & {KWAME[1], MARTA[1]} and BOATENG[1] in _senders(moved)


def test_a_home_keyed_by_its_path_is_rekeyed_on_first_use(home, tmp_path):
    assert cli("forget", "--contact", KWAME[1], "--yes", home=home.home).exit_code == 0
    # make it a home from before the id: the key under the home's path, no id in brb.db
    con = sqlite3.connect(home.brb_db)
    (kid,) = con.execute("SELECT digest FROM forgotten WHERE kind = 'keyid'").fetchone()
    con.execute("DELETE FROM forgotten WHERE kind = 'keyid'")
    con.commit()
    con.close()
    key_file(home, kid).rename(key_file(home))
    assert key_file(home).name == f"forget-{home_path_id(home.home)}.key"
    _ingest(home)  # first use: still works, and files the key under a new id
    assert KWAME[1] not in _senders(home)
    con = sqlite3.connect(home.brb_db)
    (new_id,) = con.execute("SELECT digest FROM forgotten WHERE kind = 'keyid'").fetchone()
    con.close()
    assert new_id != kid and key_file(home, new_id).exists()
    moved = tmp_path / "restored"
    shutil.copytree(home.home, moved)  # a restored copy
    r = cli("forget", "--contact", BOATENG[1], "--yes", home=moved)
    assert r.exit_code == 0, r.stderr
    assert forgotten_rules(Settings(home=moved)).is_handle(KWAME[1])
    # delete-all shreds the key under its id and the old path-named copy
    assert cli("delete-all", "--yes", home=home.home).exit_code == 0
    assert not key_file(home).exists() and not key_file(home, new_id).exists()
