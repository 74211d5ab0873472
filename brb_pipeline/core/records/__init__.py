"""The normalized record shapes every channel produces and every later stage consumes.

Readers in ``brb_pipeline.sources`` return a :class:`ReadResult` whose ``messages`` and ``chats``
frames have exactly the schemas below (column order included), whatever the channel. Timestamps
are UTC microseconds. Message text never leaves these frames for logs or Dagster metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

CHANNELS = ("imessage", "whatsapp", "mail")

# Reaction kinds, in Apple's associated_message_type order (2000 + i adds, 3000 + i removes).
REACTION_KINDS = ("love", "like", "dislike", "laugh", "emphasize", "question", "emoji", "sticker")

REACTION = pl.Struct(
    {
        "kind": pl.Utf8,  # one of REACTION_KINDS
        "sender": pl.Utf8,  # normalized handle, null when is_from_me
        "is_from_me": pl.Boolean,
        "ts": pl.Datetime("us", "UTC"),
        "emoji": pl.Utf8,  # the emoji for kind == "emoji", else null
    }
)

# What a message holds besides its text: one entry per attachment, link preview, reply or group
# event. ``kind`` says which fields are used:
#   "file" / "sticker" / "voice": name (transfer name), mime, bytes, path (resolved under the
#       attachments folder; null when the database has none), exists (checked, never opened),
#       text (a transcription, voice only);
#   "link": ref (the URL), name (preview title), text (preview summary);
#   "reply": ref (message_id answered), name (its sender's handle; null when it was the owner's,
#       "Unknown" when its handle is gone), text (its first words; null when that message is not in
#       the archive or has no text);
#   "event": text ("renamed the group to Ski trip", "added", "removed", "left the group"),
#       name (the handle added or removed, when there is one).
EXTRA = pl.Struct(
    {
        "kind": pl.Utf8,
        "name": pl.Utf8,
        "mime": pl.Utf8,
        "bytes": pl.Int64,
        "path": pl.Utf8,
        "exists": pl.Boolean,
        "text": pl.Utf8,
        "ref": pl.Utf8,
    }
)
EXTRA_KINDS = ("file", "sticker", "voice", "link", "reply", "event")

MESSAGE_SCHEMA = pl.Schema(
    {
        "channel": pl.Utf8,  # "imessage" | "whatsapp" | "mail"
        "message_id": pl.Utf8,  # f"{channel}:{guid}", stable across snapshots
        "source_rowid": pl.Int64,  # ROWID / Z_PK in the source, for incremental reads
        "chat_id": pl.Utf8,  # f"{channel}:{chat guid}"; ORPHAN_CHAT_ID when no chat join exists
        "sender": pl.Utf8,  # normalized handle of the sender; null when is_from_me
        "is_from_me": pl.Boolean,
        "ts": pl.Datetime("us", "UTC"),  # null when the source date is missing or impossible
        "text": pl.Utf8,  # final (post-edit) text; null when there is none
        "text_source": pl.Utf8,  # "text" | "attributed_body" | "edit_history" | "none"
        "undecodable": pl.Boolean,  # an attributedBody was present but yielded no text
        "edited": pl.Boolean,
        "attachments": pl.Int32,  # number of attachments (images, files, stickers...)
        "reactions": pl.List(REACTION),  # tapbacks folded onto this message, final state
        "extras": pl.List(EXTRA),  # attachments, link previews, reply, group event (EXTRA); null when none
    }
)

CHAT_SCHEMA = pl.Schema(
    {
        "channel": pl.Utf8,
        "chat_id": pl.Utf8,
        "kind": pl.Utf8,  # "direct" | "group"
        "display_name": pl.Utf8,  # group name as set in the app; null for most direct chats
        "participants": pl.List(pl.Utf8),  # normalized handles, sorted, excluding the owner
    }
)

ORPHAN_CHAT_ID = "orphan"  # chat_id suffix for messages with no chat_message_join row
UNKNOWN_CONTACT_ID = "unknown"  # contact bucket for orphans and vanished handles


@dataclass
class ReadResult:
    """What a channel reader returns.

    Attributes:
        messages: frame with MESSAGE_SCHEMA, one row per message with content or attachments
            (tapbacks are folded into ``reactions`` of their parent, unsent parts dropped).
        chats: frame with CHAT_SCHEMA.
        stats: counters a person would look at, e.g. ``messages_read``, ``tapbacks_folded``,
            ``orphans``, ``unknown_handle``, ``from_attributed_body``, ``undecodable``,
            ``unsent_dropped``, ``edited``. Counts only, never text.
        warnings: one-line, text-free warnings (e.g. "12 tapbacks whose parent is missing").
    """

    messages: pl.DataFrame
    chats: pl.DataFrame
    stats: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def read_all(stream: Any) -> ReadResult:
    """Drain a block reader (``IMessageStream``, ``WhatsAppStream``) into one ReadResult.

    ``stream`` is an open reader with ``blocks()`` (MESSAGE_SCHEMA frames) and ``result()``;
    the caller keeps it in its ``with`` block.
    """
    blocks = list(stream.blocks())
    result = stream.result()
    result.messages = pl.concat(blocks) if blocks else pl.DataFrame(schema=MESSAGE_SCHEMA)
    return result


@dataclass
class Person:
    """One AddressBook card with a usable name.

    Attributes:
        source: file path relative to the AddressBook root (``"AddressBook-v22.abcddb"`` or
            ``"Sources/<UUID>/AddressBook-v22.abcddb"``).
        record_pk: ``ZABCDRECORD.Z_PK`` within that file.
        display_name: "First Last", else the nickname, else the organization.
        phones: numbers exactly as typed, in the card's order.
        emails: addresses as typed, in the card's order.
        nickname: the card's nickname, if any (routing matches it too).
    """

    source: str
    record_pk: int
    display_name: str
    phones: list[str] = field(default_factory=list)
    emails: list[str] = field(default_factory=list)
    nickname: str | None = None
