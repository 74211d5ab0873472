"""AddressBook reader: real Core Data-shaped stores written by the demo writer, read back."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from brb_pipeline.core.errors import (
    DatabaseLockedError,
    NotADatabaseError,
    SourceMissingError,
    UnknownSchemaError,
)
from brb_pipeline.demo.addressbook_writer import PersonRecord, write_addressbook
from brb_pipeline.sources.addressbook import FILE_NAME, find_addressbooks, read_addressbook

PEOPLE = [
    PersonRecord("Ayşe", "Yılmaz", phones=["+90 532 123 45 67"], emails=["Ayse@Example.com"]),
    PersonRecord(None, None, organization="ACME Corp", phones=["(555) 010-2233"]),
    PersonRecord(None, "Omar", nickname="Om", emails=["omar@example.org", "o@example.net"]),
    PersonRecord(None, None, nickname="Nicky"),
    PersonRecord(None, None),  # no name at all: skipped and counted
]


def _book(root: Path, people=PEOPLE, sub: str | None = None) -> Path:
    path = root / "Sources" / sub / FILE_NAME if sub else root / FILE_NAME
    write_addressbook(path, people)
    return path


def test_writer_output_reads_back(tmp_path):
    _book(tmp_path)
    res = read_addressbook(tmp_path)
    got = [(p.display_name, p.phones, p.emails) for p in res.people]
    assert got == [
        ("Ayşe Yılmaz", ["+90 532 123 45 67"], ["Ayse@Example.com"]),  # first + last, raw as typed
        ("ACME Corp", ["(555) 010-2233"], []),  # no person name: organization
        ("Omar", [], ["omar@example.org", "o@example.net"]),  # last name only beats the nickname
        ("Nicky", [], []),  # nickname only
    ]
    assert {p.source for p in res.people} == {FILE_NAME}
    assert [p.record_pk for p in res.people] == [2, 3, 4, 5]  # pk 1 is the container record
    assert res.stats["unnamed_skipped"] == 1
    assert res.stats["people"] == 4 and res.stats["phones"] == 2 and res.stats["emails"] == 3
    assert res.warnings == []


def test_root_and_sources_are_all_found_sorted_with_relative_sources(tmp_path):
    _book(tmp_path, PEOPLE[:1])
    _book(tmp_path, PEOPLE[1:2], sub="BBBB-2222")
    _book(tmp_path, PEOPLE[2:3], sub="AAAA-1111")
    (tmp_path / "Sources" / "EMPTY").mkdir()  # an account folder without a store
    files = find_addressbooks(tmp_path)
    assert files == [
        tmp_path / FILE_NAME,
        tmp_path / "Sources" / "AAAA-1111" / FILE_NAME,
        tmp_path / "Sources" / "BBBB-2222" / FILE_NAME,
    ]
    res = read_addressbook(tmp_path)
    assert [(p.source, p.display_name) for p in res.people] == [
        (FILE_NAME, "Ayşe Yılmaz"),
        (f"Sources/AAAA-1111/{FILE_NAME}", "Omar"),
        (f"Sources/BBBB-2222/{FILE_NAME}", "ACME Corp"),
    ]
    assert res.stats["files"] == 3


def test_entity_numbers_come_from_z_primarykey(tmp_path):
    path = _book(tmp_path)
    # Another macOS version numbers entities differently: move contacts to entity 40.
    with sqlite3.connect(path) as c:
        c.execute("UPDATE ZABCDRECORD SET Z_ENT = 40 WHERE Z_ENT = 22")
        c.execute("UPDATE Z_PRIMARYKEY SET Z_ENT = 40 WHERE Z_NAME = 'ABCDContact'")
        # A sub-entity of ABCDContact (Z_SUPER) is a contact too.
        c.execute("INSERT INTO Z_PRIMARYKEY VALUES (41, 'ABCDSubContact', 40, 0)")
        c.execute("INSERT INTO ZABCDRECORD (Z_PK, Z_ENT, ZFIRSTNAME) VALUES (99, 41, 'Sub')")
    names = [p.display_name for p in read_addressbook(tmp_path).people]
    assert names == ["Ayşe Yılmaz", "ACME Corp", "Omar", "Nicky", "Sub"]


def test_groups_and_containers_are_not_people(tmp_path):
    path = _book(tmp_path, PEOPLE[:1])
    with sqlite3.connect(path) as c:
        c.execute("INSERT INTO ZABCDRECORD (Z_PK, Z_ENT, ZNAME) VALUES (50, 19, 'Family group')")
    res = read_addressbook(tmp_path)
    assert [p.display_name for p in res.people] == ["Ayşe Yılmaz"]


@pytest.mark.parametrize(
    "setup, error, fragment",
    [
        # the root folder itself is missing
        (lambda root: root / "nope", SourceMissingError, "not found"),
        # a text file with the store's name
        (lambda root: (root / FILE_NAME).write_text("hello, not sqlite") and root, NotADatabaseError, "not an SQLite"),
        # an SQLite file that is not an AddressBook
        (lambda root: _other_db(root / FILE_NAME) and root, UnknownSchemaError, "Z_PRIMARYKEY"),
        # an AddressBook-shaped file whose Z_PRIMARYKEY lacks the contact entity
        (lambda root: _no_contact_entity(root) and root, UnknownSchemaError, "ABCDContact"),
    ],
)
def test_bad_input_one_line_errors(tmp_path, setup, error, fragment):
    root = setup(tmp_path)
    with pytest.raises(error) as e:
        read_addressbook(root)
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)


def _other_db(path: Path) -> Path:
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    return path


def _no_contact_entity(root: Path) -> Path:
    path = _book(root)
    with sqlite3.connect(path) as c:
        c.execute("DELETE FROM Z_PRIMARYKEY WHERE Z_NAME = 'ABCDContact'")
    return path


def test_empty_folder_gives_empty_result_with_warning(tmp_path):
    res = read_addressbook(tmp_path)
    assert res.people == [] and res.files == []
    assert len(res.warnings) == 1 and "no AddressBook-v22.abcddb" in res.warnings[0]


def test_locked_single_store_raises(tmp_path):
    path = _book(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(DatabaseLockedError) as e:
            read_addressbook(tmp_path, timeout_s=0.1)
        assert "locked" in str(e.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_one_unreadable_store_among_several_is_a_warning(tmp_path):
    locked = _book(tmp_path, PEOPLE[:1])
    _book(tmp_path, PEOPLE[2:3], sub="AAAA")
    (tmp_path / "Sources" / "BROKEN").mkdir(parents=True)
    (tmp_path / "Sources" / "BROKEN" / FILE_NAME).write_bytes(b"\x00garbage" * 10)
    holder = sqlite3.connect(locked, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        res = read_addressbook(tmp_path, timeout_s=0.1)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [p.display_name for p in res.people] == ["Omar"]  # the healthy store still read
    assert res.stats["files"] == 1 and res.stats["files_failed"] == 2
    assert len(res.warnings) == 2
    assert any("locked" in w for w in res.warnings) and any("BROKEN" in w for w in res.warnings)


def test_odd_values_are_survived_and_counted(tmp_path):
    path = _book(tmp_path, PEOPLE[:1])
    with sqlite3.connect(path) as c:
        # invalid UTF-8 stored as TEXT in a first name
        c.execute("INSERT INTO ZABCDRECORD (Z_PK, Z_ENT, ZFIRSTNAME, ZLASTNAME) VALUES (10, 22, CAST(x'4aff65' AS TEXT), 'Doe')")
        # a BLOB where a name should be, and a number typed as an integer (TEXT affinity keeps it text)
        c.execute("INSERT INTO ZABCDRECORD (Z_PK, Z_ENT, ZORGANIZATION) VALUES (11, 22, x'426c6f62')")
        c.execute("INSERT INTO ZABCDPHONENUMBER (Z_PK, ZOWNER, ZFULLNUMBER) VALUES (90, 11, 5550102233)")
        # whitespace-only names fall through to the organization; an empty phone is dropped
        c.execute("INSERT INTO ZABCDRECORD (Z_PK, Z_ENT, ZFIRSTNAME, ZORGANIZATION) VALUES (12, 22, '   ', 'Org')")
        c.execute("INSERT INTO ZABCDPHONENUMBER (Z_PK, ZOWNER, ZFULLNUMBER) VALUES (91, 12, '')")
        # a phone whose owner does not exist, and one with a NULL owner
        c.execute("INSERT INTO ZABCDPHONENUMBER (Z_PK, ZOWNER, ZFULLNUMBER) VALUES (92, 777, '+1 555 010 9999')")
        c.execute("INSERT INTO ZABCDPHONENUMBER (Z_PK, ZOWNER, ZFULLNUMBER) VALUES (93, NULL, '+1 555 010 8888')")
        # a malformed number is kept raw (normalization decides later)
        c.execute("INSERT INTO ZABCDPHONENUMBER (Z_PK, ZOWNER, ZFULLNUMBER) VALUES (94, 12, 'call me maybe')")
    res = read_addressbook(tmp_path)
    by_pk = {p.record_pk: p for p in res.people}
    assert by_pk[10].display_name == "J\ufffde Doe"
    assert by_pk[11].display_name == "Blob" and by_pk[11].phones == ["5550102233"]
    assert by_pk[12].display_name == "Org" and by_pk[12].phones == ["call me maybe"]
    assert res.stats["odd_values"] == 2  # bad UTF-8, the BLOB
    assert res.stats["phones"] == 3  # Ayşe's, the integer one, the malformed one


def test_single_file_path_is_accepted(tmp_path):
    path = _book(tmp_path, PEOPLE[:1])
    res = read_addressbook(path)
    assert [(p.source, p.display_name) for p in res.people] == [(FILE_NAME, "Ayşe Yılmaz")]


def test_reader_never_writes(tmp_path):
    path = _book(tmp_path)
    before = path.read_bytes()
    read_addressbook(tmp_path)
    assert path.read_bytes() == before
    assert not Path(str(path) + "-journal").exists() and not Path(str(path) + "-wal").exists()
