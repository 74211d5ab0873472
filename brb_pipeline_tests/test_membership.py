"""Issue 31's people parts: tapbacks counted per person, and group membership over time from the
group events (added, removed, left), through a real ingest of a hand-built chat.db."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import polars as pl
import pytest

from brb_pipeline.core.contacts.membership import _spans, in_chat_during, membership_events
from brb_pipeline.core.contacts.reactions import person_reactions
from brb_pipeline_tests.helpers.bytescan import scan, summary
from brb_pipeline_tests.helpers.cli import brb

SAM, KIM, LEE, MAX, PAT = "sam@example.com", "kim@example.com", "lee@example.com", "max@example.com", "pat@example.com"


def _day(month: int, day: int, hour: int = 12) -> datetime:
    return datetime(2024, month, day, hour, tzinfo=timezone.utc)


def _chatdb(make_chatdb):
    """A group "Ski trip": Lee added by me on 1 March and removed by Sam on 20 May (never wrote),
    Pat wrote in April and left on 10 May, Max added on 5 June; chat.db lists only Sam, Kim, Max
    as its members now. Tapbacks: Sam loves my message, Kim reacts 😂 and with a sticker to
    Sam's, I like Sam's."""
    b = make_chatdb()
    h = {x: b.add_handle(x) for x in (SAM, KIM, LEE, MAX, PAT)}
    g = b.add_chat([h[SAM], h[KIM], h[MAX]], display_name="Ski trip", identifier="chat77", guid="iMessage;+;chat77")
    b.add_message(g, 0, "welcome to the ski trip planning", ts=_day(2, 20), is_from_me=True)
    b.add_message(g, 0, None, ts=_day(3, 1), is_from_me=True, item_type=1,
                  columns={"group_action_type": 0, "other_handle": h[LEE]})
    mine = b.add_message(g, 0, "who brings the fondue pot", ts=_day(4, 2), is_from_me=True)
    sams = b.add_message(g, h[SAM], "I will bring the fondue pot and the cheese", ts=_day(4, 3))
    b.add_message(g, h[PAT], "count me in for the chalet in Verbier", ts=_day(4, 4))
    b.add_message(g, h[KIM], "train tickets to Verbier are booked", ts=_day(4, 5))
    b.add_tapback(g, h[SAM], mine, "love", ts=_day(4, 5, 13))
    b.add_tapback(g, h[KIM], sams, "emoji", ts=_day(4, 5, 14), emoji="😂")
    b.add_tapback(g, h[KIM], sams, "sticker", ts=_day(4, 5, 15))
    b.add_tapback(g, 0, sams, "like", ts=_day(4, 5, 16), is_from_me=True)
    b.add_message(g, h[PAT], None, ts=_day(5, 10), item_type=3, columns={"group_action_type": 0})
    b.add_message(g, h[SAM], None, ts=_day(5, 20), item_type=1, columns={"group_action_type": 1, "other_handle": h[LEE]})
    b.add_message(g, 0, None, ts=_day(6, 5), is_from_me=True, item_type=1,
                  columns={"group_action_type": 0, "other_handle": h[MAX]})
    b.add_message(g, h[MAX], "thanks for adding me, I have snow chains", ts=_day(6, 10))
    b.add_message(g, h[KIM], "snow report says fresh powder in Verbier", ts=_day(7, 1))
    return b.close()


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    from brb_pipeline.demo.chatdb_writer import ChatDbBuilder

    root = tmp_path_factory.mktemp("membership")
    (root / "src").mkdir()
    db = _chatdb(lambda: ChatDbBuilder(root / "src" / "chat.db"))
    home = root / "home"
    r = brb("ingest", "--chat-db", str(db), "--progress", "none", "--no-insights", home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    return home


def _json(*args, home) -> dict:
    r = brb(*args, "--json", home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def _names(report: dict) -> list[str]:
    return sorted(m["name"] for m in report["list"])


def test_spans_follow_the_events():
    a, b, c = _day(3, 1), _day(5, 20), _day(6, 5)
    assert _spans([], None) == [[None, None]]
    assert _spans([(a, "in"), (b, "out")], None) == [[a, b]]
    assert _spans([(b, "out")], None) == [[None, b]]  # an original member, removed
    assert _spans([(a, "in"), (b, "out"), (c, "in")], None) == [[a, b], [c, None]]
    assert _spans([(b, "in")], _day(4, 1)) == [[None, None]]  # wrote before being "added": there already
    spans = json.dumps([[a.isoformat(), b.isoformat()]])
    assert in_chat_during(spans, _day(4, 1), _day(5, 1)) and not in_chat_during(spans, _day(6, 1), _day(7, 1))
    assert in_chat_during(None, _day(6, 1), None)


def test_events_and_reactions_from_frames():
    ev = {"kind": "event", "name": None, "mime": None, "bytes": None, "path": None, "exists": None, "text": None,
          "ref": None}
    msgs = pl.DataFrame({
        "chat_id": ["g", "g", "g", "g"], "sender": [None, "s", "p", "s"],
        "ts": [_day(3, 1), _day(5, 20), _day(5, 10), _day(4, 1)],
        "extras": [[{**ev, "text": "added", "name": "l"}], [{**ev, "text": "removed", "name": "l"}],
                   [{**ev, "text": "left the group"}], None],
    }, schema_overrides={"ts": pl.Datetime("us", "UTC")})
    got = membership_events(msgs).select("handle", "action").rows()
    assert got == [("l", "in"), ("p", "out"), ("l", "out")]
    rx = pl.DataFrame({"sender": ["s", None], "reactions": [
        [{"kind": "emoji", "sender": "k", "is_from_me": False, "ts": None, "emoji": "😂"},
         {"kind": "like", "sender": None, "is_from_me": True, "ts": None, "emoji": None}],
        [{"kind": "love", "sender": "s", "is_from_me": False, "ts": None, "emoji": None}]]})
    hp = pl.DataFrame({"handle": ["s", "k"], "person_id": ["h:s", "h:k"]})
    out = {r["person_id"]: r for r in person_reactions(rx, hp).iter_rows(named=True)}
    assert (out["h:s"]["reactions_sent"], out["h:s"]["reactions_received"]) == (1, 2)
    assert json.loads(out["h:k"]["reactions_json"]) == {"😂": 1} and out["h:k"]["reactions_received"] == 0


def test_tapbacks_are_counted_per_person(home):
    people = {p["handles"][0]: p for p in _json("people", home=home)["list"]}
    sam, kim = people[SAM], people[KIM]
    assert (sam["reactions_sent"], sam["reactions"]) == (1, {"love": 1})
    assert (kim["reactions_sent"], kim["reactions"]) == (2, {"sticker": 1, "😂": 1})
    assert sam["reactions_received"] == 3  # Kim's two and my like, on Sam's message
    assert kim["reactions_received"] == 0 and people[LEE]["reactions_sent"] == 0
    text = brb("people", home=home).stdout
    assert "tapbacks 2 given" in text and "😂×1" in text


def test_who_was_in_the_group_follows_adds_removals_and_leaves(home):
    every = _json("people", "--group", "Ski trip", home=home)
    assert _names(every) == sorted([SAM, KIM, LEE, MAX, PAT])  # Lee and Pat are gone from chat.db's list
    april = _json("people", "--group", "Ski trip", "--during", "2024-04", home=home)
    assert _names(april) == sorted([SAM, KIM, LEE, PAT])
    may_15 = _json("people", "--group", "Ski trip", "--during", "2024-05-15", home=home)
    assert _names(may_15) == sorted([SAM, KIM, LEE])
    june = _json("people", "--group", "Ski trip", "--during", "2024-06", home=home)
    assert _names(june) == sorted([SAM, KIM, MAX])
    lee = next(m for m in every["list"] if m["name"] == LEE)
    assert (lee["joined_ts"][:10], lee["left_ts"][:10]) == ("2024-03-01", "2024-05-20")
    assert next(m for m in every["list"] if m["name"] == SAM)["joined_ts"] is None  # there from the start
    people = {p["handles"][0]: p for p in _json("people", home=home)["list"]}
    assert people[PAT]["left_groups"] == [every["group"]] and people[SAM]["left_groups"] == []
    text = brb("people", "--group", "Ski trip", "--during", "2024-06", home=home).stdout
    assert "3 people in the group during 2024-06" in text and "joined 2024-06-05" in text


def test_bad_group_arguments_are_one_line_errors(home):
    for args, said in ((("--during", "2024-05"), "--during needs --group"),
                       (("--group", "Ski trip", "--during", "May"), "not a year, month or day"),
                       (("--group", "nobody-here"), "no contact matches")):
        r = brb("people", *args, home=home)
        assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_member_who_left_routes_to_the_group(home):
    """Lee never wrote and chat.db no longer lists him: the events make him a member, so
    ``--contact`` reaches the group."""
    out = _json("search", "fondue pot", "--contact", LEE, home=home)
    assert out["hits"] and all(h["contact"] == "Ski trip" or h["chat_id"].endswith("chat77") for h in out["hits"])


def test_the_assistant_person_tool_has_tapbacks_and_group_membership(home):
    from brb_pipeline_tests.helpers.cli import ENV
    from brb_pipeline_tests.helpers.mcp import answer, session

    _, (kim, pat) = session(home, ENV, [("person", {"name": KIM}), ("person", {"name": PAT})])
    kim, pat = answer(kim), answer(pat)
    assert kim["tapbacks"] == {"given": 2, "got": 0, "given_by_kind": {"sticker": 1, "😂": 1}}
    (group,) = pat["group_membership"]
    assert group["joined"] is None and group["left"][:10] == "2024-05-10"


@pytest.mark.slow  # e2e: forget then a byte scan
def test_forget_a_former_member_removes_them(home):
    assert {f.needle for f in scan(home, [LEE])} == {LEE}
    r = brb("forget", "--contact", LEE, "--yes", home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    assert LEE not in _names(_json("people", "--group", "Ski trip", home=home))
    found = scan(home, [LEE])
    assert not found, summary(found)
    # the next ingest reads chat.db again, with the events that name Lee: they stay out
    r = brb("ingest", "--progress", "none", "--no-insights", home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    assert LEE not in _names(_json("people", "--group", "Ski trip", home=home))
    found = scan(home, [LEE])
    assert not found, summary(found)
