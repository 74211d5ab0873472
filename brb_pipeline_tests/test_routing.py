"""Query routing: names and handles -> contact filter, the rest -> search text."""

import pytest

from brb_pipeline.core.contacts.routing import ContactRef, fold, route_query

CONTACTS = [
    ContactRef("c-ayse", "Ayşe Yılmaz", ("+905321234567", "ayse@example.com")),
    ContactRef("c-mehmet", "Mehmet Öz", ("+905551112233",)),
    ContactRef("c-john1", "John Smith", ("+14155550100",)),
    ContactRef("c-john2", "John Appleseed", ("john@apple.example",)),
    ContactRef("c-bob", "Bob", ("+442079460000",)),
    ContactRef("c-handle", "+15551234567", ("+15551234567",)),  # unresolved: name is the handle
]

CASES = [
    # (query, expected rest, expected contact ids, expected matched)
    # full name, accents and case folded
    ("dinner plans with ayse yilmaz", "dinner plans", ["c-ayse"], ["ayse yilmaz"]),
    # unique first name, possessive stays with the name
    ("Ayşe's birthday party", "birthday party", ["c-ayse"], ["Ayşe's"]),
    # Turkish case suffix after an apostrophe
    ("Ayşe'nin doğum günü", "doğum günü", ["c-ayse"], ["Ayşe'nin"]),
    # ambiguous first name (two Johns) does not route
    ("what did john say", "what did john say", [], []),
    # full name disambiguates
    ("what did John Smith say about rent", "what did say about rent", ["c-john1"], ["John Smith"]),
    # single-word display name
    ("from bob: the keys", "the keys", ["c-bob"], ["bob"]),
    # two contacts, dangling "and"/"with" dropped, first mention first
    ("trip with Mehmet and Ayşe", "trip", ["c-mehmet", "c-ayse"], ["Mehmet", "Ayşe"]),
    # e-mail handle
    ("ayse@example.com invoice", "invoice", ["c-ayse"], ["ayse@example.com"]),
    # phone typed with spaces and without the country code
    ("messages from 532 123 45 67 about keys", "messages about keys", ["c-ayse"], ["532 123 45 67"]),
    # E.164 typed in full
    ("+1 415 555 0100 dentist", "dentist", ["c-john1"], ["+1 415 555 0100"]),
    # a name inside another word does not match (whole words only)
    ("bobsled race", "bobsled race", [], []),
    # preposition not before a name is kept
    ("Mehmet talked about going to the sea", "talked about going to the sea", ["c-mehmet"], ["Mehmet"]),
    # a query that is only a name keeps its text
    ("Ayşe", "Ayşe", ["c-ayse"], ["Ayşe"]),
    # no match: unchanged, including punctuation and spacing
    ("  where is   the party?", "  where is   the party?", [], []),
    # a display name that is only a phone number is matched as a handle, not as words
    ("call 555 123 4567 back", "call back", ["c-handle"], ["555 123 4567"]),
]


@pytest.mark.parametrize(("query", "rest", "ids", "matched"), CASES)
def test_route_query(query, rest, ids, matched):
    routed = route_query(query, CONTACTS)
    assert routed.query == rest
    assert routed.contact_ids == ids
    assert routed.matched == matched


def test_route_is_deterministic_under_contact_order():
    a = route_query("trip with Mehmet and Ayşe", CONTACTS)
    b = route_query("trip with Mehmet and Ayşe", list(reversed(CONTACTS)))
    assert (a.query, a.contact_ids, a.matched) == (b.query, b.contact_ids, b.matched)


def test_duplicate_display_names_route_to_both():
    contacts = [ContactRef("x1", "Sam Lee", ()), ContactRef("x2", "Sam Lee", ())]
    assert route_query("sam lee photos", contacts).contact_ids == ["x1", "x2"]


def test_fold():
    assert fold("Görüşürüz İSTANBUL ılık") == "gorusuruz istanbul ilik"
