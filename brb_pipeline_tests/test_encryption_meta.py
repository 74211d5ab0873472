"""Encryption at rest for brb.db and the snapshot: brb.db is a sealed SQLite image (every metadata
function works on it, writers in two processes both land, a killed writer leaves the previous file,
a wrong key is one line), and the snapshot's copies and Mail bodies are sealed, parse the same as
plain copies, and are scrubbed of forgotten people in memory."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from brb_pipeline.core import metadata
from brb_pipeline.core.crypto import files
from brb_pipeline.core.crypto.sealed import MAGIC
from brb_pipeline.core.errors import EncryptionKeyError
from brb_pipeline.core.records.handles import normalize_handle
from brb_pipeline.core.search.log import clear_log, log_search, read_log
from brb_pipeline.stages import ingest
from brb_pipeline.keys import provider as keys
from brb_pipeline.privacy.forgotten import remember
from brb_pipeline.privacy.forget import forget_contacts
from brb_pipeline.config.settings import Settings
from brb_pipeline.sources.addressbook import read_addressbook

NAME, HANDLE, OTHER = "Zebediah Quillfeather", "+15550199876", "+15550100002"
QUERY = "the marmalade contract"


def _home(tmp_path: Path, monkeypatch, encrypted: bool, name: str = "home", **kw) -> Settings:
    """A home, encrypted or plaintext, prepared before anything is written."""
    monkeypatch.setenv("BRB_ENCRYPTION", "1" if encrypted else "0")
    monkeypatch.setenv("BRB_KEY_DIR", str(tmp_path / "keys"))
    s = Settings(home=tmp_path / name, embedding_model="hash", **kw)
    keys.prepare_home(s)
    return s


def _contacts() -> pl.DataFrame:
    ts = datetime(2024, 5, 1, tzinfo=UTC)
    return pl.DataFrame({
        "contact_id": ["c:1", "c:2"], "display_name": [NAME, "Ann Other"], "name_source": ["addressbook"] * 2,
        "kind": ["direct"] * 2, "channels": [["imessage"]] * 2, "handles": [[HANDLE], [OTHER]],
        "batch": ["b1", "b2"], "rank": [1, 2], "messages": [5, 3], "sent": [2, 1], "received": [3, 2],
        "first_ts": [ts, ts], "last_ts": [ts, ts], "avg_response_s_me": [1.5, None], "avg_response_s_them": [None, 2.0],
    })


def _raw(db: Path) -> bytes:
    """Every byte brb.db keeps on disk (the file and, in a plaintext home, its WAL)."""
    return b"".join(p.read_bytes() for p in (db, db.with_name(db.name + "-wal")) if p.exists())


@pytest.mark.parametrize("encrypted", [True, False])
def test_brb_db_is_sealed_and_every_metadata_function_works(tmp_path, monkeypatch, encrypted):
    s = _home(tmp_path, monkeypatch, encrypted)
    db = s.brb_db
    run = metadata.start_run(db, "snap")
    metadata.set_run_warnings(db, run, [{"check": "x"}])
    metadata.update_run_stats(db, run, messages=8, first_ts="a", last_ts="b", stats={"memory": 3})
    metadata.finish_run(db, run, status="success", timings={"parse": 1.0}, stats={"memory": 4})
    assert metadata.last_run(db)["status"] == "success" and metadata.last_run_stat(db, "memory") == 4
    assert metadata.settle_dead_runs(db) == []
    metadata.replace_contacts(db, _contacts())
    rows = metadata.contact_rows(db)
    assert [(r["display_name"], r["handles"]) for r in rows] == [(NAME, [HANDLE]), ("Ann Other", [OTHER])]
    assert metadata.read_contacts(db).height == 2
    batches = pl.DataFrame({"batch": ["b1", "b2"], "contacts": [1, 1], "messages": [5, 3], "fingerprint": ["f1", "f2"]})
    assert metadata.sync_batches(db, batches)["changed"] == ["b1", "b2"]
    metadata.mark_embedded(db, "b1", "f1", "hash", 4)
    metadata.mark_loaded(db, {"b1": "f1"})
    assert metadata.get_batch(db, "b1")["loaded_fingerprint"] == "f1"
    metadata.reset_embedded(db, ["b2"])
    assert [b["batch"] for b in metadata.all_batches(db)] == ["b1", "b2"]
    assert metadata.sync_batches(db, batches)["changed"] == ["b2"]  # b1 was embedded from f1
    metadata.replace_clusters(db, pl.DataFrame({"cluster_id": [0], "label": ["label words"], "size": [3]}))
    assert metadata.count_clusters(db) == 1
    log_search(db, query=QUERY, mode="hybrid", model=None, contact_ids=["c:1"], latency_ms=2.0)
    assert read_log(db)[0]["query"] == QUERY

    raw = _raw(db)
    needles = [NAME.encode(), HANDLE.encode(), QUERY.encode(), b"label words"]
    if encrypted:
        assert raw.startswith(MAGIC) and not [n for n in needles if n in raw]
        assert not db.with_name("brb.db-wal").exists()
    else:  # the control: the same scan finds them in a plaintext home
        assert not raw.startswith(MAGIC) and all(n in raw for n in needles)
        assert not db.with_name("brb.db.lock").exists()
    assert clear_log(db) == 1 and read_log(db) == []
    assert (QUERY.encode() in _raw(db)) is False


def test_a_read_leaves_the_sealed_file_as_it_was(tmp_path, monkeypatch):
    """Only a change writes: a read keeps the same bytes (same nonce), a write makes new ones."""
    s = _home(tmp_path, monkeypatch, True)
    metadata.replace_contacts(s.brb_db, _contacts())
    before = s.brb_db.read_bytes()
    metadata.contact_rows(s.brb_db)
    read_log(s.brb_db)  # creates the search log table: a change
    after_log = s.brb_db.read_bytes()
    assert after_log != before
    metadata.contact_rows(s.brb_db)
    read_log(s.brb_db)
    assert s.brb_db.read_bytes() == after_log


def _start_runs(db: str, n: int) -> None:
    for _ in range(n):
        metadata.start_run(Path(db))
        log_search(Path(db), query="q", mode="lexical", model=None, latency_ms=1.0)


def test_writers_in_two_processes_both_land(tmp_path, monkeypatch):
    s = _home(tmp_path, monkeypatch, True)
    metadata.replace_contacts(s.brb_db, _contacts())
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_start_runs, args=(str(s.brb_db), 25)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with metadata.connect(s.brb_db) as c:
        assert c.execute("SELECT count(*) FROM ingestion_runs").fetchone()[0] == 50  # no lost update
    assert len(read_log(s.brb_db, limit=100)) == 50
    assert len(metadata.contact_rows(s.brb_db)) == 2


def _write_then_hang(db: str, ready) -> None:
    with metadata.connect(Path(db)) as c:
        c.execute("DELETE FROM contacts")
        c.execute("INSERT INTO ingestion_runs (run_id, started_at, status) VALUES ('doomed', 0, 'running')")
        ready.set()
        time.sleep(600)


def test_a_killed_writer_leaves_the_previous_brb_db(tmp_path, monkeypatch):
    s = _home(tmp_path, monkeypatch, True)
    metadata.replace_contacts(s.brb_db, _contacts())
    before = s.brb_db.read_bytes()
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    child = ctx.Process(target=_write_then_hang, args=(str(s.brb_db), ready))
    child.start()
    assert ready.wait(60)
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    assert s.brb_db.read_bytes() == before
    t0 = time.perf_counter()
    assert len(metadata.contact_rows(s.brb_db)) == 2  # readable, and the lock died with the writer
    assert time.perf_counter() - t0 < 5
    assert metadata.last_run(s.brb_db) is None


def test_a_brb_db_sealed_with_another_key_is_one_line_and_kept(tmp_path, monkeypatch):
    a = _home(tmp_path, monkeypatch, True, "a")
    metadata.replace_contacts(a.brb_db, _contacts())
    b = _home(tmp_path, monkeypatch, True, "b")  # another home: another key
    b.brb_db.write_bytes(a.brb_db.read_bytes())
    for call in (lambda: metadata.contact_rows(b.brb_db), lambda: read_log(b.brb_db),
                 lambda: log_search(b.brb_db, query="q", mode="lexical", model=None, latency_ms=1.0)):
        with pytest.raises(EncryptionKeyError) as e:
            call()
        assert "\n" not in str(e.value) and "cannot be decrypted" in str(e.value)
    assert b.brb_db.read_bytes() == a.brb_db.read_bytes()  # nothing overwritten


def test_forget_on_a_sealed_brb_db(tmp_path, monkeypatch):
    s = _home(tmp_path, monkeypatch, True)
    metadata.replace_contacts(s.brb_db, _contacts())
    log_search(s.brb_db, query=QUERY, mode="hybrid", model=None, contact_ids=["c:1"], latency_ms=2.0)
    log_search(s.brb_db, query="kept query", mode="hybrid", model=None, contact_ids=["c:2"], latency_ms=2.0)
    report = forget_contacts(s, ["c:1"])
    assert report["brb_db_contacts"] == 1 and report["search_log"] == 1
    assert [r["contact_id"] for r in metadata.contact_rows(s.brb_db)] == ["c:2"]
    assert [r["query"] for r in read_log(s.brb_db)] == ["kept query"]
    image = files.read_bytes(s.brb_db)  # the plaintext image: no free page keeps their row
    assert NAME.encode() not in image and QUERY.encode() not in image and b"kept query" in image


# -- the snapshot --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    from brb_pipeline.demo.generate import build_demo_archive

    return build_demo_archive(tmp_path_factory.mktemp("demo_mail"), messages=600, seed=7, whatsapp=True, mail=True)


def _sources(archive) -> dict:
    return dict(chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir, whatsapp_db=archive.whatsapp_db,
                whatsapp_enabled=True, mail_dir=archive.mail_dir, mail_enabled=True)


def _found(root: Path, needles: set[str]) -> dict[str, set[str]]:
    """Needle -> the files (relative to ``root``) whose raw bytes hold it."""
    hits: dict[str, set[str]] = {}
    for p in root.rglob("*"):
        if p.is_file():
            raw = p.read_bytes()
            for n in needles:
                if n.encode() in raw:
                    hits.setdefault(n, set()).add(str(p.relative_to(root)))
    return hits


def _memory_db(s: Settings, path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    con.deserialize(ingest.snapshot_io(s).read(path))
    return con


def test_sealed_snapshot_holds_no_plaintext_and_parses_the_same(tmp_path, monkeypatch, archive):
    plain = _home(tmp_path, monkeypatch, False, "plain", **_sources(archive))
    ingest.run_snapshot(plain)
    ingest.run_parse(plain)
    ingest.run_contacts(plain)
    sealed = _home(tmp_path, monkeypatch, True, "sealed", **_sources(archive))
    ingest.run_snapshot(sealed)
    ingest.run_parse(sealed)
    ingest.run_contacts(sealed)

    parsed = files.read_parquet(plain.paths.parsed_messages)
    assert parsed["channel"].unique().sort().to_list() == ["imessage", "mail", "whatsapp"]
    assert files.read_parquet(sealed.paths.parsed_messages).equals(parsed)
    assert files.read_parquet(sealed.paths.parsed_chats).equals(files.read_parquet(plain.paths.parsed_chats))
    assert metadata.read_contacts(sealed.brb_db).equals(metadata.read_contacts(plain.brb_db))  # AddressBook names too

    texts = parsed.filter(pl.col("text").str.len_chars() > 25)["text"].unique().sort().to_list()[:40]
    people = read_addressbook(archive.addressbook_dir).people
    needles = set(texts) | {p.display_name for p in people} | set(parsed["sender"].drop_nulls().unique().to_list())
    control = _found(plain.snapshot_dir, needles)
    assert len(control) > 30 and any("emlx" in f for fs in control.values() for f in fs)  # the scan can fail
    assert _found(sealed.snapshot_dir, needles) == {}
    for p in sealed.snapshot_dir.rglob("*"):
        if p.is_file() and p.name != "manifest.json":
            assert files.sealed(p), p.relative_to(sealed.snapshot_dir)
    assert len(list(sealed.snapshot_dir.rglob("*.emlx"))) == len(list(plain.snapshot_dir.rglob("*.emlx"))) > 0


def test_forgotten_person_is_scrubbed_from_sealed_copies(tmp_path, monkeypatch, archive):
    s = _home(tmp_path, monkeypatch, True, **_sources(archive))
    ingest.run_snapshot(s)
    ingest.run_parse(s)
    parsed = files.read_parquet(s.paths.parsed_messages)
    address = parsed.filter(pl.col("channel") == "mail")["sender"].drop_nulls()[0]  # also an iMessage handle
    snap = s.snapshot_dir
    assert address in {h for (h,) in _memory_db(s, snap / "chat.db").execute("SELECT id FROM handle")}
    phone = next(p.phones[0] for p in read_addressbook(archive.addressbook_dir).people if p.phones)  # as typed
    stores = list(snap.glob("AddressBook/**/*.abcddb"))
    assert any(phone.encode() in _memory_db(s, ab).serialize() for ab in stores)
    with metadata.connect(s.brb_db) as c:
        remember(s, c, [address, normalize_handle(phone, s.default_region)], [])
    ingest.run_snapshot(s)  # a new snapshot, scrubbed in memory

    chat = _memory_db(s, snap / "chat.db")
    assert address not in {h for (h,) in chat.execute("SELECT id FROM handle")}
    mail = _memory_db(s, next(snap.glob("Mail/*/MailData/Envelope Index")))
    assert address.lower() not in {a.lower() for (a,) in mail.execute("SELECT address FROM addresses")}
    for ab in stores:
        assert phone.encode() not in _memory_db(s, ab).serialize()  # their card, and no free page keeps it
    bodies = [ingest.snapshot_io(s).read(p) for p in snap.rglob("*.emlx")]
    assert bodies and not [b for b in bodies if address.lower().encode() in b.lower()]
    ingest.run_parse(s)
    again = files.read_parquet(s.paths.parsed_messages)
    assert 0 < again.height < parsed.height and address not in again["sender"].drop_nulls().to_list()
    assert all(files.sealed(p) for p in snap.rglob("*") if p.is_file() and p.name != "manifest.json")
