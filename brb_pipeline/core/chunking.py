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

Times are shown in the person's time zone (``ChunkParams.time_zone``; "" = the machine's): the
clock times in ``content`` and the days in the header. Stored ``start_ts``/``end_ts`` stay UTC.
Conversation gaps are durations, the same in any zone.

What search can see (see :func:`findable_text`): control characters other than newline and tab
become spaces (a NUL once hid the rest of a chunk from BM25: DuckDB's ``strip_accents`` stops at
NUL), and zero-width characters inside a word are removed ("foo\u200dbar" is "foobar"; a ZWJ
between emoji stays). A message longer than ``max_message_chars`` is not cut: it continues on
further lines (marked with "…"), so every part of it is read, embedded in some chunk and indexed.

A message whose date is missing or impossible (``ts`` null, counted by the reader as
``date_invalid``) keeps its place by ROWID: it sorts right after the message before it in its
chat (by ``source_rowid``), joins that message's conversation, and its line shows no time.

``CHUNK_FORMAT`` names this layout; embeddings made from another layout are redone.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from collections.abc import Mapping
from datetime import datetime, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

from brb_pipeline.core.chunk_params import ChunkParams
from brb_pipeline.core.contacts.speakers import speaker
from brb_pipeline.core.errors import SettingsError
from brb_pipeline.core.records.extras import render_extras
from brb_pipeline.core.store.findable import findable_text
from brb_pipeline.core.store.schema import CHUNK_SCHEMA  # the frame chunking hands to the store

CHUNK_FORMAT = "v4-extras"  # part of every batch's embedding key: a layout change re-embeds

ATTACHMENT_CHAR = "\ufffc"  # object replacement: where an attachment sat in the text
BALLOON_CHAR = "\ufffd"  # app balloon placeholder
_REACTION_SYMBOL = {
    "love": "♥", "like": "👍", "dislike": "👎", "laugh": "😂",
    "emphasize": "‼", "question": "?", "sticker": "[sticker]",
}


def resolve_time_zone(name: str) -> tzinfo | None:
    """The zone times are shown in.

    Args:
        name: an IANA name, or "" for the machine's zone: ``TZ``, else ``/etc/localtime``.

    Returns:
        A ZoneInfo, or None when the machine's zone has no IANA name (then each time is
        converted with the C library's local time, which knows that zone's DST rules too).

    Raises:
        SettingsError: ``name`` is not a known zone.
    """
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise SettingsError(f"unknown time_zone {name!r} (expected an IANA name like 'Europe/Istanbul')") from None
    env = os.environ.get("TZ", "").lstrip(":")
    for key in (env, _localtime_key()):
        if key:
            try:
                return ZoneInfo(key)
            except (ZoneInfoNotFoundError, ValueError, OSError):
                continue
    return None


def _localtime_key() -> str:
    try:
        target = str(Path("/etc/localtime").resolve())
    except OSError:
        return ""
    return target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else ""


def time_zone_key(name: str) -> str:
    """The resolved zone's name ("local" when it has none): part of a batch's embedding key."""
    tz = resolve_time_zone(name)
    return getattr(tz, "key", None) or "local"


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


def conversation_ids(ts_us: list[int | None], gap_s: int) -> list[int]:
    """Conversation index per message (messages sorted by time) for a silence gap in seconds;
    a None time joins the current conversation."""
    out = []
    conv = 0
    prev = None
    gap_us = gap_s * 1_000_000
    for t in ts_us:
        if t is None:  # no time at all in the chat so far: stays in the current conversation
            out.append(conv)
            continue
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


def split_graphemes(text: str, limit: int) -> list[str]:
    """Split ``text`` into pieces of at most ``limit`` code points, never inside a grapheme
    cluster, at the last space of a piece's final fifth when there is one.

    Every piece but the last ends with "…" and every piece but the first starts with "…"
    (so a piece is at most ``limit + 2`` characters); nothing of ``text`` is dropped but the
    spaces at a cut.
    """
    if len(text) <= limit:
        return [text]
    pieces = []
    pos, n = 0, len(text)
    while n - pos > limit:
        cut = pos + limit
        while cut > pos + 1 and (_extends(text[cut]) or text[cut - 1] == "\u200d"):
            cut -= 1
        space = text.rfind(" ", pos + limit * 4 // 5, cut + 1)
        if space > pos:
            cut = space
        pieces.append(text[pos:cut].rstrip())
        pos = cut
        while pos < n and text[pos] == " ":
            pos += 1
    if pos < n:
        pieces.append(text[pos:])
    last = len(pieces) - 1
    return [("…" if i else "") + p + ("…" if i < last else "") for i, p in enumerate(pieces)]


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
    attachments and tapbacks shown. A body past ``max_chars`` is truncated here; chunking
    uses :func:`message_lines`, which continues it instead."""
    return message_lines(sender, ts, text, attachments, reactions, max_chars, split=False)[0]


def message_lines(sender: str, ts: datetime | None, text: str | None, attachments: int, reactions: list | None,
                  max_chars: int, *, split: bool = True) -> list[str]:
    """A message's lines: one, or one per piece of a body longer than ``max_chars``.

    ``ts`` is shown as given (already in the reader's zone); None shows no time. The first
    line carries the attachment tag and the tapbacks.
    """
    body = findable_text(text).replace(ATTACHMENT_CHAR, "").replace(BALLOON_CHAR, "").strip()
    body = " ".join(body.split())  # newlines inside a message would break the line format
    pieces = split_graphemes(body, max_chars) if split else [truncate_graphemes(body, max_chars)]
    if attachments:
        tag = "[attachment]" if attachments == 1 else f"[{attachments} attachments]"
        pieces[0] = f"{pieces[0]} {tag}".strip()
    who = f"{sender} ({ts:%H:%M})" if ts is not None else sender
    lines = [f"{who}: {p}" for p in pieces]
    if reactions:
        marks = sorted(_REACTION_SYMBOL.get(r["kind"], r.get("emoji") or r["kind"]) if r["kind"] != "emoji"
                       else (r.get("emoji") or "emoji") for r in reactions)
        lines[0] += "  [" + " ".join(marks) + "]"
    return lines


def _fmt_days(start: datetime | None, end: datetime | None) -> str:
    """The days a chunk spans (local times), or "date unknown" when none of its messages has one."""
    if start is None or end is None:
        return "date unknown"
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
    tz = resolve_time_zone(params.time_zone)
    chat = ["contact_id", "chat_id"]
    if messages["ts"].null_count():
        msgs = _place_untimed(messages, chat).sort([*chat, "_place", "_untimed", "_rid", "message_id"])
    else:
        msgs = messages.with_columns(pl.col("ts").alias("_place")).sort([*chat, "ts", "message_id"])
    rows: dict[str, list] = {name: [] for name in CHUNK_SCHEMA.names()}
    for (contact_id, chat_id), group in msgs.group_by(chat, maintain_order=True):
        _chunk_chat(group, str(contact_id), str(chat_id), batch, contact_names, sender_names, params, tz, rows)
    return pl.DataFrame(rows, schema=CHUNK_SCHEMA)


def _with_extras(group: pl.DataFrame, texts: list, atts: list,
                 names: Mapping[str, str]) -> tuple[list, list, set[int]]:
    """Texts with their extras rendered (:func:`render_extras`), attachment counts less those the
    tags name, and the indices of group events. Frames without ``extras`` pass unchanged."""
    if "extras" not in group.columns:
        return texts, atts, set()
    texts, atts = list(texts), list(atts)
    events = set()
    for i, extras in enumerate(group["extras"].to_list()):
        if extras:
            texts[i], is_event, named = render_extras(texts[i], extras, names)
            atts[i] = max(0, (atts[i] or 0) - named)
            if is_event:
                events.add(i)
    return texts, atts, events


def _place_untimed(messages: pl.DataFrame, chat: list[str]) -> pl.DataFrame:
    """Add ``_place`` (the time of the nearest earlier message by ROWID in the chat, else the
    nearest later one), ``_untimed`` (ts is null) and ``_rid`` (ROWID, 0 when missing)."""
    by_rowid = messages.with_columns(pl.col("source_rowid").fill_null(0).alias("_rid")).sort([*chat, "_rid"])
    return by_rowid.with_columns(
        pl.col("ts").forward_fill().backward_fill().over(chat).alias("_place"),
        pl.col("ts").is_null().alias("_untimed"),
    )


def _chunk_chat(group: pl.DataFrame, contact_id: str, chat_id: str, batch: str,
                contact_names: Mapping[str, str], sender_names: Mapping[str, str],
                params: ChunkParams, tz: tzinfo | None, rows: dict[str, list]) -> None:
    ids = group["message_id"].to_list()
    ts = group["ts"].to_list()
    place = group["_place"].to_list()
    place_us = group["_place"].dt.epoch("us").to_list()
    texts = group["text"].to_list()
    senders = group["sender"].to_list()
    mine = group["is_from_me"].to_list()
    atts = group["attachments"].to_list()
    reacts = group["reactions"].to_list()
    texts, atts, events = _with_extras(group, texts, atts, sender_names)
    channel = group["channel"][0]
    contact_name = contact_names.get(contact_id, contact_id)
    local = [None if t is None else (t.astimezone(tz) if tz is not None else t.astimezone()) for t in ts]
    # One entry per line: a message longer than max_message_chars has several.
    lines: list[str] = []
    untimed: list[str] = []
    text_chars: list[int] = []
    owner: list[int] = []  # message index of each line
    piece_key: list[str] = []  # the id a window boundary on this line hashes
    for i in range(group.height):
        who = speaker(mine[i], senders[i], sender_names)
        timed = message_lines(who, local[i], texts[i], atts[i] or 0, reacts[i], params.max_message_chars)
        plain = message_lines(who, None, texts[i], atts[i] or 0, reacts[i], params.max_message_chars)
        if i in events:  # "Sam renamed the group to Ski trip": the actor is the line's subject
            timed, plain = [t.replace(": ", " ", 1) for t in timed], [p.replace(": ", " ", 1) for p in plain]
        lines.extend(timed)
        untimed.extend(plain)
        if len(timed) == 1:
            text_chars.append(len((texts[i] or "").strip()))
            piece_key.append(ids[i])
        else:
            text_chars.extend(len(p) for p in plain)
            piece_key.extend(f"{ids[i]}#{k}" for k in range(len(timed)))
        owner.extend([i] * len(timed))
    msg_convs = conversation_ids(place_us, params.gap_s)
    convs = [msg_convs[m] for m in owner]
    position = 0
    start = 0
    while start < len(lines):
        end = start
        while end < len(lines) and convs[end] == convs[start]:
            end += 1
        for a, b in window_bounds(end - start, params.window, params.stride):
            lo, hi = start + a, start + b
            if sum(text_chars[lo:hi]) < params.min_chars:
                continue
            first, last = owner[lo], owner[hi - 1]
            known = [j for j in range(first, last + 1) if ts[j] is not None]
            shown = (local[known[0]], local[known[-1]]) if known else (None, None)
            stored = (ts[known[0]], ts[known[-1]]) if known else (place[first], place[last])
            header = f"Conversation with {contact_name}, {_fmt_days(*shown)}"
            rows["chunk_id"].append(chunk_id(chat_id, piece_key[lo], piece_key[hi - 1], hi - lo))
            rows["batch"].append(batch)
            rows["contact_id"].append(contact_id)
            rows["chat_id"].append(chat_id)
            rows["channel"].append(channel)
            rows["conversation"].append(convs[lo])
            rows["position"].append(position)
            rows["first_message_id"].append(ids[first])
            rows["last_message_id"].append(ids[last])
            rows["start_ts"].append(stored[0])
            rows["end_ts"].append(stored[1])
            rows["message_count"].append(last - first + 1)
            rows["content"].append("\n".join(lines[lo:hi]))
            rows["embedding_text"].append(f"{params.document_prefix}{header}\n" + "\n".join(untimed[lo:hi]))
            position += 1
        start = end
