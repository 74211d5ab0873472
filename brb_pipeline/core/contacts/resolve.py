"""Resolve message handles to contacts: one contact per person, group chat, or unknown bucket.

Rules:

* AddressBook phone numbers are normalized to E.164 with the user's default region (numbers typed
  with ``+CC`` keep their country); e-mails are compared lower-case. Exact matches only: no "last
  10 digits" matching, which collides across countries (+44 7700 900123 is not +1 770-090-0123).
* One person is one contact, whatever handles and channels they used: AddressBook cards that
  share a handle and the same name (the same card in the root store and an account store) are
  one person, and the direct chats of all their handles merge.
* contact_id: ``"c:" + min(handles of the person seen in chats/messages)`` for a person;
  ``"h:" + handle`` for an unresolved direct handle; ``"g:" + chat_id`` for a group chat;
  ``UNKNOWN_CONTACT_ID`` for orphan messages and direct chats without a participant.
* A handle on two cards with different names is a conflict, settled deterministically: the card
  from the root store, then the card with more handles, then the lower file path, then the lower
  Z_PK. Conflicts are reported (with pks, never names) so a user can fix the card.

All message-level work is polars joins; Python loops only run over AddressBook cards and chats.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import polars as pl

from brb_pipeline.core import DEFAULT_REGION
from brb_pipeline.core.contacts.people import People, resolve_people
from brb_pipeline.core.records.handles import is_email, normalize_handle
from brb_pipeline.core.records import UNKNOWN_CONTACT_ID
from brb_pipeline.core.records import Person

log = logging.getLogger(__name__)

UNKNOWN_NAME = "Unknown"
UNNAMED_GROUP = "Unnamed group"

CONTACTS_SCHEMA = pl.Schema(
    {
        "contact_id": pl.Utf8,
        "display_name": pl.Utf8,  # never null
        "name_source": pl.Utf8,  # "addressbook" | "chat_name" | "participants" | "handle" | "unknown"
        "kind": pl.Utf8,  # "direct" | "group" | "unknown"
        "channels": pl.List(pl.Utf8),  # sorted
        "handles": pl.List(pl.Utf8),  # sorted normalized handles
    }
)


@dataclass
class Conflict:
    """One handle found on AddressBook cards with different names.

    Attributes:
        handle: the normalized handle.
        chosen: (source file relative to the AddressBook root, Z_PK) of the card that won.
        others: the losing cards, same shape, sorted.
    """

    handle: str
    chosen: tuple[str, int]
    others: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class ContactResolution:
    """What :func:`resolve_contacts` returns.

    Attributes:
        messages: the input messages, same rows and order, plus a ``contact_id`` Utf8 column.
        contacts: one row per contact that has at least one message (CONTACTS_SCHEMA), sorted.
        conflicts: handles claimed by differently named cards, sorted by handle.
        stats: ``contacts``, ``named_contacts`` (named from AddressBook, a chat name or
            participants), ``handles_resolved``, ``handles_unresolved`` (distinct handles seen in
            chats and senders), ``conflicts``, ``addressbook_handles``, ``addressbook_bad_numbers``,
            ``people`` and ``named_people`` (see :mod:`.people`).
        people: everyone taking part in a chat, and where (:class:`.people.People`).
    """

    messages: pl.DataFrame
    contacts: pl.DataFrame
    conflicts: list[Conflict]
    stats: dict[str, int]
    people: People | None = None


def person_handles(people: Sequence[Person], default_region: str = DEFAULT_REGION) -> tuple[list[set[str]], int]:
    """Normalized handles of each card (E.164 phones, lower-case e-mails), and the count of
    phone numbers that could not be normalized (they can match nothing and are dropped)."""
    out, bad = [], 0
    for p in people:
        hs: set[str] = set()
        for raw in p.phones:
            h = normalize_handle(raw, default_region)
            if h and h.startswith("+") and h[1:].isdigit():
                hs.add(h)
            elif h and is_email(h):  # an e-mail typed into a phone field
                hs.add(h)
            else:
                bad += 1
        for raw in p.emails:
            h = normalize_handle(raw, default_region)
            if h and is_email(h):
                hs.add(h)
        out.append(hs)
    return out, bad


def _handle_owners(
    people: Sequence[Person], handles: list[set[str]]
) -> tuple[dict[str, int], dict[int, str], list[Conflict]]:
    """handle -> person group id, group id -> display name, conflicts."""
    def priority(i: int) -> tuple:
        p = people[i]
        return (0 if "/" not in p.source else 1, -len(handles[i]), p.source, p.record_pk)

    holders: dict[str, list[int]] = {}
    for i, hs in enumerate(handles):
        for h in hs:
            holders.setdefault(h, []).append(i)

    parent = list(range(len(people)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:  # the higher-priority card becomes the root, so it names the group
            if priority(rb) < priority(ra):
                ra, rb = rb, ra
            parent[rb] = ra

    chosen: dict[str, int] = {}
    conflicts: list[Conflict] = []
    for h in sorted(holders):
        idx = sorted(holders[h], key=priority)
        win = idx[0]
        chosen[h] = win
        key = people[win].display_name.casefold()
        losers = []
        for j in idx[1:]:
            if people[j].display_name.casefold() == key:
                union(win, j)
            else:
                losers.append((people[j].source, people[j].record_pk))
        if losers:
            conflicts.append(Conflict(h, (people[win].source, people[win].record_pk), sorted(losers)))
    owner = {h: find(i) for h, i in chosen.items()}
    names = {g: people[g].display_name for g in set(owner.values())}
    return owner, names, conflicts


def _join_names(names: pl.Expr) -> pl.Expr:
    """"Ayşe", "Ayşe & Omar", "Ayşe, Omar & Zed", "Ayşe, Omar & 2 more" from a list of names."""
    n = names.list.len()
    a, b, c = names.list.get(0, null_on_oob=True), names.list.get(1, null_on_oob=True), names.list.get(2, null_on_oob=True)
    return (
        pl.when(n == 0).then(None)
        .when(n == 1).then(a)
        .when(n == 2).then(pl.concat_str(a, pl.lit(" & "), b))
        .when(n == 3).then(pl.concat_str(a, pl.lit(", "), b, pl.lit(" & "), c))
        .otherwise(pl.concat_str(a, pl.lit(", "), b, pl.lit(" & "), (n - 2).cast(pl.Utf8), pl.lit(" more")))
    )


class _NameRule(NamedTuple):
    """One row of the naming precedence: where ``when`` holds (None: every row left), the contact
    is called ``name`` and its ``name_source`` is ``source``; ``named`` counts it as named."""

    when: pl.Expr | None
    name: pl.Expr
    source: str
    named: bool


# Who names a contact, first match wins. display_name and name_source are both read from this
# one table, so a name and the label of where it came from cannot disagree.
NAME_PRECEDENCE: tuple[_NameRule, ...] = (
    _NameRule(pl.col("kind") == "unknown", pl.lit(UNKNOWN_NAME), "unknown", False),
    _NameRule(pl.col("person_name").is_not_null(), pl.col("person_name"), "addressbook", True),
    _NameRule(pl.col("chat_name").is_not_null(), pl.col("chat_name"), "chat_name", True),
    _NameRule(pl.col("participants_name").is_not_null(), pl.col("participants_name"), "participants", True),
    _NameRule(pl.col("kind") == "group", pl.lit(UNNAMED_GROUP), "unknown", False),
    _NameRule(None, pl.col("handle"), "handle", False),
)
NAMED_SOURCES = tuple(dict.fromkeys(r.source for r in NAME_PRECEDENCE if r.named))
_EMPTY_LIST = pl.lit([], dtype=pl.List(pl.Utf8))


def _by_precedence(pick: Callable[[_NameRule], pl.Expr]) -> pl.Expr:
    """``when(rule.when).then(pick(rule))`` over :data:`NAME_PRECEDENCE`, the last rule as otherwise."""
    *rules, last = NAME_PRECEDENCE
    expr = pl.when(rules[0].when).then(pick(rules[0]))
    for rule in rules[1:]:
        expr = expr.when(rule.when).then(pick(rule))
    return expr.otherwise(pick(last))


def contact_names(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` plus ``display_name`` and ``name_source`` by :data:`NAME_PRECEDENCE`.

    Args:
        rows: columns ``kind``, ``person_name``, ``chat_name``, ``participants_name``, ``handle``.
    """
    return rows.with_columns(
        _by_precedence(lambda r: r.name).alias("display_name"),
        _by_precedence(lambda r: pl.lit(r.source)).alias("name_source"),
    )


def resolve_contacts(
    messages: pl.DataFrame,
    chats: pl.DataFrame,
    people: Sequence[Person],
    *,
    default_region: str = DEFAULT_REGION,
    former: pl.DataFrame | None = None,
) -> ContactResolution:
    """Assign every message a contact and name every contact.

    Args:
        messages: MESSAGE_SCHEMA rows of any channels, shape (n_messages, 13).
        chats: CHAT_SCHEMA rows of the same channels, shape (n_chats, 5).
        people: AddressBook cards (``read_addressbook(...).people``).
        default_region: ISO region for AddressBook numbers typed without ``+CC``.
        former: ``chat_id, handle`` of people the group events name (added, removed, left:
            ``membership.membership_events``); they are members of those chats even when the chat
            lists them no more and they never wrote.

    Returns:
        ContactResolution (see its attributes).
    """
    handles, bad_numbers = person_handles(people, default_region)
    owner, person_names, conflicts = _handle_owners(people, handles)
    hmap = pl.DataFrame(
        {"handle": list(owner), "person": list(owner.values())},
        schema={"handle": pl.Utf8, "person": pl.Int64},
    )
    chats = chats.unique("chat_id", keep="first", maintain_order=True)
    seen = _seen_handles(messages, chats, hmap, former)
    handle_info = _handle_info(seen, hmap, person_names)
    chat_contacts = _chat_contacts(chats, handle_info)
    if "contact_id" in messages.columns:  # re-resolving an already resolved frame
        messages = messages.drop("contact_id")
    out_messages = messages.join(
        chat_contacts.select("chat_id", "contact_id"), on="chat_id", how="left", maintain_order="left"
    ).with_columns(pl.col("contact_id").fill_null(UNKNOWN_CONTACT_ID))
    chat_contacts = chat_contacts.join(_group_names(chat_contacts, handle_info), on="chat_id", how="left")
    contacts = _contact_rows(out_messages, chat_contacts, seen)
    nicknames = {g: people[g].nickname for g in set(owner.values()) if getattr(people[g], "nickname", None)}
    folks = resolve_people(out_messages, chat_contacts, seen, handle_info, nicknames, former)

    n_resolved = int(seen.get_column("person").is_not_null().sum())
    stats = {
        "contacts": contacts.height,
        "named_contacts": int(contacts.get_column("name_source").is_in(NAMED_SOURCES).sum()),
        "handles_resolved": n_resolved,
        "handles_unresolved": seen.height - n_resolved,
        "conflicts": len(conflicts),
        "addressbook_handles": hmap.height,
        "addressbook_bad_numbers": bad_numbers,
        "people": folks.people.height,
        "named_people": int((folks.people.get_column("name_source") == "addressbook").sum()),
    }
    log.info(
        "Contacts - %d contacts (%d named), %d handles resolved, %d unresolved, %d conflicts",
        stats["contacts"], stats["named_contacts"], stats["handles_resolved"], stats["handles_unresolved"],
        stats["conflicts"],
    )
    return ContactResolution(messages=out_messages, contacts=contacts, conflicts=conflicts, stats=stats, people=folks)


def _seen_handles(messages: pl.DataFrame, chats: pl.DataFrame, hmap: pl.DataFrame,
                  former: pl.DataFrame | None = None) -> pl.DataFrame:
    """Every handle seen anywhere (chat participants, message senders, people group events name),
    with its AddressBook ``person`` (null when unresolved)."""
    return (
        pl.concat(
            [
                chats.select(pl.col("participants").explode().alias("handle")),
                messages.select(pl.col("sender").alias("handle")),
                *([former.select(pl.col("handle").cast(pl.Utf8))] if former is not None else []),
            ]
        )
        .drop_nulls()
        .unique()
        .join(hmap, on="handle", how="left")
    )


def _handle_info(seen: pl.DataFrame, hmap: pl.DataFrame, person_names: dict[int, str]) -> pl.DataFrame:
    """AddressBook handles with ``person``, ``person_cid`` (``"c:" + min seen handle``, null for a
    person never seen) and ``person_name``."""
    pnames = pl.DataFrame(
        {"person": list(person_names), "person_name": list(person_names.values())},
        schema={"person": pl.Int64, "person_name": pl.Utf8},
    )
    person_cid = (
        seen.drop_nulls("person")
        .group_by("person")
        .agg(pl.col("handle").min().alias("min_handle"))
        .select("person", (pl.lit("c:") + pl.col("min_handle")).alias("person_cid"))
        .join(pnames, on="person", how="left")
    )
    return hmap.join(person_cid, on="person", how="left")


def _chat_contacts(chats: pl.DataFrame, handle_info: pl.DataFrame) -> pl.DataFrame:
    """The chats with their direct ``handle`` (null for groups), its person columns and ``contact_id``."""
    direct_handle = pl.col("participants").list.first()
    c = chats.with_columns(
        pl.when(pl.col("kind") == "group").then(None).otherwise(direct_handle).alias("handle")
    ).join(handle_info, on="handle", how="left")
    return c.with_columns(
        pl.when(pl.col("kind") == "group")
        .then(pl.lit("g:") + pl.col("chat_id"))
        .when(pl.col("person_cid").is_not_null())
        .then(pl.col("person_cid"))
        .when(pl.col("handle").is_not_null())
        .then(pl.lit("h:") + pl.col("handle"))
        .otherwise(pl.lit(UNKNOWN_CONTACT_ID))
        .alias("contact_id")
    )


def _group_names(chat_contacts: pl.DataFrame, handle_info: pl.DataFrame) -> pl.DataFrame:
    """``chat_id, participants_name`` of the group chats: resolved names first, then raw handles."""
    return (
        chat_contacts.filter(pl.col("kind") == "group")
        .select("chat_id", pl.col("participants").alias("handle"))
        .explode("handle")
        .drop_nulls("handle")
        .join(handle_info.select("handle", "person_name"), on="handle", how="left")
        .with_columns(
            pl.col("person_name").is_null().alias("_raw"),
            pl.coalesce("person_name", "handle").alias("_name"),
        )
        .unique(["chat_id", "_name"])
        .sort(["chat_id", "_raw", "_name"])
        .group_by("chat_id", maintain_order=True)
        .agg(pl.col("_name").alias("_names"))
        .with_columns(_join_names(pl.col("_names")).alias("participants_name"))
        .select("chat_id", "participants_name")
    )


def _per_contact(chat_contacts: pl.DataFrame, seen: pl.DataFrame) -> pl.DataFrame:
    """One row per known contact: kind, person, the name candidates of :data:`NAME_PRECEDENCE`
    and ``handles`` (a person's: every seen handle of theirs)."""
    per_chat = chat_contacts.filter(pl.col("contact_id") != UNKNOWN_CONTACT_ID).with_columns(
        pl.when(pl.col("kind") == "group")
        .then(pl.col("participants"))
        .when(pl.col("person").is_not_null())
        .then(pl.lit(None, dtype=pl.List(pl.Utf8)))
        .otherwise(pl.concat_list(pl.col("handle")))
        .alias("_handles")
    )
    agg = (
        per_chat.sort("chat_id")
        .group_by("contact_id", maintain_order=True)
        .agg(
            pl.col("kind").first(),
            pl.col("person").first(),
            pl.col("person_name").first(),
            pl.col("display_name").drop_nulls().first().alias("chat_name"),
            pl.col("participants_name").first(),
            pl.col("handle").first(),
            pl.col("_handles").list.explode(keep_nulls=False, empty_as_null=False).drop_nulls().unique().sort().alias("handles"),
        )
    )
    person_handles_seen = (
        seen.drop_nulls("person").group_by("person").agg(pl.col("handle").unique().sort().alias("p_handles"))
    )
    return agg.join(person_handles_seen, on="person", how="left").with_columns(
        pl.coalesce("p_handles", "handles").alias("handles")
    )


def _contact_rows(messages: pl.DataFrame, chat_contacts: pl.DataFrame, seen: pl.DataFrame) -> pl.DataFrame:
    """CONTACTS_SCHEMA rows, sorted, for every contact that has a message."""
    used = (
        messages.group_by("contact_id", "channel")
        .len()
        .group_by("contact_id")
        .agg(pl.col("channel").sort().alias("msg_channels"))
    )
    return (
        used.join(_per_contact(chat_contacts, seen), on="contact_id", how="left")
        .with_columns(
            pl.when(pl.col("contact_id") == UNKNOWN_CONTACT_ID)
            .then(pl.lit("unknown"))
            .otherwise(pl.col("kind"))
            .alias("kind"),
        )
        .pipe(contact_names)
        .with_columns(
            pl.col("msg_channels").alias("channels"),
            pl.when(pl.col("kind") == "unknown")
            .then(_EMPTY_LIST)
            .otherwise(pl.col("handles").fill_null(_EMPTY_LIST))
            .alias("handles"),
        )
        .select(list(CONTACTS_SCHEMA.names()))
        .cast(dict(CONTACTS_SCHEMA))
        .sort("contact_id")
    )
