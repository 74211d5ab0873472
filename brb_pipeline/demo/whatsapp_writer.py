"""Write a small WhatsApp ``ChatStorage.sqlite`` from the real DDL.

Layout as WhatsApp's Core Data store has it: one ``ZWACHATSESSION`` per chat (``ZSESSIONTYPE``
0 direct, 1 group, 3 status broadcast; ``ZCONTACTJID`` the partner or group JID), groups with a
``ZWAGROUPINFO`` row and one ``ZWAGROUPMEMBER`` per member, messages in ``ZWAMESSAGE`` with
``ZMESSAGEDATE`` as REAL seconds since 2001-01-01 UTC. An incoming group message has the group
JID in ``ZFROMJID`` and points at its sender through ``ZGROUPMEMBER``; an incoming direct message
has the partner JID in ``ZFROMJID``; an outgoing one has ``ZISFROMME = 1`` and ``ZTOJID`` set.
Media messages point at a ``ZWAMEDIAITEM`` row (and it back at them through ``ZMESSAGE``).
Used by the demo generator and the tests; never run against a user's real store.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from brb_pipeline.demo.sqlite_files import write_fresh

SCHEMA_SQL = Path(__file__).parent / "schemas" / "ChatStorage.sqlite.sql"
APPLE_EPOCH = datetime(2001, 1, 1, tzinfo=timezone.utc)

# Core Data entities of the store: (Z_ENT, Z_NAME). Readers look them up by name.
ENTITIES: tuple[tuple[int, str], ...] = (
    (1, "WAChatSession"),
    (2, "WAGroupInfo"),
    (3, "WAGroupMember"),
    (4, "WAMediaItem"),
    (5, "WAMessage"),
    (6, "WAProfilePushName"),
)
_ENT = {name: ent for ent, name in ENTITIES}

SESSION_DIRECT, SESSION_GROUP, SESSION_STATUS = 0, 1, 3
_MSG_TEXT = 0


@dataclass
class WAChatRecord:
    """One chat as the demo wants it."""

    jid: str  # "905321234567@s.whatsapp.net" or "1203630...@g.us"
    partner_name: str
    is_group: bool
    members: list[tuple[str, str]] = field(default_factory=list)  # (member jid, name) for groups
    session_type: int | None = None  # override (3 = status broadcast); default from is_group


@dataclass
class WAMessageRecord:
    """One message; ``chat_jid`` must name a chat passed alongside."""

    chat_jid: str
    from_me: bool
    sender_jid: str | None  # group messages: the member's jid; None when from_me
    ts: datetime  # tz-aware UTC
    text: str | None
    stanza_id: str
    media_path: str | None = None  # when set, a ZWAMEDIAITEM row is attached (ZMEDIALOCALPATH)
    media_type: int = 1  # ZMESSAGETYPE of a media message: 1 image, 2 video, 3 audio, 8 document
    media_bytes: int = 0  # ZFILESIZE
    media_title: str | None = None  # ZTITLE: a caption, or a document's file name
    media_seconds: int | None = None  # ZMOVIEDURATION (audio and video)


def write_whatsapp(path: Path, chats: Sequence[WAChatRecord], messages: Sequence[WAMessageRecord]) -> None:
    """Create ``path`` as a WhatsApp ChatStorage.sqlite holding ``chats`` and ``messages``.

    Args:
        path: file to create; parent folders are created; an existing file is replaced.
        chats: chat sessions, written in order (Z_PK 1..).
        messages: messages in any order; ``ts`` must be timezone-aware.

    Raises:
        ValueError: a message names a chat not in ``chats`` or has a naive timestamp.
    """
    write_fresh(Path(path), SCHEMA_SQL, lambda conn: _fill(conn, chats, messages))


def _apple_s(ts: datetime) -> float:
    if ts.tzinfo is None:
        raise ValueError("WAMessageRecord.ts must be timezone-aware (UTC)")
    return (ts - APPLE_EPOCH).total_seconds()


def _fill(conn: sqlite3.Connection, chats: Sequence[WAChatRecord], messages: Sequence[WAMessageRecord]) -> None:
    """Chats, then messages, then Core Data's bookkeeping rows."""
    w = _Written()
    _write_sessions(conn, chats, w)
    n_media = _write_messages(conn, messages, w)
    _write_metadata(conn, len(chats), len(messages), n_media, w)


@dataclass
class _Written:
    """Primary keys handed out so far, for the rows that point back at them."""

    session_pk: dict[str, int] = field(default_factory=dict)  # chat JID -> ZWACHATSESSION
    group_chat: dict[int, bool] = field(default_factory=dict)  # session pk -> is a group
    member_pk: dict[tuple[int, str], int] = field(default_factory=dict)  # (session, JID) -> member
    n_group_info: int = 0
    n_member: int = 0


def _write_sessions(conn: sqlite3.Connection, chats: Sequence[WAChatRecord], w: _Written) -> None:
    """Chat sessions, with group info and members for the groups."""
    for pk, chat in enumerate(chats, start=1):
        w.session_pk[chat.jid] = pk
        w.group_chat[pk] = chat.is_group
        stype = chat.session_type if chat.session_type is not None else (
            SESSION_GROUP if chat.is_group else SESSION_DIRECT
        )
        group_info = None
        if chat.is_group:
            w.n_group_info += 1
            group_info = w.n_group_info
            conn.execute(
                "INSERT INTO ZWAGROUPINFO (Z_PK, Z_ENT, Z_OPT, ZSTATE, ZCHATSESSION, ZCREATORJID) VALUES (?, ?, 1, 0, ?, ?)",
                (group_info, _ENT["WAGroupInfo"], pk, chat.members[0][0] if chat.members else None),
            )
            for member_jid, name in chat.members:
                w.n_member += 1
                w.member_pk[(pk, member_jid)] = w.n_member
                conn.execute(
                    "INSERT INTO ZWAGROUPMEMBER (Z_PK, Z_ENT, Z_OPT, ZISACTIVE, ZISADMIN, ZCHATSESSION,"
                    " ZCONTACTNAME, ZFIRSTNAME, ZMEMBERJID) VALUES (?, ?, 1, 1, 0, ?, ?, ?, ?)",
                    (w.n_member, _ENT["WAGroupMember"], pk, name, (name or "").split(" ")[0] or None, member_jid),
                )
        conn.execute(
            "INSERT INTO ZWACHATSESSION (Z_PK, Z_ENT, Z_OPT, ZARCHIVED, ZHIDDEN, ZREMOVED, ZSESSIONTYPE,"
            " ZUNREADCOUNT, ZMESSAGECOUNTER, ZGROUPINFO, ZCONTACTJID, ZPARTNERNAME) VALUES (?, ?, 1, 0, 0, 0, ?, 0, 0, ?, ?, ?)",
            (pk, _ENT["WAChatSession"], stype, group_info, chat.jid, chat.partner_name),
        )


def _write_messages(conn: sqlite3.Connection, messages: Sequence[WAMessageRecord], w: _Written) -> int:
    """Messages in time order (``ZSORT``), media items, and each session's last message and
    counter. Returns the number of media items."""
    last: dict[int, tuple[float, int]] = {}
    counts: dict[int, int] = {}
    n_media = 0
    ordered = sorted(enumerate(messages), key=lambda im: (im[1].ts, im[0]))
    for sort, (_, m) in enumerate(ordered, start=1):
        spk = w.session_pk.get(m.chat_jid)
        if spk is None:
            raise ValueError(f"message {m.stanza_id} names a chat that was not written")
        date = _apple_s(m.ts)
        is_group = w.group_chat[spk]
        gm = w.member_pk.get((spk, m.sender_jid)) if (not m.from_me and m.sender_jid) else None
        if m.from_me:
            from_jid, to_jid = None, m.chat_jid
        elif is_group:
            from_jid, to_jid = m.chat_jid, None
        else:
            from_jid, to_jid = m.sender_jid or m.chat_jid, None
        media = None
        if m.media_path is not None:
            n_media += 1
            media = n_media
        conn.execute(
            "INSERT INTO ZWAMESSAGE (Z_PK, Z_ENT, Z_OPT, ZCHILDMESSAGESDELIVEREDCOUNT, ZFLAGS, ZISFROMME,"
            " ZMESSAGESTATUS, ZMESSAGETYPE, ZSORT, ZCHATSESSION, ZGROUPMEMBER, ZMEDIAITEM, ZMESSAGEDATE,"
            " ZSENTDATE, ZFROMJID, ZSTANZAID, ZTEXT, ZTOJID) VALUES (?, ?, 1, 0, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                sort,
                _ENT["WAMessage"],
                1 if m.from_me else 0,
                8 if m.from_me else 0,
                m.media_type if media is not None else _MSG_TEXT,
                sort,
                spk,
                gm,
                media,
                date,
                date,
                from_jid,
                m.stanza_id,
                m.text,
                to_jid,
            ),
        )
        if media is not None:
            conn.execute(
                "INSERT INTO ZWAMEDIAITEM (Z_PK, Z_ENT, Z_OPT, ZFILESIZE, ZMESSAGE, ZMEDIALOCALPATH, ZTITLE,"
                " ZMOVIEDURATION) VALUES (?, ?, 1, ?, ?, ?, ?, ?)",
                (media, _ENT["WAMediaItem"], m.media_bytes, sort, m.media_path, m.media_title, m.media_seconds),
            )
        counts[spk] = counts.get(spk, 0) + 1
        if spk not in last or date >= last[spk][0]:
            last[spk] = (date, sort)
    for spk, (date, mpk) in last.items():
        conn.execute(
            "UPDATE ZWACHATSESSION SET ZLASTMESSAGE = ?, ZLASTMESSAGEDATE = ?, ZMESSAGECOUNTER = ? WHERE Z_PK = ?",
            (mpk, date, counts[spk], spk),
        )
    return n_media


def _write_metadata(conn: sqlite3.Connection, n_chats: int, n_messages: int, n_media: int, w: _Written) -> None:
    """Core Data's primary-key maxima per entity and the store metadata row."""
    maxima = {
        "WAChatSession": n_chats,
        "WAGroupInfo": w.n_group_info,
        "WAGroupMember": w.n_member,
        "WAMediaItem": n_media,
        "WAMessage": n_messages,
        "WAProfilePushName": 0,
    }
    conn.executemany(
        "INSERT INTO Z_PRIMARYKEY (Z_ENT, Z_NAME, Z_SUPER, Z_MAX) VALUES (?, ?, 0, ?)",
        [(ent, name, maxima[name]) for ent, name in ENTITIES],
    )
    conn.execute(
        "INSERT INTO Z_METADATA (Z_VERSION, Z_UUID, Z_PLIST) VALUES (1, ?, NULL)",
        (str(uuid.uuid5(uuid.NAMESPACE_URL, "brb-demo-whatsapp")).upper(),),
    )
