"""Write a small macOS AddressBook store (``AddressBook-v22.abcddb``) from the real DDL.

The file is built the way Core Data lays it out: every entity has a row in ``Z_PRIMARYKEY``
(``Z_ENT`` number, name, super-entity, ``Z_MAX``), contacts live in ``ZABCDRECORD`` with the
contact entity number in ``Z_ENT``, and phone numbers / e-mail addresses point at their owner
through ``ZOWNER`` (plus the entity-qualified ``Z22_OWNER``). Numbers are stored as typed.
Used by the demo generator and the tests; never run against a user's real AddressBook.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from brb_pipeline.demo.sqlite_files import write_fresh

SCHEMA_SQL = Path(__file__).parent / "schemas" / "AddressBook-v22.abcddb.sql"

# Core Data entity table of AddressBook v22: (Z_ENT, Z_NAME, Z_SUPER). Numbers follow the DDL's
# entity-qualified columns (Z22_OWNER -> contacts are 22, Z_19PARENTGROUPS -> groups are 19,
# Z17_OWNER -> records are 17). Readers must look these up by name, not hard-code them.
ENTITIES: tuple[tuple[int, str, int], ...] = (
    (1, "ABCDAddressingGrammar", 0),
    (2, "ABCDAlertTone", 0),
    (3, "ABCDCalendarURI", 0),
    (4, "ABCDContactDate", 0),
    (5, "ABCDCustomProperty", 0),
    (6, "ABCDCustomPropertyValue", 0),
    (7, "ABCDDateComponents", 0),
    (8, "ABCDDistributionListConfig", 0),
    (9, "ABCDEmailAddress", 0),
    (10, "ABCDLikeness", 0),
    (11, "ABCDMessagingAddress", 0),
    (12, "ABCDNote", 0),
    (13, "ABCDPhoneNumber", 0),
    (14, "ABCDPostalAddress", 0),
    (15, "ABCDRelatedName", 0),
    (16, "ABCDRemoteLocation", 0),
    (17, "ABCDRecord", 0),
    (18, "ABCDContainer", 17),
    (19, "ABCDGroup", 17),
    (20, "ABCDInfo", 17),
    (21, "ABCDSubscription", 17),
    (22, "ABCDContact", 17),
    (23, "ABCDService", 0),
    (24, "ABCDSocialProfile", 0),
    (25, "ABCDUnknownProperty", 0),
    (26, "ABCDURLAddress", 0),
)
_ENT = {name: ent for ent, name, _ in ENTITIES}
_NS = uuid.UUID("6f1c3a52-8f0e-4a53-9a51-0c1f6b6f9a10")  # stable ids across demo runs


@dataclass
class PersonRecord:
    """One AddressBook card as a person typed it."""

    first: str | None
    last: str | None
    organization: str | None = None
    nickname: str | None = None
    phones: list[str] = field(default_factory=list)  # as typed: "(555) 010-2233", "+90 532 123 45 67"
    emails: list[str] = field(default_factory=list)


def write_addressbook(path: Path, people: Sequence[PersonRecord]) -> None:
    """Create ``path`` as an AddressBook-v22 store holding ``people``.

    Args:
        path: file to create; parent folders are created; an existing file is replaced.
        people: the cards, written in order (Z_PK 2.. ; pk 1 is the local container).
    """
    path = Path(path)
    write_fresh(path, SCHEMA_SQL, lambda conn: _fill(conn, path, people))


def _fill(conn: sqlite3.Connection, path: Path, people: Sequence[PersonRecord]) -> None:
    ent_contact, ent_container = _ENT["ABCDContact"], _ENT["ABCDContainer"]
    # The local container ("On My Mac") every card belongs to.
    conn.execute(
        "INSERT INTO ZABCDRECORD (Z_PK, Z_ENT, Z_OPT, ZUNIQUEID, ZNAME) VALUES (1, ?, 1, ?, ?)",
        (ent_container, str(uuid.uuid5(_NS, f"{path.name}:container")).upper() + ":ABAccount", "On My Mac"),
    )
    phone_pk = email_pk = 0
    record_pk = 1
    for i, p in enumerate(people):
        record_pk += 1
        sort_first = " ".join(x for x in (p.first, p.last) if x) or p.organization or p.nickname
        conn.execute(
            "INSERT INTO ZABCDRECORD (Z_PK, Z_ENT, Z_OPT, ZCONTAINER1, ZFIRSTNAME, ZLASTNAME,"
            " ZORGANIZATION, ZNICKNAME, ZSORTINGFIRSTNAME, ZUNIQUEID, ZCREATIONDATE, ZMODIFICATIONDATE)"
            " VALUES (?, ?, 1, 1, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record_pk,
                ent_contact,
                p.first,
                p.last,
                p.organization,
                p.nickname,
                sort_first.lower() if sort_first else None,
                str(uuid.uuid5(_NS, f"{path.name}:{i}")).upper() + ":ABPerson",
                700_000_000.0 + i,  # Core Data TIMESTAMP: seconds since 2001-01-01
                700_000_000.0 + i,
            ),
        )
        for order, number in enumerate(p.phones):
            phone_pk += 1
            digits = "".join(c for c in number if c.isdigit())
            conn.execute(
                "INSERT INTO ZABCDPHONENUMBER (Z_PK, Z_ENT, Z_OPT, ZISPRIMARY, ZORDERINGINDEX, ZOWNER,"
                " Z22_OWNER, ZFULLNUMBER, ZLABEL, ZLASTFOURDIGITS, ZUNIQUEID) VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    phone_pk,
                    _ENT["ABCDPhoneNumber"],
                    1 if order == 0 else 0,
                    order,
                    record_pk,
                    record_pk,
                    number,
                    "_$!<Mobile>!$_",
                    digits[-4:] or None,
                    str(uuid.uuid5(_NS, f"{path.name}:phone:{phone_pk}")).upper() + ":ABPhone",
                ),
            )
        for order, address in enumerate(p.emails):
            email_pk += 1
            conn.execute(
                "INSERT INTO ZABCDEMAILADDRESS (Z_PK, Z_ENT, Z_OPT, ZISPRIMARY, ZORDERINGINDEX, ZOWNER,"
                " Z22_OWNER, ZADDRESS, ZADDRESSNORMALIZED, ZLABEL, ZUNIQUEID) VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    email_pk,
                    _ENT["ABCDEmailAddress"],
                    1 if order == 0 else 0,
                    order,
                    record_pk,
                    record_pk,
                    address,
                    address.strip().lower() if address else None,
                    "_$!<Home>!$_",
                    str(uuid.uuid5(_NS, f"{path.name}:email:{email_pk}")).upper() + ":ABEmail",
                ),
            )
    # Core Data keeps the highest pk per table on the root entity of the table's hierarchy.
    maxima = {"ABCDRecord": record_pk, "ABCDPhoneNumber": phone_pk, "ABCDEmailAddress": email_pk}
    conn.executemany(
        "INSERT INTO Z_PRIMARYKEY (Z_ENT, Z_NAME, Z_SUPER, Z_MAX) VALUES (?, ?, ?, ?)",
        [(ent, name, sup, maxima.get(name, 0)) for ent, name, sup in ENTITIES],
    )
