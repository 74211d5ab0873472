"""Contact resolution on small hand-made frames, plus one pass over writer-built stores."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from brb_pipeline.core.contacts.resolve import (CONTACTS_SCHEMA, NAME_PRECEDENCE, NAMED_SOURCES, Conflict,
                                                contact_names, resolve_contacts)
from brb_pipeline.core.records import CHAT_SCHEMA, MESSAGE_SCHEMA, UNKNOWN_CONTACT_ID
from brb_pipeline.demo.addressbook_writer import PersonRecord, write_addressbook
from brb_pipeline.demo.whatsapp_writer import WAChatRecord, WAMessageRecord, write_whatsapp
from brb_pipeline.core.records import Person
from brb_pipeline.sources.addressbook import read_addressbook
from brb_pipeline.sources.whatsapp import read_whatsapp

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def _messages(rows: list[tuple]) -> pl.DataFrame:
    """rows: (channel, message_id, chat_id, sender, is_from_me, seconds after T0)."""
    return pl.DataFrame(
        [
            (ch, mid, i, chat, sender, me, T0 + timedelta(seconds=s), "x", "text", False, False, 0, [], [])
            for i, (ch, mid, chat, sender, me, s) in enumerate(rows)
        ],
        schema=MESSAGE_SCHEMA,
        orient="row",
    )


def _chats(rows: list[tuple]) -> pl.DataFrame:
    """rows: (channel, chat_id, kind, display_name, participants)."""
    return pl.DataFrame(rows, schema=CHAT_SCHEMA, orient="row")


def _one_chat_per_handle(handles: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    chats = _chats([("imessage", f"imessage:{h}", "direct", None, [h]) for h in handles])
    msgs = _messages([("imessage", f"m{i}", f"imessage:{h}", h, False, i) for i, h in enumerate(handles)])
    return msgs, chats


@pytest.mark.parametrize(
    "typed, region, handle, matches",
    [
        ("+44 7700 900123", "US", "+447700900123", True),  # +CC keeps its country whatever the region
        ("+44 7700 900123", "US", "+17700900123", False),  # same last 10 digits, other country: no match
        ("+1 770-090-0123", "US", "+447700900123", False),  # and the other way round
        ("07700 900123", "GB", "+447700900123", True),  # national format with the right region
        ("07700 900123", "US", "+447700900123", False),  # wrong region: not normalizable, never guessed
        ("(555) 010-2233", "US", "+15550102233", True),  # US national format
        ("(555) 010-2233", "GB", "+15550102233", False),  # region decides national numbers
        ("555 010 2233", "US", "5550102233", False),  # a raw chat handle is not an E.164 number
        ("not a number", "US", "not a number", False),  # malformed typed numbers match nothing
    ],
)
def test_phone_matching_is_exact_e164(typed, region, handle, matches):
    msgs, chats = _one_chat_per_handle([handle])
    res = resolve_contacts(msgs, chats, [Person("AddressBook-v22.abcddb", 2, "Zed", [typed], [])], default_region=region)
    row = res.contacts.row(0, named=True)
    if matches:
        assert (row["contact_id"], row["display_name"], row["name_source"]) == (f"c:{handle}", "Zed", "addressbook")
    else:
        assert (row["contact_id"], row["display_name"], row["name_source"]) == (f"h:{handle}", handle, "handle")


@pytest.mark.parametrize(
    "typed, handle, matches",
    [
        ("Omar@Example.COM", "omar@example.com", True),  # e-mails compare case-insensitively
        (" omar@example.com ", "omar@example.com", True),  # stray spaces as typed
        ("omar@example.com", "omar@example.org", False),  # different domain
    ],
)
def test_email_matching(typed, handle, matches):
    msgs, chats = _one_chat_per_handle([handle])
    res = resolve_contacts(msgs, chats, [Person("AddressBook-v22.abcddb", 2, "Omar", [], [typed])])
    assert (res.contacts.item(0, "name_source") == "addressbook") is matches


def test_person_merges_phone_email_and_channels():
    chats = _chats(
        [
            ("imessage", "imessage:chat-phone", "direct", None, ["+905321234567"]),
            ("imessage", "imessage:chat-mail", "direct", None, ["ayse@example.com"]),
            ("whatsapp", "whatsapp:905321234567@s.whatsapp.net", "direct", "Ayşe (WA)", ["+905321234567"]),
            ("imessage", "imessage:chat-omar", "direct", None, ["+15550102233"]),
        ]
    )
    msgs = _messages(
        [
            ("imessage", "m1", "imessage:chat-phone", "+905321234567", False, 1),
            ("imessage", "m2", "imessage:chat-mail", None, True, 2),
            ("whatsapp", "m3", "whatsapp:905321234567@s.whatsapp.net", "+905321234567", False, 3),
            ("imessage", "m4", "imessage:chat-omar", "+15550102233", False, 4),
        ]
    )
    people = [Person("AddressBook-v22.abcddb", 7, "Ayşe Yılmaz", ["+90 532 123 45 67"], ["Ayse@Example.com"])]
    res = resolve_contacts(msgs, chats, people)
    # Every message keeps its row and order; the three chats of Ayşe share one contact.
    assert res.messages.get_column("message_id").to_list() == ["m1", "m2", "m3", "m4"]
    assert res.messages.get_column("contact_id").to_list() == [
        "c:+905321234567", "c:+905321234567", "c:+905321234567", "h:+15550102233",
    ]
    assert res.messages.columns == [*MESSAGE_SCHEMA.names(), "contact_id"]
    assert res.contacts.schema == CONTACTS_SCHEMA
    assert res.contacts.rows() == [
        # the person: AddressBook name wins over the WhatsApp partner name; both channels; both handles
        ("c:+905321234567", "Ayşe Yılmaz", "addressbook", "direct", ["imessage", "whatsapp"], ["+905321234567", "ayse@example.com"]),
        # an unresolved handle is named by itself
        ("h:+15550102233", "+15550102233", "handle", "direct", ["imessage"], ["+15550102233"]),
    ]
    assert res.stats == {
        "contacts": 2, "named_contacts": 1, "handles_resolved": 2, "handles_unresolved": 1,
        "conflicts": 0, "addressbook_handles": 2, "addressbook_bad_numbers": 0, "people": 2, "named_people": 1,
    }
    # the same two as people: a person's contact id is their person id; their 1:1 chats are members
    assert res.people.people.select("person_id", "display_name", "handles", "channels").rows() == [
        ("c:+905321234567", "Ayşe Yılmaz", ["+905321234567", "ayse@example.com"], ["imessage", "whatsapp"]),
        ("h:+15550102233", "+15550102233", ["+15550102233"], ["imessage"]),
    ]
    assert res.people.members["contact_id"].to_list() == ["c:+905321234567", "h:+15550102233",
                                                           "c:+905321234567", "c:+905321234567"]


def test_contact_id_is_min_of_seen_handles():
    # Only the e-mail is ever used: the id comes from it, not from the (unseen) phone.
    msgs, chats = _one_chat_per_handle(["ayse@example.com"])
    res = resolve_contacts(msgs, chats, [Person("AddressBook-v22.abcddb", 2, "Ayşe", ["+90 532 123 45 67"], ["ayse@example.com"])])
    assert res.contacts.get_column("contact_id").to_list() == ["c:ayse@example.com"]
    assert res.contacts.item(0, "handles").to_list() == ["ayse@example.com"]


def test_unresolved_direct_chat_uses_chat_name_across_channels():
    chats = _chats(
        [
            ("whatsapp", "whatsapp:15550102233@s.whatsapp.net", "direct", "Omar K", ["+15550102233"]),
            ("imessage", "imessage:chat-omar", "direct", None, ["+15550102233"]),
        ]
    )
    msgs = _messages(
        [
            ("whatsapp", "m1", "whatsapp:15550102233@s.whatsapp.net", "+15550102233", False, 1),
            ("imessage", "m2", "imessage:chat-omar", "+15550102233", False, 2),
        ]
    )
    res = resolve_contacts(msgs, chats, [])
    # same handle on two channels: one contact, named by the WhatsApp partner name
    assert res.contacts.rows() == [
        ("h:+15550102233", "Omar K", "chat_name", "direct", ["imessage", "whatsapp"], ["+15550102233"])
    ]


def test_group_names():
    people = [
        Person("AddressBook-v22.abcddb", 2, "Ayşe", ["+905321234567"], []),
        Person("AddressBook-v22.abcddb", 3, "Omar", ["+15550102233"], []),
        Person("AddressBook-v22.abcddb", 4, "Zed", ["+447700900123"], []),
    ]
    a, o, z, u1, u2 = "+905321234567", "+15550102233", "+447700900123", "+15550000001", "x@y.com"
    groups = [
        # (chat_id, display_name, participants, expected name, expected name_source)
        ("g-named", "Hiking club", [a, o], "Hiking club", "chat_name"),  # the chat's own name wins
        ("g-1", None, [o], "Omar", "participants"),  # one participant
        ("g-2", None, [o, a], "Ayşe & Omar", "participants"),  # names sorted
        ("g-3", None, [z, a, o], "Ayşe, Omar & Zed", "participants"),  # three: all named
        ("g-4", None, [u1, z, a, o], "Ayşe, Omar & 2 more", "participants"),  # four+: first two and a count
        ("g-raw", None, [u2, u1, a], "Ayşe, +15550000001 & x@y.com", "participants"),  # resolved names first
        ("g-empty", None, [], "Unnamed group", "unknown"),  # nothing to name it by
    ]
    chats = _chats([("imessage", f"imessage:{cid}", "group", name, sorted(p)) for cid, name, p, _, _ in groups])
    msgs = _messages([("imessage", f"m-{cid}", f"imessage:{cid}", None, True, 0) for cid, *_ in groups])
    res = resolve_contacts(msgs, chats, people)
    got = {r["contact_id"]: (r["display_name"], r["name_source"], r["kind"]) for r in res.contacts.iter_rows(named=True)}
    for cid, _, _, name, source in groups:
        assert got[f"g:imessage:{cid}"] == (name, source, "group"), cid
    # group handles are the participants
    assert res.contacts.filter(pl.col("contact_id") == "g:imessage:g-3").item(0, "handles").to_list() == sorted([a, o, z])


@pytest.mark.parametrize(
    "kind, person_name, chat_name, participants_name, handle, name, source",
    [
        ("unknown", "Ayşe", "Chat", "A & B", "+1", "Unknown", "unknown"),  # the unknown bucket beats every name
        ("direct", "Ayşe", "Chat", "A & B", "+1", "Ayşe", "addressbook"),  # AddressBook beats the chat's name
        ("group", None, "Chat", "A & B", None, "Chat", "chat_name"),  # the chat's name beats its participants
        ("group", None, None, "A & B", None, "A & B", "participants"),
        ("group", None, None, None, None, "Unnamed group", "unknown"),  # a group with nothing to name it by
        ("direct", None, None, None, "+1", "+1", "handle"),  # a direct chat falls back to its handle
        ("direct", None, None, "A & B", "+1", "A & B", "participants"),  # precedence is by column, not by kind
    ],
)
def test_name_precedence_gives_name_and_source_together(kind, person_name, chat_name, participants_name, handle, name,
                                                        source):
    row = pl.DataFrame([(kind, person_name, chat_name, participants_name, handle)], orient="row",
                       schema=["kind", "person_name", "chat_name", "participants_name", "handle"])
    assert contact_names(row).select("display_name", "name_source").row(0) == (name, source)


def test_name_precedence_order_and_named_sources():
    assert [r.source for r in NAME_PRECEDENCE] == ["unknown", "addressbook", "chat_name", "participants", "unknown",
                                                   "handle"]
    assert NAME_PRECEDENCE[-1].when is None  # the last rule applies to every row left
    assert NAMED_SOURCES == ("addressbook", "chat_name", "participants")


def test_unknown_bucket_for_orphans_and_empty_direct_chats():
    chats = _chats(
        [
            ("imessage", "imessage:lonely", "direct", None, []),  # direct chat whose handle vanished
            ("imessage", "imessage:ok", "direct", None, ["+15550102233"]),
        ]
    )
    msgs = _messages(
        [
            ("imessage", "m1", "imessage:orphan", "+15550102233", False, 1),  # no chat join
            ("imessage", "m2", "imessage:lonely", None, True, 2),
            ("imessage", "m3", "imessage:ok", "+15550102233", False, 3),
            ("whatsapp", "m4", "whatsapp:orphan", None, False, 4),
        ]
    )
    res = resolve_contacts(msgs, chats, [])
    assert res.messages.get_column("contact_id").to_list() == [
        UNKNOWN_CONTACT_ID, UNKNOWN_CONTACT_ID, "h:+15550102233", UNKNOWN_CONTACT_ID,
    ]
    unknown = res.contacts.filter(pl.col("contact_id") == UNKNOWN_CONTACT_ID).row(0, named=True)
    assert unknown == {
        "contact_id": UNKNOWN_CONTACT_ID, "display_name": "Unknown", "name_source": "unknown",
        "kind": "unknown", "channels": ["imessage", "whatsapp"], "handles": [],
    }


def _conflict_people() -> list[Person]:
    return [
        Person("Sources/B/AddressBook-v22.abcddb", 2, "Mom", ["+905321234567"], []),  # account store
        Person("AddressBook-v22.abcddb", 9, "Ayşe Yılmaz", ["+905321234567"], []),  # root store: wins
        Person("AddressBook-v22.abcddb", 5, "Omar", ["+15550102233"], []),
        Person("AddressBook-v22.abcddb", 6, "Omar Work", ["+15550102233", "omar@work.com"], []),  # more handles: wins
        Person("AddressBook-v22.abcddb", 8, "Zed A", ["+447700900123"], []),
        Person("AddressBook-v22.abcddb", 4, "Zed B", ["+447700900123"], []),  # same count: lower pk wins
    ]


@pytest.mark.parametrize("order", [[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [3, 0, 5, 1, 4, 2]])
def test_conflicts_are_deterministic(order):
    people = [_conflict_people()[i] for i in order]
    msgs, chats = _one_chat_per_handle(["+905321234567", "+15550102233", "+447700900123"])
    res = resolve_contacts(msgs, chats, people)
    names = dict(res.contacts.select("contact_id", "display_name").rows())
    assert names == {
        "c:+905321234567": "Ayşe Yılmaz",  # root store beats an account store
        "c:+15550102233": "Omar Work",  # then the card with more handles
        "c:+447700900123": "Zed B",  # then the lower Z_PK
    }
    assert res.conflicts == [
        Conflict("+15550102233", ("AddressBook-v22.abcddb", 6), [("AddressBook-v22.abcddb", 5)]),
        Conflict("+447700900123", ("AddressBook-v22.abcddb", 4), [("AddressBook-v22.abcddb", 8)]),
        Conflict("+905321234567", ("AddressBook-v22.abcddb", 9), [("Sources/B/AddressBook-v22.abcddb", 2)]),
    ]
    assert res.stats["conflicts"] == 3


def test_same_card_in_two_stores_is_one_person_not_a_conflict():
    people = [
        Person("AddressBook-v22.abcddb", 2, "Ayşe", ["+905321234567"], []),
        Person("Sources/X/AddressBook-v22.abcddb", 3, "ayşe", ["+90 532 123 45 67"], ["ayse@example.com"]),
    ]
    msgs, chats = _one_chat_per_handle(["+905321234567", "ayse@example.com"])
    res = resolve_contacts(msgs, chats, people)
    assert res.conflicts == []
    # the e-mail only on the account card still merges with the phone on the root card
    assert res.messages.get_column("contact_id").unique().to_list() == ["c:+905321234567"]
    assert res.contacts.item(0, "display_name") == "Ayşe"  # the root card names the person


def test_empty_inputs():
    res = resolve_contacts(_messages([]), _chats([]), [])
    assert res.messages.height == 0 and "contact_id" in res.messages.columns
    assert res.contacts.height == 0 and res.contacts.schema == CONTACTS_SCHEMA
    assert res.stats["contacts"] == 0


def test_end_to_end_with_written_stores(tmp_path):
    write_addressbook(
        tmp_path / "ab" / "AddressBook-v22.abcddb",
        [PersonRecord("Ayşe", "Yılmaz", phones=["+90 532 123 45 67"]), PersonRecord("Omar", None, phones=["(555) 010-2233"])],
    )
    ayse, omar, grp = "905321234567@s.whatsapp.net", "15550102233@s.whatsapp.net", "1203@g.us"
    write_whatsapp(
        tmp_path / "ChatStorage.sqlite",
        [WAChatRecord(ayse, "Ayşe", False), WAChatRecord(grp, "", True, members=[(ayse, "A"), (omar, "O")])],
        [
            WAMessageRecord(ayse, False, ayse, T0, "selam", "s1"),
            WAMessageRecord(grp, False, omar, T0 + timedelta(seconds=5), "hey", "s2"),
        ],
    )
    wa = read_whatsapp(tmp_path / "ChatStorage.sqlite")
    ab = read_addressbook(tmp_path / "ab")
    res = resolve_contacts(wa.messages, wa.chats, ab.people)
    assert res.contacts.select("contact_id", "display_name", "name_source").rows() == [
        ("c:+905321234567", "Ayşe Yılmaz", "addressbook"),
        ("g:whatsapp:1203@g.us", "Ayşe Yılmaz & Omar", "participants"),  # empty group subject: members
    ]


def test_resolving_twice_replaces_contact_id():
    msgs, chats = _one_chat_per_handle(["+15550102233"])
    once = resolve_contacts(msgs, chats, [])
    twice = resolve_contacts(once.messages, chats, [Person("AddressBook-v22.abcddb", 2, "Omar", ["+15550102233"], [])])
    assert twice.messages.columns == once.messages.columns
    assert twice.messages.get_column("contact_id").to_list() == ["c:+15550102233"]  # the new AddressBook wins
