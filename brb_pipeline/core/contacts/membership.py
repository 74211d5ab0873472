"""Who was in a group chat when: membership over time from the group events of the archive.

chat.db's ``chat_handle_join`` lists a group's members *now*: someone who was removed or left is
no longer there, and without events they would be no member at all (unless they wrote). The
group events (:data:`brb_pipeline.core.records.EXTRA` entries of kind ``event``) say more:

* ``added`` / ``removed``: the entry's ``name`` is the member's handle; the row's sender acted;
* ``left the group``: the row's sender left (the owner leaving names nobody and is skipped).

Each (chat, person) gets *spans*: ``[(from, to)]``, ``from`` None when they were there before the
archive shows them joining (an original member, or one who wrote before any event about them),
``to`` None while they are still in. A person with no event has one open span ``(None, None)``.
``joined_ts`` is the first span's start, ``left_ts`` the last span's end; ``first_ts`` and
``last_ts`` are their own first and last message in that chat.

Only counts and timestamps leave this module in logs; handles stay in the frames.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import polars as pl

#: What an event entry's ``text`` means for membership: "in" or "out".
EVENT_ACTIONS = {"added": "in", "removed": "out", "left the group": "out"}

EVENTS_SCHEMA = pl.Schema({"chat_id": pl.Utf8, "handle": pl.Utf8, "ts": pl.Datetime("us", "UTC"),
                           "action": pl.Utf8})

SPANS_SCHEMA = pl.Schema(
    {
        "chat_id": pl.Utf8,
        "person_id": pl.Utf8,
        "joined_ts": pl.Datetime("us", "UTC"),  # null: there from before the archive shows
        "left_ts": pl.Datetime("us", "UTC"),  # null: still in
        "first_ts": pl.Datetime("us", "UTC"),  # their first message in the chat
        "last_ts": pl.Datetime("us", "UTC"),
        "spans_json": pl.Utf8,  # [[from|null, to|null], ...] as ISO strings
    }
)


def membership_events(messages: pl.DataFrame) -> pl.DataFrame:
    """The membership changes in ``messages`` (``chat_id, sender, ts, extras``), EVENTS_SCHEMA,
    sorted by chat, time. Rows without a group event cost one list-length test."""
    if "extras" not in messages.columns or messages.height == 0:
        return pl.DataFrame(schema=EVENTS_SCHEMA)
    rows = messages.filter(pl.col("extras").list.len() > 0).select("chat_id", "sender", "ts", "extras")
    if rows.height == 0:
        return pl.DataFrame(schema=EVENTS_SCHEMA)
    ev = rows.explode("extras").unnest("extras").filter(pl.col("kind") == "event")
    action = pl.col("text").replace_strict(EVENT_ACTIONS, default=None, return_dtype=pl.Utf8)
    handle = pl.when(pl.col("text") == "left the group").then(pl.col("sender")).otherwise(pl.col("name"))
    return (
        ev.select("chat_id", handle.alias("handle"), "ts", action.alias("action"))
        .drop_nulls(["handle", "action"])
        .cast(dict(EVENTS_SCHEMA)).sort(["chat_id", "ts"], nulls_last=True)
    )


def _spans(events: list[tuple[datetime | None, str]], first_msg: datetime | None) -> list[list[Any]]:
    """Spans from one pair's events (time order) and their first message in the chat."""
    if not events:
        return [[None, None]]
    start_open = events[0][1] == "out" or (first_msg is not None and events[0][0] is not None
                                           and first_msg < events[0][0])
    spans: list[list[Any]] = []
    cur: Any = None if start_open else False  # False: not in; None: in since before the archive
    for ts, action in events:
        if action == "in" and cur is False:
            cur = ts
        elif action == "out" and cur is not False:
            spans.append([cur, ts])
            cur = False
    if cur is not False:
        spans.append([cur, None])
    return spans or [[None, None]]


def member_spans(members: pl.DataFrame, events: pl.DataFrame, messages: pl.DataFrame,
                 handle_person: pl.DataFrame) -> pl.DataFrame:
    """SPANS_SCHEMA rows for every member (``chat_id, person_id``), sorted.

    Args:
        members: MEMBERS_SCHEMA rows.
        events: :func:`membership_events`.
        messages: ``chat_id, sender, ts`` per message.
        handle_person: ``handle, person_id``.
    """
    hp = handle_person.rename({"handle": "sender"})
    seen = (messages.select("chat_id", "sender", "ts").drop_nulls("sender").join(hp, on="sender", how="inner")
            .group_by("chat_id", "person_id").agg(pl.col("ts").min().alias("first_ts"),
                                                  pl.col("ts").max().alias("last_ts")))
    base = members.select("chat_id", "person_id").join(seen, on=["chat_id", "person_id"], how="left")
    by_pair: dict[tuple[str, str], list[tuple[datetime | None, str]]] = {}
    for chat, pid, ts, action in (events.join(hp.rename({"sender": "handle"}), on="handle", how="inner")
                                  .sort(["chat_id", "ts"], nulls_last=True)
                                  .select("chat_id", "person_id", "ts", "action").iter_rows()):
        by_pair.setdefault((chat, pid), []).append((ts, action))
    joined, left, spans_json = [], [], []
    for chat, pid, first in base.select("chat_id", "person_id", "first_ts").iter_rows():
        spans = _spans(by_pair.get((chat, pid), []), first)
        joined.append(spans[0][0])
        left.append(spans[-1][1])
        spans_json.append(json.dumps([[a.isoformat() if a else None, b.isoformat() if b else None]
                                      for a, b in spans]))
    out = base.with_columns(pl.Series("joined_ts", joined, dtype=pl.Datetime("us", "UTC")),
                            pl.Series("left_ts", left, dtype=pl.Datetime("us", "UTC")),
                            pl.Series("spans_json", spans_json, dtype=pl.Utf8))
    return out.select(list(SPANS_SCHEMA.names())).cast(dict(SPANS_SCHEMA)).sort(["chat_id", "person_id"])


def in_chat_during(spans_json: str | None, since: datetime | None, until: datetime | None) -> bool:
    """Whether a member's spans overlap ``[since, until)`` (None: open on that side)."""
    spans = json.loads(spans_json) if spans_json else [[None, None]]
    for a, b in spans:
        start = datetime.fromisoformat(a) if a else None
        end = datetime.fromisoformat(b) if b else None
        if (until is None or start is None or start < until) and (since is None or end is None or end > since):
            return True
    return False


def read_membership_events(messages_path: Any) -> pl.DataFrame:
    """:func:`membership_events` of a staged messages file (sealed or not); only the four columns
    it needs are read, and a file staged before extras existed has none."""
    from brb_pipeline.core.crypto import files

    try:
        rows = files.read_parquet(messages_path, columns=["chat_id", "sender", "ts", "extras"])
    except Exception:  # staged before the extras column: no events to read
        return pl.DataFrame(schema=EVENTS_SCHEMA)
    return membership_events(rows)
