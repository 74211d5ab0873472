"""Encryption at rest, end to end: a copy of an encrypted home reveals no message text, name or
handle; every command works on it; a lost or wrong key is a one-line error that changes nothing;
`brb rekey` rotates the key (and finishes after a kill); `brb delete-all` shreds the key.

One demo archive (with WhatsApp and Mail) built outside both homes, ingested twice by real `brb`
processes (hash embedder): once encrypted (the default), once with `--no-encryption`. The scan of
the plaintext home is the control: it finds every needle, so the scan of the encrypted one could
fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from brb_pipeline.core.faults import REKEY_POINTS
from brb_pipeline_tests.helpers.bytescan import scan, summary
from brb_pipeline_tests.helpers.cli import ENV, brb
from brb_pipeline_tests.helpers.forget import needles as _needles, pick_person as _pick_person


@pytest.fixture(scope="module")
def world(tmp_path_factory, template_homes):
    """Copies of the session's ``all-700`` and ``all-700-enc`` homes: one 700-message archive with
    WhatsApp and Mail (seed 21) ingested plaintext and encrypted (the key copied into ``keys``)."""
    root = tmp_path_factory.mktemp("encryption")
    keydir = root / "keys"
    env = {**ENV, "BRB_ENCRYPTION": "1", "BRB_KEY_DIR": str(keydir)}
    env.pop("BRB_KEY", None)
    plain, archive = template_homes.copy("all-700", root / "plain")
    enc, _ = template_homes.copy("all-700-enc", root / "enc", key_dir=keydir)
    person = _pick_person(plain, archive)
    needles = _needles(archive, person)
    return {"root": root, "archive": archive, "env": env, "keydir": keydir, "plain": plain, "enc": enc,
            "person": person, "needles": needles}


def _search(home: Path, env: dict, query: str, *extra: str) -> dict:
    r = brb("search", query, "--json", "--no-route", *extra, home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def _holds(hits: list[dict], phrase: str) -> bool:
    """Whether a hit's text holds the phrase (spaces as chunks write them)."""
    want = " ".join(phrase.lower().split())[:40]
    return any(want in " ".join(h["text"].lower().split()) for h in hits)


def _digests(home: Path) -> dict[str, str]:
    return {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(home.rglob("*")) if p.is_file()}


def test_the_plaintext_home_shows_every_needle(world):
    found = scan(world["plain"], world["needles"])
    assert {f.needle for f in found} == set(world["needles"]), summary(found)


def test_the_encrypted_home_shows_none(world):
    enc = world["enc"]
    found = scan(enc, world["needles"])
    assert not found, summary(found)
    m = json.loads((enc / "encryption.json").read_text())
    assert m["encrypted"] is True and m["cipher"] == "AES-256-GCM" and "key" not in m
    key_files = list(world["keydir"].glob("data-*.key"))
    assert len(key_files) == 1 and (key_files[0].stat().st_mode & 0o777) == 0o600
    assert not key_files[0].is_relative_to(enc)


def test_search_and_status_work_on_the_encrypted_home(world):
    env, enc, plain = world["env"], world["enc"], world["plain"]
    phrase = world["needles"][-4]
    for mode in ("hybrid", "lexical", "vector"):
        got = _search(enc, env, phrase, "--mode", mode)
        want = _search(plain, env, phrase, "--mode", mode)
        assert [h["chunk_id"] for h in got["hits"]][:3] == [h["chunk_id"] for h in want["hits"]][:3], mode
    assert _holds(_search(enc, env, phrase, "--mode", "lexical")["hits"], phrase)
    r = brb("status", "--json", home=enc, env=env)
    st = json.loads(r.stdout)
    assert st["encryption"]["encrypted"] is True and st["encryption"]["key_ok"] is True
    assert str(world["keydir"]) in st["encryption"]["key_source"]
    assert st["chunks"] > 0 and st["search_ready"]
    assert json.loads(brb("status", "--json", home=plain, env=env).stdout)["encryption"]["encrypted"] is False


def test_search_log_reads_the_encrypted_home(world):
    env, enc = world["env"], world["enc"]
    _search(enc, env, "quiet evening walk")
    r = brb("search-log", "-n", "1", home=enc, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [e["query"] for e in json.loads(r.stdout)] == ["quiet evening walk"]


def test_no_encryption_is_refused_for_an_encrypted_home(world):
    r = brb("ingest", "--no-encryption", "--progress", "none", home=world["enc"], env=world["env"])
    assert r.returncode != 0 and "encrypted" in r.stderr and "Traceback" not in r.stderr


@pytest.fixture
def home(world, tmp_path):
    """A copy of the encrypted home and of its key dir, for tests that change them."""
    from brb_pipeline_tests.helpers.homes import copy_home

    dst = copy_home(world["enc"], tmp_path / "home")
    keydir = shutil.copytree(world["keydir"], tmp_path / "keys")
    env = {**world["env"], "BRB_KEY_DIR": str(keydir)}
    return {"home": dst, "env": env, "key_file": next(keydir.glob("data-*.key"))}


def test_a_missing_key_is_one_line_and_changes_nothing(world, home):
    h, env = home["home"], home["env"]
    saved = home["key_file"].read_bytes()
    home["key_file"].unlink()
    before = _digests(h)
    for args in (("status",), ("status", "--json"), ("search", "movie"), ("ingest", "--progress", "none"),
                 ("forget", "--contact", world["person"]["name"], "--yes"), ("insights",), ("rekey",)):
        r = brb(*args, home=h, env=env)
        assert r.returncode != 0, args
        err = [x for x in r.stderr.strip().splitlines() if "channel ON" not in x]  # ingest's opt-in notices
        assert len(err) == 1 and "Traceback" not in r.stderr, (args, r.stderr[-1500:])
        assert "missing" in err[0] and str(home["key_file"].parent) in err[0], (args, err)
    assert _digests(h) == before  # nothing overwritten, nothing re-created
    home["key_file"].write_bytes(saved)
    assert _search(h, env, "movie")["hits"]


def test_a_wrong_key_is_one_line(home):
    env = {**home["env"], "BRB_KEY": os.urandom(32).hex()}
    for args in (("search", "movie"), ("status",)):  # status exits 2 too, never an empty report
        r = brb(*args, home=home["home"], env=env)
        assert r.returncode == 2 and "not the one" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "messages" not in r.stdout
    r = brb("search", "movie", home=home["home"], env={**home["env"], "BRB_KEY": "abc"})
    assert r.returncode != 0 and "64 hex digits" in r.stderr.replace("(a 256-bit key)", "") or "hex" in r.stderr


def test_rekey_rotates_the_key_and_the_old_one_opens_nothing(world, home):
    h, env = home["home"], home["env"]
    old_key = home["key_file"].read_text().strip()
    old_check = json.loads((h / "encryption.json").read_text())["key_check"]
    r = brb("rekey", home=h, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((h / "encryption.json").read_text())["key_check"] != old_check
    assert home["key_file"].read_text().strip() != old_key
    assert not list(h.rglob("*.rekey")) and not list(home["key_file"].parent.glob("*.next.key"))
    assert _search(h, env, world["needles"][-4], "--mode", "lexical")["hits"]
    r = brb("search", "movie", home=h, env={**env, "BRB_KEY": old_key})
    assert r.returncode != 0 and "not the one" in r.stderr
    assert not scan(h, world["needles"])


@pytest.mark.parametrize("point", REKEY_POINTS)
def test_a_rekey_killed_midway_is_finished_by_the_next(world, home, point):
    h, env = home["home"], home["env"]
    r = brb("rekey", home=h, env={**env, "BRB_FAULT": point})
    assert r.returncode == -9, r.stderr[-2000:]
    r = brb("search", world["needles"][-4], "--json", "--mode", "lexical", home=h, env=env)
    if point == "rekey_staged":  # nothing committed: the home still opens with its old key
        assert r.returncode == 0 and json.loads(r.stdout)["hits"], r.stderr
    else:
        assert r.returncode != 0 and "brb rekey" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = brb("rekey", home=h, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not list(h.rglob("*.rekey"))
    assert _search(h, env, world["needles"][-4], "--mode", "lexical")["hits"]


@pytest.mark.slow  # e2e: forget, re-ingest and a byte scan
def test_forget_and_reingest_on_the_encrypted_home(world, home):
    from brb_pipeline_tests.helpers.pipeline import append_messages as _append_messages

    h, env, person = home["home"], home["env"], world["person"]
    phrase = world["needles"][-4]
    assert _holds(_search(h, env, phrase, "--mode", "lexical")["hits"], phrase)
    r = brb("forget", "--contact", person["name"], "--yes", home=h, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not _holds(_search(h, env, phrase, "--mode", "lexical")["hits"], phrase)
    # incremental re-ingest of new messages, into a copy of the archive (the module's stays as it was)
    archive = world["archive"]
    src = h.parent / "archive"
    shutil.copytree(archive.chat_db.parent, src)
    chat_db = src / archive.chat_db.name
    import sqlite3

    con = sqlite3.connect(chat_db)
    guid = con.execute("SELECT c.guid FROM chat c JOIN chat_handle_join j ON j.chat_id = c.ROWID "
                       "JOIN handle hd ON hd.ROWID = j.handle_id WHERE hd.id NOT IN (%s) AND c.style = 45 LIMIT 1"
                       % ",".join("?" * len(person["handles"])), person["handles"]).fetchone()[0]
    con.close()
    new = ["the quokka sanctuary tour on rottnest island"] * 4
    _append_messages(chat_db, guid, new, datetime(2019, 2, 1, 9, tzinfo=timezone.utc))
    r = brb("ingest", "--chat-db", str(chat_db), "--progress", "none", home=h, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _holds(_search(h, env, "quokka sanctuary", "--mode", "lexical")["hits"], "quokka sanctuary")
    assert not scan(h, world["needles"] + ["quokka sanctuary"])


def test_delete_all_shreds_the_key_so_an_old_backup_cannot_be_read(world, home, tmp_path):
    h, env = home["home"], home["env"]
    backup = shutil.copytree(h, tmp_path / "backup")
    r = brb("delete-all", "--yes", home=h, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not home["key_file"].exists() and not list(home["key_file"].parent.iterdir())
    shutil.rmtree(h)
    shutil.copytree(backup, h)  # the backup put back where it was, on the same machine
    r = brb("search", "movie", home=h, env=env)
    assert r.returncode != 0 and "missing" in r.stderr, r.stderr
    assert not scan(h, world["needles"])
