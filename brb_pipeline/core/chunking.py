"""Conversation-aware sliding-window chunking.

Each chat is split into conversations wherever two consecutive messages are more than
``gap_s`` seconds apart; each conversation is then covered by windows of ``window`` messages
advancing by ``stride`` (the last window is aligned to the conversation's end), so messages at
a window boundary appear in two chunks. A conversation shorter than a window is one chunk.

Each chunk carries two texts:
- ``content``: what a person reads, one line per message with sender and time;
- ``embedding_text``: the model's document prefix, a context header (contact and the days the
  chunk spans), then the message lines without their clock times: ``Ayşe: see you tomorrow``.
  Times as digits carry little meaning for a sentence embedder but were 23% of the tokens of
  the full demo corpus (173 -> 134 per chunk with all-MiniLM-L6-v2), and the model's cost grows
  with tokens.

``CHUNK_FORMAT`` names this layout; embeddings made from another layout are redone.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import polars as pl

CHUNK_SCHEMA = pl.Schema(
    {
        "chunk_id": pl.Utf8,
        "batch": pl.Utf8,
        "contact_id": pl.Utf8,
        "chat_id": pl.Utf8,
        "channel": pl.Utf8,
        "conversation": pl.Int32,
        "position": pl.Int32,
        "first_message_id": pl.Utf8,
        "last_message_id": pl.Utf8,
        "start_ts": pl.Datetime("us", "UTC"),
        "end_ts": pl.Datetime("us", "UTC"),
        "message_count": pl.Int32,
        "content": pl.Utf8,
        "embedding_text": pl.Utf8,
    }
)

CHUNK_FORMAT = "v2-untimed"  # part of every batch's embedding key: a layout change re-embeds

ATTACHMENT_CHAR = "\ufffc"  # object replacement: where an attachment sat in the text
BALLOON_CHAR = "\ufffd"  # app balloon placeholder
_REACTION_SYMBOL = {
    "love": "♥", "like": "👍", "dislike": "👎", "laugh": "😂",
    "emphasize": "‼", "question": "?", "sticker": "[sticker]",
}


@dataclass(frozen=True)
class ChunkParams:
    """Chunking parameters (production defaults: window 8, stride 4, 6-hour gap).

    Attributes:
        window: messages per chunk.
        stride: messages between consecutive window starts (< window gives overlap).
        gap_s: a silence longer than this (seconds) starts a new conversation.
        min_chars: chunks with fewer characters of message text are dropped (e.g. a lone "ok").
        max_message_chars: one message longer than this is truncated (grapheme-safe) in the
            chunk texts; the embedder truncates by tokens anyway.
        document_prefix: the model's document prefix (``"search_document: "`` for nomic).
    """

    window: int = 8
    stride: int = 4
    gap_s: int = 6 * 3600
    min_chars: int = 20
    max_message_chars: int = 2000
    document_prefix: str = ""

    def __post_init__(self) -> None:
        if self.window < 1 or self.stride < 1 or self.stride > self.window:
            raise ValueError(f"chunking needs 1 <= stride <= window, got window={self.window} stride={self.stride}")


def window_bounds(n: int, window: int, stride: int) -> list[tuple[int, int]]:
    """Half-open [start, end) windows covering ``n`` items.

    Starts advance by ``stride``; the last window ends at ``n`` exactly, so the tail is never
    dropped and never a tiny fragment when n > window.
    """
    if n <= 0:
        return []
    if n <= window:
        return [(0, n)]
    bounds = []
    start = 0
    while start + window < n:
        bounds.append((start, start + window))
        start += stride
    bounds.append((n - window, n))
    return bounds


def conversation_ids(ts_us: list[int], gap_s: int) -> list[int]:
    """Conversation index per message (messages sorted by time) for a silence gap in seconds."""
    out = []
    conv = 0
    prev = None
    gap_us = gap_s * 1_000_000
    for t in ts_us:
        if prev is not None and t - prev > gap_us:
            conv += 1
        out.append(conv)
        prev = t
    return out


def truncate_graphemes(text: str, limit: int) -> str:
    """Cut ``text`` to at most ``limit`` code points without splitting a grapheme cluster.

    Backs off over combining marks, variation selectors, skin-tone modifiers, tag characters
    and zero-width joiners so an emoji sequence or an accented letter is kept whole or dropped.
    """
    if len(text) <= limit:
        return text
    cut = limit
    while cut > 0 and (_extends(text[cut]) or text[cut - 1] == "\u200d"):
        cut -= 1
    return text[:cut] + "…"


def _extends(ch: str) -> bool:
    cp = ord(ch)
    return (
        unicodedata.combining(ch) != 0
        or ch == "\u200d"
        or 0xFE00 <= cp <= 0xFE0F  # variation selectors
        or 0x1F3FB <= cp <= 0x1F3FF  # skin tones
        or 0xE0020 <= cp <= 0xE007F  # tags (flag sequences)
        or unicodedata.category(ch) in ("Mn", "Me", "Mc")
    )


def message_line(sender: str, ts: datetime | None, text: str | None, attachments: int, reactions: list | None,
                 max_chars: int) -> str:
    """One readable line: ``Ayşe (19:38): see you tomorrow`` (``Ayşe: ...`` when ``ts`` is None);
    attachments and tapbacks shown."""
    body = (text or "").replace(ATTACHMENT_CHAR, "").replace(BALLOON_CHAR, "").strip()
    body = " ".join(body.split())  # newlines inside a message would break the line format
    body = truncate_graphemes(body, max_chars)
    if attachments:
        tag = "[attachment]" if attachments == 1 else f"[{attachments} attachments]"
        body = f"{body} {tag}".strip()
    line = f"{sender} ({ts:%H:%M}): {body}" if ts is not None else f"{sender}: {body}"
    if reactions:
        marks = sorted(_REACTION_SYMBOL.get(r["kind"], r.get("emoji") or r["kind"]) if r["kind"] != "emoji"
                       else (r.get("emoji") or "emoji") for r in reactions)
        line += "  [" + " ".join(marks) + "]"
    return line


def _fmt_days(start: datetime, end: datetime) -> str:
    if start.date() == end.date():
        return f"{start:%Y-%m-%d}"
    return f"{start:%Y-%m-%d} – {end:%Y-%m-%d}"


def chunk_id(chat_id: str, first_message_id: str, last_message_id: str, count: int) -> str:
    """Deterministic id: the same messages in the same chat give the same id on every run."""
    h = hashlib.sha1(f"{chat_id}\x1f{first_message_id}\x1f{last_message_id}\x1f{count}".encode())
    return h.hexdigest()[:20]


def chunk_messages(
    messages: pl.DataFrame,
    *,
    batch: str,
    contact_names: Mapping[str, str],
    sender_names: Mapping[str, str],
    params: ChunkParams = ChunkParams(),
) -> pl.DataFrame:
    """Chunk the messages of one contact batch.

    Args:
        messages: MESSAGE_SCHEMA frame plus ``contact_id``; any order.
        batch: the partition key written on every chunk.
        contact_names: contact_id -> display name (for the context header).
        sender_names: normalized handle -> display name (for message lines; falls back to the handle).
        params: window, stride, gap and text limits.

    Returns:
        A frame with CHUNK_SCHEMA, ordered by contact, chat and position.
    """
    if messages.height == 0:
        return pl.DataFrame(schema=CHUNK_SCHEMA)
    msgs = messages.sort(["contact_id", "chat_id", "ts", "message_id"])
    rows: dict[str, list] = {name: [] for name in CHUNK_SCHEMA.names()}
    for (contact_id, chat_id), group in msgs.group_by(["contact_id", "chat_id"], maintain_order=True):
        _chunk_chat(group, str(contact_id), str(chat_id), batch, contact_names, sender_names, params, rows)
    return pl.DataFrame(rows, schema=CHUNK_SCHEMA)


def _chunk_chat(group: pl.DataFrame, contact_id: str, chat_id: str, batch: str,
                contact_names: Mapping[str, str], sender_names: Mapping[str, str],
                params: ChunkParams, rows: dict[str, list]) -> None:
    ids = group["message_id"].to_list()
    ts = group["ts"].to_list()
    ts_us = group["ts"].dt.epoch("us").to_list()
    texts = group["text"].to_list()
    senders = group["sender"].to_list()
    mine = group["is_from_me"].to_list()
    atts = group["attachments"].to_list()
    reacts = group["reactions"].to_list()
    channel = group["channel"][0]
    contact_name = contact_names.get(contact_id, contact_id)
    lines = []
    untimed = []
    text_chars = []
    for i in range(group.height):
        who = "Me" if mine[i] else sender_names.get(senders[i] or "", senders[i] or "Unknown")
        lines.append(message_line(who, ts[i], texts[i], atts[i] or 0, reacts[i], params.max_message_chars))
        untimed.append(message_line(who, None, texts[i], atts[i] or 0, reacts[i], params.max_message_chars))
        text_chars.append(len((texts[i] or "").strip()))
    convs = conversation_ids(ts_us, params.gap_s)
    position = 0
    start = 0
    while start < len(ids):
        end = start
        while end < len(ids) and convs[end] == convs[start]:
            end += 1
        for a, b in window_bounds(end - start, params.window, params.stride):
            lo, hi = start + a, start + b
            if sum(text_chars[lo:hi]) < params.min_chars:
                continue
            body = "\n".join(lines[lo:hi])
            header = f"Conversation with {contact_name}, {_fmt_days(ts[lo], ts[hi - 1])}"
            rows["chunk_id"].append(chunk_id(chat_id, ids[lo], ids[hi - 1], hi - lo))
            rows["batch"].append(batch)
            rows["contact_id"].append(contact_id)
            rows["chat_id"].append(chat_id)
            rows["channel"].append(channel)
            rows["conversation"].append(convs[lo])
            rows["position"].append(position)
            rows["first_message_id"].append(ids[lo])
            rows["last_message_id"].append(ids[hi - 1])
            rows["start_ts"].append(ts[lo])
            rows["end_ts"].append(ts[hi - 1])
            rows["message_count"].append(hi - lo)
            rows["content"].append(body)
            rows["embedding_text"].append(f"{params.document_prefix}{header}\n" + "\n".join(untimed[lo:hi]))
            position += 1
        start = end
