"""People, not handles (issue 28): everyone in a group chat is a named person.

One archive in the real schemas (chat.db, AddressBook, WhatsApp, Mail), ingested once with real
`brb` subprocesses (hash embedder): group-only people, three Johns and a Jon, a nickname, an
unknown handle in a group, a WhatsApp group and a Mail thread with several people. Numbers on
the cards are typed as people type them; chat.db holds them in E.164.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pytest

from brb_pipeline.demo.addressbook_writer import PersonRecord, write_addressbook
from brb_pipeline.demo.chatdb_writer import ChatDbBuilder
from brb_pipeline.demo.mail_writer import OWNER, MailRecord, rfc822, write_mail_store
from brb_pipeline.demo.whatsapp_writer import WAChatRecord, WAMessageRecord, write_whatsapp
from brb_pipeline_tests.helpers.bytescan import scan, summary
from brb_pipeline_tests.helpers.cli import ENV, brb

T0 = datetime(2024, 3, 1, 17, 0, tzinfo=timezone.utc)

# name -> (card, E.164 handle as chat.db holds it)
CARDS = {
    "Caroline Brooks": (PersonRecord("Caroline", "Brooks", phones=["(415) 555-0134"]), "+14155550134"),
    "Melanie Hartley": (PersonRecord("Melanie", "Hartley", phones=["415.555.0177"]), "+14155550177"),
    "John Smith": (PersonRecord("John", "Smith", phones=["+1 415 555 0101"]), "+14155550101"),
    "John Carter": (PersonRecord("John", "Carter", phones=["415-555-0102"]), "+14155550102"),
    "John Baker": (PersonRecord("John", "Baker", phones=["4155550103"]), "+14155550103"),
    "Jon Reyes": (PersonRecord("Jon", "Reyes", phones=["(415) 555 0104"]), "+14155550104"),
    "Dave Kim": (PersonRecord("Dave", "Kim", nickname="Davey", phones=["415 555 0105"]), "+14155550105"),
    "Nate Ortiz": (PersonRecord("Nate", "Ortiz", phones=["+14155550106"]), "+14155550106"),
    "Priya Shah": (PersonRecord("Priya", "Shah", phones=["+44 7700 900555"]), "+447700900555"),
    "Tom Wells": (PersonRecord("Tom", "Wells", emails=["Tom@Wells.example"]), "tom@wells.example"),
    "Sara Lind": (PersonRecord("Sara", "Lind", emails=["sara@lind.example"]), "sara@lind.example"),
}
STRANGER = "+14155550199"  # in the book club, on no card

# chat -> (title, members, topic words): every member writes in turn, then me
IMESSAGE_CHATS = {
    "cabin": (None, ["Caroline Brooks", "Melanie Hartley"], "cabin firewood"),
    "climbing": ("Climbing crew", ["John Smith", "Dave Kim"], "bouldering chalk"),
    "books": ("Book club", ["John Carter", "Nate Ortiz", STRANGER], "novel chapter"),
    "surf": (None, ["Jon Reyes", "Melanie Hartley"], "surfboard waves"),
    "baker": (None, ["John Baker"], "invoice mortgage"),
    "caroline": (None, ["Caroline Brooks"], "birthday cake"),
}
ROUNDS = 3  # each member and I write this many messages per chat
GROUP_ONLY = {"Melanie Hartley", "John Smith", "Dave Kim", "John Carter", "Nate Ortiz", "Jon Reyes", "Priya Shah",
              "Tom Wells", "Sara Lind", STRANGER}


def _text(chat: str, who: str, i: int) -> str:
    return f"{IMESSAGE_CHATS.get(chat, (None, None, 'tram pastel'))[2]} plans number {i} from {who.split()[0].lower()}"


def _imessage(path: Path) -> None:
    b = ChatDbBuilder(path, seed=28)
    rowid = {name: b.add_handle(h) for name, (_, h) in CARDS.items() if h.startswith("+1")}
    rowid[STRANGER] = b.add_handle(STRANGER)
    t = T0
    for chat, (title, members, _) in IMESSAGE_CHATS.items():
        c = b.add_chat([rowid[m] for m in members], display_name=title)
        for r in range(ROUNDS):
            for who in [*members, "Me"]:
                t += timedelta(minutes=3)
                b.add_message(c, 0 if who == "Me" else rowid[who], _text(chat, who, r), ts=t, is_from_me=who == "Me")
        t += timedelta(days=1)
    b.close()


def _whatsapp(path: Path) -> None:
    jid = {n: CARDS[n][1].lstrip("+") + "@s.whatsapp.net" for n in ("Priya Shah", "Melanie Hartley")}
    group = "120363000000000028@g.us"
    chats = [WAChatRecord(group, "Lisbon trip", True, [(jid[n], n) for n in jid])]
    msgs, t = [], T0 + timedelta(days=30)
    for r in range(ROUNDS):
        for who in ["Priya Shah", "Melanie Hartley", "Me"]:
            t += timedelta(minutes=3)
            msgs.append(WAMessageRecord(group, who == "Me", None if who == "Me" else jid[who], t,
                                        _text("lisbon", who, r), f"WA{r}{who[:2]}"))
    write_whatsapp(path, chats, msgs)


def _mail(mail_dir: Path) -> None:
    tom, sara = ("Tom Wells", "tom@wells.example"), ("Sara Lind", "sara@lind.example")
    s = "Quarterly budget review"
    t = [T0 + timedelta(days=40, hours=h) for h in range(3)]
    body = ["Attached are the spreadsheet numbers for the quarterly budget review meeting.",
            "Thanks Tom, the spreadsheet looks right to me except for the travel line.",
            "Agreed on the travel line, let us fix it before the budget meeting."]
    write_mail_store(mail_dir, [
        MailRecord(1, "INBOX", tom, [OWNER, sara], s, t[0], rfc822(tom, [OWNER, sara], s, t[0], body[0])),
        MailRecord(1, "INBOX", sara, [OWNER, tom], s, t[1], rfc822(sara, [OWNER, tom], "Re: " + s, t[1], body[1]),
                   reply=True),
        MailRecord(1, "Sent Messages", OWNER, [tom, sara], s, t[2],
                   rfc822(OWNER, [tom, sara], "Re: " + s, t[2], body[2]), reply=True),
    ])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("people")
    root = base / "archive"
    write_addressbook(root / "ab" / "AddressBook-v22.abcddb", [card for card, _ in CARDS.values()])
    _imessage(root / "chat.db")
    _whatsapp(root / "ChatStorage.sqlite")
    _mail(root / "Mail")
    env = {**ENV, "BRB_KEY_DIR": str(root / "keys")}
    home = base / "home"
    r = brb("ingest", "--chat-db", str(root / "chat.db"), "--addressbook", str(root / "ab"), "--whatsapp",
            str(root / "ChatStorage.sqlite"), "--mail", str(root / "Mail"), "--progress", "none", "--no-insights",
            "--no-encryption", home=home, env=env)  # plaintext: the byte scan below can see a name
    assert r.returncode == 0, r.stderr[-3000:]
    return {"root": root, "home": home, "env": env}


def _json(world, *args) -> dict:
    r = brb(*args, "--json", home=world["home"], env=world["env"])
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def _people(world) -> dict[str, dict]:
    return {p["name"]: p for p in _json(world, "people")["list"]}


def test_status_counts_people_named_people_and_conversations(world):
    st = _json(world, "status")
    # 11 cards + the stranger; 6 iMessage chats, the WhatsApp group and the Mail thread
    assert (st["people"], st["named_people"], st["conversations"]) == (12, 11, 8)
    report = _json(world, "people")
    assert (report["people"], report["named_people"], report["group_only_people"]) == (12, 11, len(GROUP_ONLY))


def test_per_person_stats_count_group_messages(world):
    people = _people(world)
    mel = people["Melanie Hartley"]  # two iMessage groups and the WhatsApp group, never 1:1
    assert (mel["received"], mel["sent"], mel["messages"], mel["group_messages"]) == (9, 9, 18, 18)
    assert mel["channels"] == ["imessage", "whatsapp"] and (mel["conversations"], mel["groups"]) == (3, 3)
    caro = people["Caroline Brooks"]  # a group and a 1:1 chat
    assert (caro["received"], caro["sent"], caro["group_messages"], caro["conversations"]) == (6, 6, 6, 2)
    # each of her messages answers mine 3 minutes before (or opens the chat); mine answer hers
    assert caro["avg_response_s_them"] == pytest.approx(180.0) and caro["avg_response_s_me"] == pytest.approx(180.0)
    assert people[STRANGER]["received"] == 3 and people[STRANGER]["named"] is False
    assert people["Tom Wells"]["channels"] == ["mail"] and people["Tom Wells"]["received"] == 1
    assert people["Sara Lind"]["sent"] == 1  # my reply in the thread


def test_every_known_sender_is_named_in_the_passages(world):
    con = duckdb.connect(str(world["home"] / "brb.duckdb"), read_only=True)
    rows = [r[0] for r in con.execute("SELECT content FROM chunks").fetchall()]
    con.close()
    senders = {line.split(" (")[0] for c in rows for line in c.split("\n")}
    # every card's name, "Me" and the one handle no card has: no card's handle shows raw
    assert senders == set(CARDS) | {"Me", STRANGER}, senders


@pytest.mark.parametrize("name", [n for n in CARDS])
def test_every_participant_routes_to_all_their_conversations(world, name):
    people = _people(world)
    person = people[name]
    first = name.split()[0]
    out = _json(world, "search", f"what did {first} say about the plans", "--mode", "lexical")
    routing = out["routing"]
    assert person["person_id"] in routing["person_ids"], routing
    assert set(person["conversation_ids"]) <= set(routing["contact_ids"]), routing
    johns = {n for n in CARDS if n.startswith("John ")}
    if name in johns:  # three Johns, nothing else in the question: all of them, and said so
        assert routing["ambiguous"] and set(routing["ambiguous"][0]["people"]) == johns
    else:
        assert routing["ambiguous"] == []
    for hit in out["hits"]:  # every line of every hit names its sender
        names = {p["name"] for p in hit["participants"]} | {"Me"}
        assert all(line["sender"] in names for line in hit["lines"]), hit["lines"]


@pytest.mark.parametrize("query, who", [
    ("what did Hartley say about the surfboard", "Melanie Hartley"),  # last name
    ("Davey's bouldering plans", "Dave Kim"),  # nickname, possessive
    ("Melanie's cabin plans", "Melanie Hartley"),  # possessive
    ("what did John and Dave say about chalk", "John Smith"),  # the John who shares a chat with Dave
    ("John from the Climbing crew", "John Smith"),  # the John in the group the question names
    ("John Carter novel", "John Carter"),  # the full name
])
def test_names_route_and_ambiguous_johns_resolve_from_the_question(world, query, who):
    people = _people(world)
    routing = _json(world, "search", query, "--mode", "lexical")["routing"]
    assert people[who]["person_id"] in routing["person_ids"] and routing["ambiguous"] == [], routing
    assert not {p["person_id"] for n, p in people.items() if n.startswith("John") and n != who} & set(
        routing["person_ids"]), routing


def test_contact_and_from_filters(world):
    people = _people(world)
    mel = people["Melanie Hartley"]
    out = _json(world, "search", "plans", "--contact", "Melanie", "--mode", "lexical", "-k", "50")
    assert set(out["filters"]["contact_ids"]) == set(mel["conversation_ids"])
    assert {h["contact_id"] for h in out["hits"]} == set(mel["conversation_ids"])
    out = _json(world, "search", "plans", "--from", "Jon Reyes", "--mode", "lexical", "-k", "50")
    assert out["hits"] and all(any(line["sender"] == "Jon Reyes" for line in h["lines"]) for h in out["hits"])
    assert {h["contact_id"] for h in out["hits"]} == set(people["Jon Reyes"]["conversation_ids"])
    r = brb("search", "plans", "--from", "Nobody Here", home=world["home"], env=world["env"])
    assert r.returncode == 2 and r.stderr.startswith("brb: error: no person matches") and "Traceback" not in r.stderr


def test_json_lines_carry_sender_and_handle(world):
    out = _json(world, "search", "novel chapter", "--contact", "Nate Ortiz", "--mode", "lexical")
    lines = [line for h in out["hits"] for line in h["lines"]]
    by = {line["sender"]: line["sender_handle"] for line in lines}
    assert by["Nate Ortiz"] == CARDS["Nate Ortiz"][1] and by["John Carter"] == CARDS["John Carter"][1]
    assert by[STRANGER] == STRANGER and by["Me"] is None
    assert {p["name"] for p in out["hits"][0]["participants"]} == {"John Carter", "Nate Ortiz", STRANGER}


@pytest.mark.slow  # e2e: forget then a byte scan
def test_forget_a_group_only_person(world, tmp_path):
    """Nate is only in the book club: his name, handle and lines go from every store; John
    Carter's and the stranger's lines in that group stay searchable."""
    from brb_pipeline_tests.helpers.homes import copy_home

    home = copy_home(world["home"], tmp_path / "home")
    env = world["env"]
    needles = ["Nate Ortiz", CARDS["Nate Ortiz"][1], "from nate"]
    assert scan(home, needles), "the scan finds Nate before forget"
    r = brb("forget", "--contact", "Nate", "--yes", home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    found = [f for f in scan(home, needles)]
    assert not found, summary(found)
    r = brb("ingest", "--progress", "none", "--no-insights", home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not scan(home, needles), summary(scan(home, needles))
    out = _json({"home": home, "env": env}, "search", "novel chapter", "--contact", "John Carter", "--mode",
                "lexical", "-k", "20")
    senders = {line["sender"] for h in out["hits"] for line in h["lines"]}
    assert {"John Carter", STRANGER, "Me"} <= senders and "Nate Ortiz" not in senders
    assert "Nate Ortiz" not in {p["name"] for p in _people({"home": home, "env": env}).values()}


def test_a_persons_conversations_and_partitions_are_found_by_name(world):
    """Dagster: `contact_backfill_job` / `brb ingest --contact` take a person to all their
    conversations, and the `people_partitions` table names each one's partition."""
    from brb_pipeline.core.contacts.people_db import partitions_table, person_contact_ids

    db = world["home"] / "brb.db"
    mel = _people(world)["Melanie Hartley"]
    assert person_contact_ids(db, ["Melanie"]) == sorted(mel["conversation_ids"])
    assert person_contact_ids(db, ["Climbing crew"]) == [c for c in _people(world)["Dave Kim"]["conversation_ids"]]
    con = sqlite3.connect(db)
    batch = dict(con.execute("SELECT contact_id, batch FROM contacts").fetchall())
    con.close()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in partitions_table(db).splitlines()[2:]}
    assert set(rows) == set(CARDS) | {STRANGER}
    for cid in mel["conversation_ids"]:
        assert f"({batch[cid]})" in rows["Melanie Hartley"]
    assert "Lisbon trip" in rows["Melanie Hartley"] and "1:1" not in rows["Melanie Hartley"]
    assert "1:1" in rows["Caroline Brooks"] and "Climbing crew" in rows["John Smith"]


def test_a_store_made_before_people_exist_says_so_and_still_searches(world, tmp_path):
    """Old brb.db (no people rows): `brb people` and `--from` are one line asking for an ingest;
    search routes by contact as before; status counts 0 people."""
    from brb_pipeline_tests.helpers.homes import copy_home

    home = copy_home(world["home"], tmp_path / "old")
    con = sqlite3.connect(home / "brb.db")
    con.execute("DELETE FROM members")
    con.execute("DELETE FROM people")
    con.commit()
    con.close()
    old = {"home": home, "env": world["env"]}
    r = brb("people", home=home, env=world["env"])
    assert r.returncode == 2 and "run `brb ingest`" in r.stderr and "Traceback" not in r.stderr
    r = brb("search", "plans", "--from", "Jon Reyes", home=home, env=world["env"])
    assert r.returncode == 2 and "run `brb ingest`" in r.stderr and "Traceback" not in r.stderr
    out = _json(old, "search", "what did Caroline Brooks say about the cake", "--mode", "lexical")
    assert out["routing"]["contact_ids"] == [_people(world)["Caroline Brooks"]["person_id"]]  # her 1:1 contact
    assert "lines" not in out["hits"][0]
    assert _json(old, "status")["people"] == 0


# --- the pure parts, on hand-made inputs -----------------------------------------------------

def test_passage_lines_reads_senders_back():
    from brb_pipeline.core.contacts.speakers import passage_lines

    members = [("c:1", "Ann Lee", ["+1"]), ("c:2", "Ann Lee Jr", ["+2"]), ("h:3", "+3", ["+3"])]
    content = "Ann Lee Jr (10:01): hi: there\nAnn Lee (10:02): yo\n+3: no time\nMe (10:03): ok\nweird line"
    got = [(x["sender"], x["sender_handle"], x["time"], x["text"]) for x in passage_lines(content, members)]
    assert got == [("Ann Lee Jr", "+2", "10:01", "hi: there"), ("Ann Lee", "+1", "10:02", "yo"),
                   ("+3", "+3", None, "no time"), ("Me", None, "10:03", "ok"), (None, None, None, "weird line")]
    # two members with one name: the line is theirs, but whose handle is unknown
    assert passage_lines("Sam (09:00): x", [("c:a", "Sam", ["+a"]), ("c:b", "Sam", ["+b"])])[0][
        "sender_handle"] is None


def test_people_router_narrows_and_reports_ambiguity():
    from brb_pipeline.core.contacts.people_routing import PeopleRouter
    from brb_pipeline.core.contacts.routing import ContactRef

    people = [ContactRef("j1", "John Smith"), ContactRef("j2", "John Carter"), ContactRef("d", "Dave Kim", (), "Davey"),
              ContactRef("y", "Riley Young")]
    convs = {"j1": {"g:climb"}, "j2": {"g:books", "c:j2"}, "d": {"g:climb"}, "y": {"c:y"}}
    router = PeopleRouter(people, convs, {"g:climb": "Climbing crew", "g:books": "Book club"})
    r = router.route("what did John say")
    assert r.person_ids == ["j1", "j2"] and r.ambiguous[0]["people"] == ["John Smith", "John Carter"]
    assert r.contact_ids == ["c:j2", "g:books", "g:climb"]
    assert router.route("John and Davey's chalk").person_ids == ["j1", "d"]  # shares a chat with Dave
    r = router.route("John from the book club")
    assert r.person_ids == ["j2"] and r.ambiguous == [] and r.contact_ids == ["c:j2", "g:books"]
    assert router.route("what did Young say").person_ids == ["y"]  # a capitalized last name
    assert router.route("young people say what").person_ids == []  # lower case: a word
    assert router.route("Young people say what").person_ids == []  # first word: any word has a capital


def test_person_stats_count_group_messages_and_replies_each_way():
    from brb_pipeline.core.contacts.people import person_stats
    import polars as pl

    t = [T0 + timedelta(seconds=60 * i) for i in range(6)]
    msgs = pl.DataFrame({
        "chat_id": ["g", "g", "g", "d", "d", "d"], "message_id": list("abcdef"),
        "sender": ["+1", "+2", None, "+1", None, "+1"], "is_from_me": [False, False, True, False, True, False],
        "ts": t})
    members = pl.DataFrame({"chat_id": ["g", "g", "d"], "person_id": ["p1", "p2", "p1"],
                            "contact_id": ["g:g", "g:g", "p1"], "kind": ["group", "group", "direct"]})
    hp = pl.DataFrame({"handle": ["+1", "+2"], "person_id": ["p1", "p2"]})
    out = {r["person_id"]: r for r in person_stats(msgs, members, hp).iter_rows(named=True)}
    p1, p2 = out["p1"], out["p2"]
    assert (p1["received"], p1["sent"], p1["messages"], p1["group_messages"]) == (3, 2, 5, 2)
    assert (p2["received"], p2["sent"], p2["messages"], p2["group_messages"]) == (1, 1, 2, 2)
    assert p1["avg_response_s_them"] == 60.0  # f answers e one minute later
    assert p1["avg_response_s_me"] == 60.0 and p2["avg_response_s_me"] == 60.0  # e answers d; c answers b


def test_contact_filter_takes_a_group_name_and_refuses_an_ambiguous_person(world):
    people = _people(world)
    out = _json(world, "search", "plans", "--contact", "Climbing crew", "--mode", "lexical")
    assert out["filters"]["contact_ids"] == [c for c in people["Dave Kim"]["conversation_ids"] if c.startswith("g:")]
    r = brb("search", "plans", "--contact", "John", home=world["home"], env=world["env"])
    assert r.returncode == 2 and "'John' matches 3 people" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("query, who", [
    ("what did John say about bouldering and chalk", "John Smith"),
    ("what did John say about the novel chapter", "John Carter"),
    ("what did John say about the invoice mortgage", "John Baker"),
])
def test_an_ambiguous_john_still_finds_the_right_johns_passage(world, query, who):
    """All three Johns are searched (and said so); the rest of the question ranks the right one's
    conversation first."""
    people = _people(world)
    out = _json(world, "search", query, "--mode", "lexical", "-k", "3")
    assert len(out["routing"]["ambiguous"]) == 1
    assert out["hits"][0]["contact_id"] in people[who]["conversation_ids"]


def test_mcp_names_group_members_and_takes_a_group_only_person_as_from(world):
    """`brb mcp` reads the same people: every group member is named in its lines, and ``from``
    takes a person seen only in groups."""
    from brb_pipeline_tests.helpers.mcp import answer, session

    _, (by_contact, by_sender) = session(world["home"], world["env"], [
        ("search", {"query": "novel chapter", "contact": "Nate Ortiz", "mode": "lexical"}),
        ("search", {"query": "plans", "from": "Jon Reyes", "mode": "lexical", "k": 20}),
    ])
    lines = [line for h in answer(by_contact)["hits"] for line in h["lines"]]
    by = {line["sender"]: line["sender_handle"] for line in lines}
    assert by["Nate Ortiz"] == CARDS["Nate Ortiz"][1] and by["John Carter"] == CARDS["John Carter"][1]
    assert by[STRANGER] == STRANGER and by["Me"] is None
    hits = answer(by_sender)["hits"]
    assert hits and all(any(line["sender"] == "Jon Reyes" for line in h["lines"]) for h in hits)
