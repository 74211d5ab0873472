"""Read people (names, phone numbers, e-mail addresses) from macOS AddressBook stores.

A Mac keeps one ``AddressBook-v22.abcddb`` at the root of ``~/Library/Application
Support/AddressBook`` and one more per account under ``Sources/<UUID>/``. Each is a Core Data
SQLite store: cards are ``ZABCDRECORD`` rows whose ``Z_ENT`` is the ``ABCDContact`` entity (looked
up by name in ``Z_PRIMARYKEY``, never hard-coded: the numbers change between macOS versions);
``ZABCDPHONENUMBER.ZFULLNUMBER`` (as typed) and ``ZABCDEMAILADDRESS.ZADDRESS`` point at their
card through ``ZOWNER``. Files are opened read-only; numbers are returned raw (normalization
with the user's region happens in ``core.contacts``).
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from brb_pipeline.sources.sqlite_ro import LOCK_TIMEOUT_S
from brb_pipeline.core.errors import SourceError, SourceMissingError, UnknownSchemaError
from brb_pipeline.core.records import Person
from brb_pipeline.sources.sqlite_ro import FileIO, open_readonly, translate_sqlite_error

log = logging.getLogger(__name__)

FILE_NAME = "AddressBook-v22.abcddb"
CONTACT_ENTITY = "ABCDContact"

REQUIRED = {
    "Z_PRIMARYKEY": {"Z_ENT", "Z_NAME", "Z_SUPER"},
    "ZABCDRECORD": {"Z_PK", "Z_ENT", "ZFIRSTNAME", "ZLASTNAME", "ZNICKNAME", "ZORGANIZATION"},
    "ZABCDPHONENUMBER": {"ZOWNER", "ZFULLNUMBER"},
    "ZABCDEMAILADDRESS": {"ZOWNER", "ZADDRESS"},
}


@dataclass
class AddressBookResult:
    """What :func:`read_addressbook` returns.

    Attributes:
        people: cards with a name, in (file, pk) order.
        files: AddressBook files that were read successfully.
        stats: counts only: ``files``, ``files_failed``, ``people``, ``phones``, ``emails``,
            ``unnamed_skipped`` (cards with no name at all), ``odd_values`` (non-text values in
            text columns, invalid UTF-8, empty strings).
        warnings: one-line, name-free warnings.
    """

    people: list[Person] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def find_addressbooks(root: Path) -> list[Path]:
    """Every ``AddressBook-v22.abcddb`` at ``root`` and under ``root/Sources/*/``, sorted.

    Args:
        root: the AddressBook folder; a path to one ``.abcddb`` file is returned as is.

    Raises:
        SourceMissingError: ``root`` does not exist.
    """
    root = Path(root).expanduser()
    if not root.exists():
        raise SourceMissingError(f"AddressBook folder not found at {root}: check the path")
    if root.is_file():
        return [root]
    found = [root / FILE_NAME] if (root / FILE_NAME).is_file() else []
    found += sorted(p for p in root.glob(f"Sources/*/{FILE_NAME}") if p.is_file())
    return found


def read_addressbook(root: Path, *, timeout_s: float = LOCK_TIMEOUT_S, io: FileIO | None = None) -> AddressBookResult:
    """Read every AddressBook store under ``root``.

    One unreadable file among several becomes a warning (counted in ``files_failed``); when every
    file fails, the first error is raised so a user sees why.

    Args:
        root: the AddressBook folder (or one ``.abcddb`` file).
        timeout_s: how long to wait for a locked file before skipping it (seconds).
        io: how to read sealed snapshot copies (None: plain files).

    Raises:
        SourceMissingError: ``root`` does not exist.
        NotADatabaseError, DatabaseLockedError, UnknownSchemaError: every file failed this way.
    """
    root = Path(root).expanduser()
    files = find_addressbooks(root)
    result = AddressBookResult()
    stats = dict.fromkeys(
        ("files", "files_failed", "people", "phones", "emails", "unnamed_skipped", "odd_values"), 0
    )
    result.stats = stats
    if not files:
        result.warnings.append(f"AddressBook - no {FILE_NAME} found under {root}; names fall back to handles")
        log.warning(result.warnings[-1])
        return result
    errors: list[SourceError] = []
    for path in files:
        rel = path.name if root.is_file() else path.relative_to(root).as_posix()
        try:
            people = _read_file(path, rel, stats, timeout_s, io)
        except SourceError as e:
            errors.append(e)
            stats["files_failed"] += 1
            result.warnings.append(f"AddressBook - skipped {rel}: {e}")
            log.warning(result.warnings[-1])
            continue
        result.people.extend(people)
        result.files.append(path)
        stats["files"] += 1
    if errors and not result.files:
        raise errors[0]
    stats["people"] = len(result.people)
    stats["phones"] = sum(len(p.phones) for p in result.people)
    stats["emails"] = sum(len(p.emails) for p in result.people)
    log.info(
        "AddressBook - %d people, %d phones, %d e-mails from %d files",
        stats["people"], stats["phones"], stats["emails"], stats["files"],
    )
    return result


def _text(value: object, odd: list[int]) -> str | None:
    """A text column's value as a stripped string; counts anything unexpected in ``odd[0]``."""
    if value is None:
        return None
    if isinstance(value, bytes):
        odd[0] += 1
        value = value.decode("utf-8", "replace")
    elif not isinstance(value, str):
        odd[0] += 1
        value = str(value)
    if "\ufffd" in value:
        odd[0] += 1
    s = value.strip()
    return s or None


def _read_file(path: Path, rel: str, stats: dict[str, int], timeout_s: float, io: FileIO | None) -> list[Person]:
    conn = open_readonly(path, what="AddressBook", required=REQUIRED, timeout_s=timeout_s, io=io)
    # Invalid UTF-8 in a name must not abort the whole file: decode with replacement.
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    odd = [0]
    try:
        ents = _contact_entities(conn)
        if not ents:
            raise UnknownSchemaError(
                f"AddressBook at {path}: Z_PRIMARYKEY has no {CONTACT_ENTITY} entity (unsupported version?)"
            )
        marks = ",".join("?" * len(ents))
        records = conn.execute(
            "SELECT Z_PK, ZFIRSTNAME, ZLASTNAME, ZNICKNAME, ZORGANIZATION FROM ZABCDRECORD"
            f" WHERE Z_ENT IN ({marks}) ORDER BY Z_PK",  # only '?' placeholders are formatted in
            ents,
        ).fetchall()
        phones: dict[int, list[str]] = {}
        for owner, number in conn.execute(
            "SELECT ZOWNER, ZFULLNUMBER FROM ZABCDPHONENUMBER WHERE ZOWNER IS NOT NULL"
            " ORDER BY ZOWNER, ZORDERINGINDEX, Z_PK"
            if "ZORDERINGINDEX" in _cols(conn, "ZABCDPHONENUMBER")
            else "SELECT ZOWNER, ZFULLNUMBER FROM ZABCDPHONENUMBER WHERE ZOWNER IS NOT NULL ORDER BY ZOWNER, Z_PK"
        ):
            s = _text(number, odd)
            if s is not None and isinstance(owner, int):
                phones.setdefault(owner, []).append(s)
        emails: dict[int, list[str]] = {}
        for owner, address in conn.execute(
            "SELECT ZOWNER, ZADDRESS FROM ZABCDEMAILADDRESS WHERE ZOWNER IS NOT NULL"
            " ORDER BY ZOWNER, ZORDERINGINDEX, Z_PK"
            if "ZORDERINGINDEX" in _cols(conn, "ZABCDEMAILADDRESS")
            else "SELECT ZOWNER, ZADDRESS FROM ZABCDEMAILADDRESS WHERE ZOWNER IS NOT NULL ORDER BY ZOWNER, Z_PK"
        ):
            s = _text(address, odd)
            if s is not None and isinstance(owner, int):
                emails.setdefault(owner, []).append(s)
    except sqlite3.Error as e:
        raise translate_sqlite_error(e, "AddressBook", path) from None
    finally:
        conn.close()
    people = []
    for pk, first, last, nick, org in records:
        full = " ".join(x for x in (_text(first, odd), _text(last, odd)) if x)
        name = full or _text(nick, odd) or _text(org, odd)
        if not name:
            stats["unnamed_skipped"] += 1
            continue
        people.append(Person(rel, int(pk), name, phones.get(pk, []), emails.get(pk, []), _text(nick, odd)))
    stats["odd_values"] += odd[0]
    return people


def _cols(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute("SELECT * FROM pragma_table_info(?)", (table,))}


def _contact_entities(conn: sqlite3.Connection) -> list[int]:
    """Z_ENT of ABCDContact and of any sub-entity of it (Core Data inheritance via Z_SUPER)."""
    rows = conn.execute("SELECT Z_ENT, Z_NAME, Z_SUPER FROM Z_PRIMARYKEY").fetchall()
    ents = {ent for ent, name, _ in rows if name == CONTACT_ENTITY}
    grew = True
    while grew:
        more = {ent for ent, _, sup in rows if sup in ents and ent not in ents}
        ents |= more
        grew = bool(more)
    return sorted(e for e in ents if isinstance(e, int))
