"""People in brb.db: the ``people`` and ``members`` tables (DDL in ``core/metadata.py``).

A store made before people existed has both tables empty while ``contacts`` is not;
:func:`has_people` tells callers, who then fall back to contacts or ask for a re-ingest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from brb_pipeline.core import DEFAULT_REGION
from brb_pipeline.core import metadata
from brb_pipeline.core.errors import BrbError
from brb_pipeline.core.contacts.routing import fold

if TYPE_CHECKING:
    import polars as pl

_PEOPLE_COLUMNS = ("person_id", "display_name", "name_source", "nickname", "handles_json", "channels_json",
                   "messages", "sent", "received", "group_messages", "first_ts", "last_ts",
                   "avg_response_s_me", "avg_response_s_them", "reactions_sent", "reactions_received",
                   "reactions_json")
_MEMBER_COLUMNS = ("chat_id", "person_id", "contact_id", "kind", "joined_ts", "left_ts", "first_ts", "last_ts",
                   "spans_json")


def replace_people(path: Path, people: pl.DataFrame, members: pl.DataFrame) -> None:
    """Replace both tables: ``people`` is PEOPLE_SCHEMA joined with PERSON_STATS_SCHEMA (and
    ``reactions.REACTION_STATS_SCHEMA`` when counted); ``members`` is MEMBERS_SCHEMA (joined with
    ``membership.SPANS_SCHEMA`` when known: missing columns are stored empty)."""
    def iso(v: Any) -> str | None:
        return v.isoformat() if v is not None else None

    rows = [
        (r["person_id"], r["display_name"], r["name_source"], r.get("nickname"), json.dumps(r["handles"] or []),
         json.dumps(r["channels"] or []), r.get("messages") or 0, r.get("sent") or 0, r.get("received") or 0,
         r.get("group_messages") or 0, iso(r.get("first_ts")), iso(r.get("last_ts")),
         r.get("avg_response_s_me"), r.get("avg_response_s_them"), r.get("reactions_sent") or 0,
         r.get("reactions_received") or 0, r.get("reactions_json"))
        for r in people.iter_rows(named=True)
    ]
    member_rows = [tuple(iso(r.get(k)) if k.endswith("_ts") else r.get(k) for k in _MEMBER_COLUMNS)
                   for r in members.iter_rows(named=True)]
    marks = ",".join("?" * len(_PEOPLE_COLUMNS))
    with metadata.connect(path) as c:
        c.execute("DELETE FROM people")
        c.execute("DELETE FROM members")
        c.executemany(f"INSERT INTO people ({','.join(_PEOPLE_COLUMNS)}) VALUES ({marks})", rows)
        c.executemany(f"INSERT INTO members ({','.join(_MEMBER_COLUMNS)}) VALUES ({','.join('?' * len(_MEMBER_COLUMNS))})",
                      member_rows)


def has_people(path: Path) -> bool:
    """Whether the store has people (False for a store made before people existed, or empty)."""
    if not path.exists():
        return False
    with metadata.connect(path) as c:
        return c.execute("SELECT 1 FROM people LIMIT 1").fetchone() is not None


def people_rows(path: Path) -> list[dict[str, Any]]:
    """Every person, most messages first, with ``handles``, ``channels`` and ``conversations``
    (``[{chat_id, contact_id, kind}]``)."""
    with metadata.connect(path) as c:
        cur = c.execute("SELECT * FROM people ORDER BY messages DESC, person_id")
        cols = [d[0] for d in cur.description]
        data = [dict(zip(cols, r)) for r in cur.fetchall()]
        convs: dict[str, list[dict[str, Any]]] = {}
        for chat_id, pid, cid, kind, joined, left, spans in c.execute(
                "SELECT chat_id, person_id, contact_id, kind, joined_ts, left_ts, spans_json FROM members "
                "ORDER BY chat_id"):
            convs.setdefault(pid, []).append({"chat_id": chat_id, "contact_id": cid, "kind": kind, "joined_ts": joined,
                                              "left_ts": left, "spans": json.loads(spans) if spans else None})
    for d in data:
        d["handles"] = json.loads(d.pop("handles_json"))
        d["channels"] = json.loads(d.pop("channels_json"))
        d["reactions"] = json.loads(d.pop("reactions_json") or "{}")
        d["conversations"] = convs.get(d["person_id"], [])
    return data


def search_view(path: Path) -> tuple[list[dict[str, Any]], dict[str, list[tuple[str, str, list[str]]]]] | None:
    """What search reads of the people, with one open of brb.db (in an encrypted home each open
    unseals the whole file): :func:`people_rows`'s rows and chat_id -> ``[(person_id,
    display_name, handles)]`` of its members, by name. None when the store has no people."""
    with metadata.connect(path) as c:
        cur = c.execute("SELECT person_id, display_name, nickname, handles_json FROM people")
        rows = [{"person_id": p, "display_name": n, "nickname": k, "handles": json.loads(h)} for p, n, k, h in cur]
        if not rows:
            return None
        members = c.execute("SELECT chat_id, person_id, contact_id FROM members ORDER BY chat_id").fetchall()
    by_id = {r["person_id"]: r for r in rows}
    by_chat: dict[str, list[tuple[str, str, list[str]]]] = {}
    for r in rows:
        r["conversations"] = []
    for chat_id, pid, cid in members:
        p = by_id[pid]
        p["conversations"].append({"chat_id": chat_id, "contact_id": cid})
        by_chat.setdefault(chat_id, []).append((pid, p["display_name"], p["handles"]))
    for ms in by_chat.values():
        ms.sort(key=lambda m: (m[1], m[0]))
    return rows, by_chat


def conversations_of(path: Path, person_ids: Sequence[str]) -> list[str]:
    """The contact ids (conversation units) of the chats the people take part in, sorted."""
    if not person_ids:
        return []
    marks = ",".join("?" * len(person_ids))
    with metadata.connect(path) as c:
        return [r[0] for r in c.execute(
            f"SELECT DISTINCT contact_id FROM members WHERE person_id IN ({marks}) ORDER BY contact_id",
            list(person_ids))]


def handle_names(path: Path) -> dict[str, str]:
    """handle -> the display name of its person, for every handle seen in a chat."""
    with metadata.connect(path) as c:
        return {h: name for name, h in c.execute(
            "SELECT p.display_name, j.value FROM people p, json_each(p.handles_json) j ORDER BY p.person_id")}


def match_people(rows: Sequence[dict[str, Any]], name: str, *, default_region: str = DEFAULT_REGION) -> list[dict[str, Any]]:
    """The people (:func:`people_rows`) ``name`` names as a person types it; first rule with a
    match wins: person id, handle (normalized), whole display name or nickname, then a display
    name with a word starting with it ("Mel" finds "Melanie Hartley")."""
    from brb_pipeline.core.records.handles import normalize_handle  # phonenumbers: only here

    q = name.strip()
    fq = fold(q)
    handle = normalize_handle(q, default_region)
    rules = (
        lambda r: r["person_id"] == q,
        lambda r: bool(handle) and handle in r["handles"],
        lambda r: fold(r["display_name"]) == fq or fold(r.get("nickname") or "") == fq,
        lambda r: any(w.startswith(fq) for w in fold(r["display_name"]).split()),
    )
    for rule in rules:
        hits = [r for r in rows if rule(r)]
        if hits:
            return hits
    return []


def _ambiguous(name: str, hits: Sequence[dict[str, Any]]) -> BrbError:
    shown = ", ".join(sorted(r["display_name"] for r in hits)[:5])
    return BrbError(f"{name.strip()!r} matches {len(hits)} people ({shown}): be more specific or use a handle")


def find_people(path: Path, names: Sequence[str], *, default_region: str = DEFAULT_REGION) -> list[str]:
    """Person ids for each of ``names`` (:func:`match_people`); one-line errors for no match or
    an ambiguous one."""
    rows = people_rows(path)
    out: list[str] = []
    for name in names:
        hits = match_people(rows, name, default_region=default_region)
        if not hits:
            raise BrbError(f"no person matches {name.strip()!r}: see `brb people` or use a handle "
                           "(+15551234567, a@b.com)")
        if len(hits) > 1:
            raise _ambiguous(name, hits)
        out.append(hits[0]["person_id"])
    return out


def _person_or_contacts(path: Path, rows: Sequence[dict[str, Any]], name: str, region: str
                        ) -> tuple[dict[str, Any] | None, list[str]]:
    """(the one person ``name`` names, or None and the contacts it names instead: a group chat's
    name, or any name in a store made before people). Raises on an ambiguous person."""
    from brb_pipeline.core.contacts.lookup import find_contacts

    hits = match_people(rows, name, default_region=region)
    if len(hits) > 1:
        raise _ambiguous(name, hits)
    if hits:
        return hits[0], []
    return None, find_contacts(path, [name], default_region=region)


def forget_targets(path: Path, names: Sequence[str], *, default_region: str = DEFAULT_REGION) -> tuple[list[str], list[str]]:
    """What ``brb forget --contact NAME`` removes: (contact ids, handles of people with no contact).

    A name is looked up among people first: a person with a 1:1 conversation is that contact; a
    person seen only in groups is their handles (their messages leave the groups, the others'
    stay). A name no person has (a group chat's name, a store made before people) is looked up
    among the contacts.
    """
    rows = people_rows(path)
    with metadata.connect(path) as c:
        direct = {r[0] for r in c.execute("SELECT contact_id FROM contacts WHERE kind = 'direct'")}
    contact_ids: list[str] = []
    handles: list[str] = []
    for name in names:
        person, contacts = _person_or_contacts(path, rows, name, default_region)
        if person is None:
            contact_ids.extend(contacts)
        elif person["person_id"] in direct:
            contact_ids.append(person["person_id"])
        else:
            handles.extend(person["handles"])
    return sorted(set(contact_ids)), sorted(set(handles))


def person_contact_ids(path: Path, names: Sequence[str], *, default_region: str = DEFAULT_REGION) -> list[str]:
    """The conversations (contact ids, 1:1 and groups) of the people ``names`` name: what
    ``brb ingest --contact NAME``, ``brb search --contact NAME`` and the Dagster
    ``contact_backfill_job`` take. A name no person has (a group chat's name, a store made before
    people) is looked up among the contacts."""
    rows = people_rows(path)
    out: set[str] = set()
    for name in names:
        person, contacts = _person_or_contacts(path, rows, name, default_region)
        out |= {c["contact_id"] for c in person["conversations"]} if person else set(contacts)
    return sorted(out)


def partitions_table(path: Path) -> str:
    """A markdown table for the Dagster UI, one row per person: each conversation they take part
    in (its name, 1:1 or group) and the partition (batch) that holds it. Names are identities:
    shown only where the home's Dagster metadata may hold them (``orchestration.results.safe_metadata``).
    """
    rows = ["| person | conversations (partition) |", "|---|---|"]
    with metadata.connect(path) as c:
        data = c.execute(
            "SELECT p.display_name, c.display_name, m.kind, c.batch FROM members m "
            "JOIN people p ON p.person_id = m.person_id JOIN contacts c ON c.contact_id = m.contact_id "
            "ORDER BY p.messages DESC, p.person_id, m.kind, c.rank").fetchall()
    by: dict[str, list[str]] = {}
    for person, conv, kind, batch in data:
        label = "1:1" if kind == "direct" else _md(conv)
        by.setdefault(person, []).append(f"{label} ({batch or 'no batch'})")
    rows += [f"| {_md(p)} | {' · '.join(convs)} |" for p, convs in by.items()]
    return "\n".join(rows)


def _md(text: str) -> str:
    """``text`` safe in one markdown table cell."""
    return " ".join(text.split()).translate(str.maketrans({c: "\\" + c for c in "\\|*_`[]<>#"}))


def group_members(path: Path, contact_id: str, since: Any = None, until: Any = None) -> list[dict[str, Any]]:
    """The people in the chats of ``contact_id`` at some time in ``[since, until)`` (datetimes;
    None: open on that side), with their ``joined_ts``, ``left_ts`` and ``spans``, by name.

    Membership over time comes from the group events (``membership.py``): someone removed in
    April is not in May's list; someone added in June is not either. A store ingested before
    membership was kept has no spans: everyone counts as in throughout."""
    from brb_pipeline.core.contacts.membership import in_chat_during

    with metadata.connect(path) as c:
        rows = c.execute(
            "SELECT p.person_id, p.display_name, p.handles_json, m.chat_id, m.joined_ts, m.left_ts, m.spans_json, "
            "m.first_ts, m.last_ts FROM members m JOIN people p ON p.person_id = m.person_id "
            "WHERE m.contact_id = ? ORDER BY p.display_name, p.person_id", (contact_id,)).fetchall()
    out: dict[str, dict[str, Any]] = {}
    for pid, name, handles, chat_id, joined, left, spans, first, last in rows:
        if not in_chat_during(spans, since, until):
            continue
        out.setdefault(pid, {"person_id": pid, "name": name, "handles": json.loads(handles), "chat_id": chat_id,
                             "joined_ts": joined, "left_ts": left, "first_ts": first, "last_ts": last,
                             "spans": json.loads(spans) if spans else None})
    return list(out.values())


def groups_of_handles(path: Path, handles: Sequence[str]) -> list[str]:
    """The group conversations (contact ids) any person holding one of ``handles`` is or was a
    member of: a group whose events name them (added, removed) holds them in its passages even
    when they never wrote and the chat lists them no more."""
    wanted = set(handles)
    if not wanted or not Path(path).exists():
        return []
    with metadata.connect(path) as c:
        pids = [pid for pid, hs in c.execute("SELECT person_id, handles_json FROM people") if wanted & set(json.loads(hs))]
        if not pids:
            return []
        return sorted({r[0] for r in c.execute(
            f"SELECT DISTINCT contact_id FROM members WHERE kind = 'group' AND person_id IN ({','.join('?' * len(pids))})",
            pids)})
