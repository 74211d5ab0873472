"""People beside conversations: everyone who takes part in a chat is one person.

A *contact* (``resolve.py``) is a conversation unit: a 1:1 person, an unresolved direct handle, a
whole group chat or the unknown bucket; chunks and batches stay per contact. A *person* is one
AddressBook card (all its handles, every channel) or one handle no card claims, wherever it
appears: 1:1 chats, group chats, WhatsApp groups, Mail threads.

* person_id: ``"c:" + min(seen handles of the card)`` for a card, the same id its 1:1 contact has;
  ``"h:" + handle`` for a handle no card claims (again its 1:1 contact's id when it has one).
* members: ``(chat_id, person_id)`` for every chat participant and every sender of a message in
  the chat; the owner is never a member.
* Per-person stats count every message of a chat the person is in: theirs (received) and mine in
  those chats (sent), with how many of them were in group chats; reply delays as in
  ``stats.py``: my reply to *their* message, and theirs to mine.

Names never leave these frames for logs.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

PEOPLE_SCHEMA = pl.Schema(
    {
        "person_id": pl.Utf8,
        "display_name": pl.Utf8,  # the card's name, else the handle
        "name_source": pl.Utf8,  # "addressbook" | "handle"
        "nickname": pl.Utf8,  # the card's nickname, if any
        "handles": pl.List(pl.Utf8),  # sorted, the handles of theirs seen in chats or as senders
        "channels": pl.List(pl.Utf8),  # sorted
    }
)

MEMBERS_SCHEMA = pl.Schema(
    {
        "chat_id": pl.Utf8,
        "person_id": pl.Utf8,
        "contact_id": pl.Utf8,  # the chat's contact (conversation unit: c:/h:/g:/unknown)
        "kind": pl.Utf8,  # the chat's kind: "direct" | "group"
    }
)

PERSON_STATS_SCHEMA = pl.Schema(
    {
        "person_id": pl.Utf8,
        "messages": pl.UInt32,
        "sent": pl.UInt32,  # mine, in chats they are in
        "received": pl.UInt32,  # theirs
        "group_messages": pl.UInt32,  # of ``messages``, those in group chats
        "first_ts": pl.Datetime("us", "UTC"),
        "last_ts": pl.Datetime("us", "UTC"),
        "avg_response_s_me": pl.Float64,  # my reply to their message
        "avg_response_s_them": pl.Float64,  # their reply to mine
    }
)


@dataclass
class People:
    """People and where they take part.

    Attributes:
        people: PEOPLE_SCHEMA rows, one per person in some chat with messages, sorted by id.
        members: MEMBERS_SCHEMA rows, sorted by chat_id then person_id.
        handle_person: ``handle, person_id`` for every seen handle.
    """

    people: pl.DataFrame
    members: pl.DataFrame
    handle_person: pl.DataFrame


def resolve_people(messages: pl.DataFrame, chat_contacts: pl.DataFrame, seen: pl.DataFrame,
                   handle_info: pl.DataFrame, nicknames: dict[int, str],
                   former: pl.DataFrame | None = None) -> People:
    """People from resolution's intermediate frames (see ``resolve.resolve_contacts``).

    Args:
        messages: ``channel, chat_id, sender, contact_id`` per message.
        chat_contacts: one row per chat with ``chat_id, kind, participants, contact_id``.
        seen: ``handle, person`` (AddressBook group, null when no card) of every seen handle.
        handle_info: AddressBook handles with ``person, person_cid, person_name``.
        nicknames: AddressBook group -> nickname.
        former: ``chat_id, handle`` named by group events (members once, maybe gone since).
    """
    hp = (
        seen.join(handle_info.select("handle", "person_cid", "person_name"), on="handle", how="left")
        .with_columns(
            pl.coalesce("person_cid", pl.lit("h:") + pl.col("handle")).alias("person_id"),
            pl.coalesce("person_name", "handle").alias("display_name"),
            pl.when(pl.col("person_cid").is_not_null()).then(pl.lit("addressbook")).otherwise(pl.lit("handle"))
            .alias("name_source"),
            pl.col("person").replace_strict(nicknames, default=None, return_dtype=pl.Utf8).alias("nickname"),
        )
    )
    chats_used = messages.select("chat_id", "channel").unique("chat_id")
    pairs = pl.concat([
        chat_contacts.select("chat_id", pl.col("participants").alias("handle")).explode("handle"),
        messages.select("chat_id", pl.col("sender").alias("handle")),
        *([former.select("chat_id", pl.col("handle").cast(pl.Utf8))] if former is not None else []),
    ]).drop_nulls().unique().join(chats_used, on="chat_id", how="semi")
    pairs = pairs.join(hp.select("handle", "person_id"), on="handle", how="inner")
    kinds = chat_contacts.select("chat_id", "kind", "contact_id")
    members = (
        pairs.select("chat_id", "person_id").unique()
        .join(kinds, on="chat_id", how="left")
        .select(list(MEMBERS_SCHEMA.names())).cast(dict(MEMBERS_SCHEMA)).sort(["chat_id", "person_id"])
    )
    channels = (pairs.join(chats_used, on="chat_id", how="left").group_by("person_id")
                .agg(pl.col("channel").unique().sort().alias("channels")))
    handles = pairs.group_by("person_id").agg(pl.col("handle").unique().sort().alias("handles"))
    names = hp.group_by("person_id").agg(pl.col("display_name").first(), pl.col("name_source").first(),
                                         pl.col("nickname").drop_nulls().first())
    people = (
        handles.join(channels, on="person_id", how="left").join(names, on="person_id", how="left")
        .select(list(PEOPLE_SCHEMA.names())).cast(dict(PEOPLE_SCHEMA)).sort("person_id")
    )
    return People(people=people, members=members, handle_person=hp.select("handle", "person_id"))


def person_stats(messages: pl.DataFrame, members: pl.DataFrame, handle_person: pl.DataFrame, *,
                 max_response_gap_s: int = 12 * 3600) -> pl.DataFrame:
    """Per-person counts, dates and reply delays over every chat they take part in.

    Args:
        messages: ``chat_id, message_id, sender, is_from_me, ts`` per message.
        members: MEMBERS_SCHEMA rows.
        handle_person: ``handle, person_id``.
        max_response_gap_s: a side switch further apart than this is not a reply.

    Returns:
        PERSON_STATS_SCHEMA rows, one per person with a message, sorted by person_id.
    """
    if messages.height == 0 or members.height == 0:
        return pl.DataFrame(schema=PERSON_STATS_SCHEMA)
    chat_no = members.select("chat_id", (pl.col("kind") == "group").alias("_group")).unique("chat_id") \
        .with_row_index("_chat")
    me = pl.col("is_from_me").fill_null(False)
    df = (
        messages.select("chat_id", "message_id", "sender", me.alias("is_from_me"), "ts")
        .join(chat_no, on="chat_id", how="inner")
        .join(handle_person.rename({"handle": "sender", "person_id": "_from"}), on="sender", how="left")
        .sort(["ts", "message_id"])
        .with_columns(
            pl.col("is_from_me").shift(1).over("_chat").alias("_prev_me"),
            pl.col("_from").shift(1).over("_chat").alias("_prev_from"),
            ((pl.col("ts") - pl.col("ts").shift(1).over("_chat")).dt.total_microseconds() / 1_000_000).alias("_gap"),
        )
        .with_columns((pl.col("_gap") <= max_response_gap_s).fill_null(False).alias("_near"))
    )
    theirs = (
        df.filter(~pl.col("is_from_me") & pl.col("_from").is_not_null())
        .group_by(pl.col("_from").alias("person_id"))
        .agg(pl.len().alias("received"), pl.col("_group").sum().alias("_g_recv"),
             pl.col("ts").min().alias("_f1"), pl.col("ts").max().alias("_l1"),
             pl.col("_gap").filter(pl.col("_near") & pl.col("_prev_me").fill_null(False)).mean()
             .alias("avg_response_s_them"))
    )
    chat_members = members.join(chat_no.select("chat_id", "_chat"), on="chat_id").select("_chat", "person_id")
    mine = (
        df.filter(pl.col("is_from_me")).join(chat_members, on="_chat", how="inner")
        .group_by("person_id")
        .agg(pl.len().alias("sent"), pl.col("_group").sum().alias("_g_sent"),
             pl.col("ts").min().alias("_f2"), pl.col("ts").max().alias("_l2"),
             pl.col("_gap").filter(pl.col("_near") & (pl.col("_prev_from") == pl.col("person_id"))).mean()
             .alias("avg_response_s_me"))
    )
    zero = pl.lit(0, dtype=pl.UInt32)
    out = theirs.join(mine, on="person_id", how="full", coalesce=True).with_columns(
        pl.col("received").fill_null(zero), pl.col("sent").fill_null(zero),
    ).with_columns(
        (pl.col("received") + pl.col("sent")).alias("messages"),
        (pl.col("_g_recv").fill_null(zero) + pl.col("_g_sent").fill_null(zero)).alias("group_messages"),
        pl.min_horizontal("_f1", "_f2").alias("first_ts"),
        pl.max_horizontal("_l1", "_l2").alias("last_ts"),
    )
    return out.select(list(PERSON_STATS_SCHEMA.names())).cast(dict(PERSON_STATS_SCHEMA)).sort("person_id")
