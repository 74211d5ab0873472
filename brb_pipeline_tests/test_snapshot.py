"""take_snapshot / source_fingerprint on real SQLite sources in tmp dirs."""

from __future__ import annotations

import os
import sqlite3
import stat
from datetime import timedelta
from pathlib import Path

import pytest

from brb_pipeline.core.errors import DatabaseLockedError, NotADatabaseError, SourceMissingError
from brb_pipeline.demo.addressbook_writer import PersonRecord, write_addressbook
from brb_pipeline.demo.chatdb_writer import ChatDbBuilder
from brb_pipeline.sources.imessage import read_imessage
from brb_pipeline.sources.snapshot import SNAPSHOT_DIRNAME, source_fingerprint, take_snapshot
from brb_pipeline_tests.helpers import T0

SOURCE_UUID = "0F0E2C7A-1111-4A4A-9C9C-5D5D5D5D5D5D"


def _chatdb(path: Path, texts: list[str], **kwargs) -> ChatDbBuilder:
    b = ChatDbBuilder(path, **kwargs)
    h = b.add_handle("+15550102233")
    c = b.add_chat([h])
    for i, t in enumerate(texts):
        b.add_message(c, h, t, ts=T0 + timedelta(seconds=i))
    return b


def _addressbook(root: Path) -> None:
    write_addressbook(root / "AddressBook-v22.abcddb", [PersonRecord("Ayşe", "Yılmaz", phones=["+90 532 123 45 67"])])
    write_addressbook(
        root / "Sources" / SOURCE_UUID / "AddressBook-v22.abcddb",
        [PersonRecord("Sam", "Lee", phones=["(555) 010-2233"])],
    )


def _tree_state(d: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under ``d`` with size, mtime_ns and content, plus the folders' mtimes."""
    out = {}
    for p in sorted(d.rglob("*")):
        st = p.stat()
        out[str(p.relative_to(d))] = (st.st_size, st.st_mtime_ns, p.read_bytes() if p.is_file() else b"")
    out["."] = (0, d.stat().st_mtime_ns, b"")
    return out


def _texts(snapshot_chat_db: Path) -> list[str]:
    return read_imessage(snapshot_chat_db).messages["text"].to_list()


def test_snapshot_includes_committed_wal_content(tmp_path):
    src = tmp_path / "Messages"
    src.mkdir()
    b = _chatdb(src / "chat.db", ["one"], wal=True)
    b.flush()
    b.add_message(1, 1, "two, still in the WAL", ts=T0 + timedelta(minutes=1))
    b.flush()  # committed, not checkpointed: Messages is "running"
    try:
        assert (src / "chat.db-wal").stat().st_size > 0
        snap = take_snapshot(tmp_path / "home", chat_db=src / "chat.db", addressbook_dir=None, whatsapp_db=None)
        assert _texts(snap.chat_db) == ["one", "two, still in the WAL"]
        # The copy is one self-contained file in rollback-journal mode.
        assert sorted(p.name for p in snap.root.iterdir()) == ["chat.db", "manifest.json"]
        con = sqlite3.connect(snap.chat_db)
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        con.close()
        # And the source WAL was not checkpointed by us.
        assert (src / "chat.db-wal").stat().st_size > 0
    finally:
        b.close()


def test_snapshot_copies_every_addressbook_store_with_layout(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _chatdb(src / "chat.db", ["hi"]).close()
    ab = tmp_path / "AddressBook"
    _addressbook(ab)
    snap = take_snapshot(tmp_path / "home", chat_db=src / "chat.db", addressbook_dir=ab, whatsapp_db=None)
    rel = sorted(str(p.relative_to(snap.root)) for p in snap.addressbook_files)
    assert rel == ["AddressBook/AddressBook-v22.abcddb", f"AddressBook/Sources/{SOURCE_UUID}/AddressBook-v22.abcddb"]
    assert snap.counts["addressbook_stores"] == 2 and snap.warnings == []
    con = sqlite3.connect(snap.addressbook_dir / "Sources" / SOURCE_UUID / "AddressBook-v22.abcddb")
    assert con.execute("SELECT ZFULLNUMBER FROM ZABCDPHONENUMBER").fetchall() == [("(555) 010-2233",)]
    con.close()
    assert set(snap.sizes) == {"chat.db", *rel}
    assert snap.fingerprints["chat_db"] == source_fingerprint(src / "chat.db")
    assert snap.whatsapp_db is None and not (snap.root / "ChatStorage.sqlite").exists()


def test_missing_addressbook_is_a_counted_warning(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _chatdb(src / "chat.db", ["hi"]).close()
    snap = take_snapshot(tmp_path / "home", chat_db=src / "chat.db", addressbook_dir=tmp_path / "nope", whatsapp_db=None)
    assert snap.counts["addressbook_missing"] == 1
    assert snap.addressbook_dir is None and snap.addressbook_files == []
    assert len(snap.warnings) == 1 and "names stay unresolved" in snap.warnings[0]
    assert _texts(snap.chat_db) == ["hi"]


def test_whatsapp_copied_only_when_given(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _chatdb(src / "chat.db", ["hi"]).close()
    wa = tmp_path / "wa" / "ChatStorage.sqlite"
    wa.parent.mkdir()
    con = sqlite3.connect(wa)
    con.execute("CREATE TABLE ZWAMESSAGE (Z_PK INTEGER PRIMARY KEY, ZTEXT VARCHAR)")
    con.commit()
    con.close()
    off = take_snapshot(tmp_path / "home", chat_db=src / "chat.db", addressbook_dir=None, whatsapp_db=None)
    assert off.whatsapp_db is None and "whatsapp_db" not in off.fingerprints
    on = take_snapshot(tmp_path / "home", chat_db=src / "chat.db", addressbook_dir=None, whatsapp_db=wa)
    assert on.whatsapp_db == on.root / "ChatStorage.sqlite"
    con = sqlite3.connect(on.whatsapp_db)
    assert con.execute("SELECT count(*) FROM ZWAMESSAGE").fetchone() == (0,)
    con.close()


def test_sources_untouched_and_read_only_source_dir_works(tmp_path):
    # Note: as root, permission bits do not stop writes; the state comparison still proves none happened.
    src = tmp_path / "Messages"
    src.mkdir()
    _chatdb(src / "chat.db", ["a", "b"]).close()
    ab = tmp_path / "AddressBook"
    _addressbook(ab)
    before_src, before_ab = _tree_state(src), _tree_state(ab)
    ro = stat.S_IRUSR | stat.S_IXUSR
    for d in [src, ab, *[p for p in ab.rglob("*") if p.is_dir()]]:
        os.chmod(d, ro)
    try:
        snap = take_snapshot(tmp_path / "home", chat_db=src / "chat.db", addressbook_dir=ab, whatsapp_db=None)
    finally:
        for d in [src, ab, *[p for p in ab.rglob("*") if p.is_dir()]]:
            os.chmod(d, stat.S_IRWXU)
    assert _texts(snap.chat_db) == ["a", "b"]
    assert _tree_state(src) == before_src
    assert _tree_state(ab) == before_ab


def test_failed_snapshot_keeps_previous(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _chatdb(src / "chat.db", ["first"]).close()
    home = tmp_path / "home"
    first = take_snapshot(home, chat_db=src / "chat.db", addressbook_dir=None, whatsapp_db=None)
    good = first.chat_db.read_bytes()
    holder = sqlite3.connect(src / "chat.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(DatabaseLockedError, match="locked"):
            take_snapshot(home, chat_db=src / "chat.db", addressbook_dir=None, whatsapp_db=None, timeout_s=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    (src / "broken.db").write_text("not sqlite")
    with pytest.raises(NotADatabaseError):
        take_snapshot(home, chat_db=src / "broken.db", addressbook_dir=None, whatsapp_db=None)
    with pytest.raises(SourceMissingError, match="chat.db not found"):
        take_snapshot(home, chat_db=src / "gone.db", addressbook_dir=None, whatsapp_db=None)
    # The previous snapshot is intact and no temp folders are left behind.
    assert first.chat_db.read_bytes() == good
    assert sorted(p.name for p in home.iterdir()) == [SNAPSHOT_DIRNAME]


def test_new_snapshot_replaces_previous(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    b = _chatdb(src / "chat.db", ["one"])
    b.flush()
    home = tmp_path / "home"
    take_snapshot(home, chat_db=src / "chat.db", addressbook_dir=None, whatsapp_db=None)
    b.add_message(1, 1, "two", ts=T0 + timedelta(minutes=5))
    b.close()
    snap = take_snapshot(home, chat_db=src / "chat.db", addressbook_dir=None, whatsapp_db=None)
    assert _texts(snap.chat_db) == ["one", "two"]
    assert sorted(p.name for p in home.iterdir()) == [SNAPSHOT_DIRNAME]


def test_dest_inside_source_folder_is_refused(tmp_path):
    src = tmp_path / "Messages"
    src.mkdir()
    _chatdb(src / "chat.db", ["x"]).close()
    with pytest.raises(ValueError, match="inside source folder"):
        take_snapshot(src / "brb", chat_db=src / "chat.db", addressbook_dir=None, whatsapp_db=None)
    assert sorted(p.name for p in src.iterdir()) == ["chat.db"]


def test_source_fingerprint_tracks_wal_changes(tmp_path):
    p = tmp_path / "chat.db"
    assert source_fingerprint(p) == "missing"
    b = _chatdb(p, ["one"], wal=True)
    b.flush()
    try:
        f1 = source_fingerprint(p)
        assert f1 == source_fingerprint(p)  # stable when nothing changes
        read_imessage(p)  # our own read-only read does not change it
        assert source_fingerprint(p) == f1
        b.add_message(1, 1, "more " * 200, ts=T0 + timedelta(minutes=1))
        b.flush()
        assert source_fingerprint(p) != f1  # WAL grew while chat.db itself did not change
    finally:
        b.close()
