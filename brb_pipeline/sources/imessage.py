"""Read an Apple Messages ``chat.db`` (a snapshot of it) into the normalized record frames.

Rules, in the order they are applied to each ``message`` row (read in ROWID order, in chunks):

* ``associated_message_type`` 2000-2007 (add) / 3000-3007 (remove) rows are tapbacks: they are
  never messages; they are folded onto their parent (``p:N/GUID`` or ``bp:GUID``) as the final
  state per (sender, kind) after removals. Tapbacks whose parent is not among the kept messages
  are counted (``tapbacks_orphaned``).
* Text comes from ``text`` unless it is NULL or ''; then from ``attributedBody`` (typedstream)
  via :func:`decode_attributed_body` (``text_source="attributed_body"``); a blob that yields
  nothing sets ``undecodable``.
* A message with no text and no attachments is dropped: as ``unsent_dropped`` when it was
  retracted/edited (unsent), as ``system_skipped`` otherwise (group renames, member changes,
  plugin payloads). Undecodable messages are kept, flagged.
* ``date_edited != 0`` marks ``edited`` (the stored text is already the final text).
* Messages without a ``chat_message_join`` row get ``chat_id = "imessage:orphan"``; incoming
  messages whose ``handle_id`` points at a vanished handle keep ``sender = None`` and are counted
  (``unknown_handle``).

Dates: ``message.date`` is nanoseconds since 2001-01-01 UTC on modern macOS and seconds on old
ones; the unit is decided per value by magnitude. Output timestamps are UTC microseconds.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl

from brb_pipeline.core.errors import CancelledError
from brb_pipeline.core.handles import normalize_handle
from brb_pipeline.core.records import (
    CHAT_SCHEMA,
    MESSAGE_SCHEMA,
    ORPHAN_CHAT_ID,
    REACTION,
    REACTION_KINDS,
    ReadResult,
)
from brb_pipeline.sources.sqlite_ro import open_readonly, table_columns, translate_sqlite_error
from brb_pipeline.sources.typedstream import decode_attributed_body

log = logging.getLogger(__name__)

CHANNEL = "imessage"
WHAT = "chat.db"
ORPHAN = f"{CHANNEL}:{ORPHAN_CHAT_ID}"
CHUNK_ROWS = 50_000

REQUIRED = {
    "message": {"ROWID", "guid", "text", "handle_id", "date", "is_from_me"},
    "handle": {"ROWID", "id"},
    "chat": {"ROWID", "guid"},
    "chat_message_join": {"chat_id", "message_id"},
    "chat_handle_join": {"chat_id", "handle_id"},
}

# Optional message columns and the SQL literal used when a macOS version lacks them.
_OPTIONAL = {
    "date_edited": "0",
    "date_retracted": "0",
    "item_type": "0",
    "associated_message_type": "0",
    "associated_message_guid": "NULL",
    "associated_message_emoji": "NULL",
}

_APPLE_EPOCH_US = 978_307_200 * 1_000_000
# |date| above this is nanoseconds (2001 + 100 s in ns is 1e11); below it, seconds (year 5170).
_NS_THRESHOLD = 100_000_000_000

STAT_KEYS = (
    "messages_read",
    "messages",
    "tapbacks_folded",
    "tapbacks_orphaned",
    "orphans",
    "unknown_handle",
    "from_attributed_body",
    "undecodable",
    "unsent_dropped",
    "edited",
    "system_skipped",
)

_RAW_SCHEMA = {
    "source_rowid": pl.Int64,
    "guid": pl.Utf8,
    "chat_id": pl.Utf8,
    "sender": pl.Utf8,
    "is_from_me": pl.Boolean,
    "date": pl.Int64,
    "text": pl.Utf8,
    "text_source": pl.Utf8,
    "undecodable": pl.Boolean,
    "edited": pl.Boolean,
    "attachments": pl.Int32,
}


def apple_date_to_us(col: pl.Expr) -> pl.Expr:
    """Apple ``message.date`` (ns or s since 2001-01-01 UTC) -> ``Datetime("us", "UTC")``."""
    us = pl.when(col.abs() > _NS_THRESHOLD).then(col // 1000).otherwise(col * 1_000_000)
    return (us + _APPLE_EPOCH_US).cast(pl.Datetime("us", "UTC"))


def parent_guid(assoc: str | None) -> str | None:
    """Parent message guid of a tapback's ``associated_message_guid`` (``p:N/GUID``, ``bp:GUID``)."""
    if not assoc:
        return None
    if assoc.startswith("p:"):
        slash = assoc.find("/")
        return assoc[slash + 1 :] if slash >= 0 else assoc[2:]
    if assoc.startswith("bp:"):
        return assoc[3:]
    return assoc


def read_imessage(
    path: Path,
    *,
    default_region: str = "US",
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[int, int], None] | None = None,
    chunk_rows: int = CHUNK_ROWS,
    timeout_s: float = 5.0,
) -> ReadResult:
    """Read every message and chat of a chat.db, read-only.

    Args:
        path: the chat.db file (normally the snapshot copy, never written).
        default_region: region for phone handles without a country code.
        cancel: polled between chunks; returning True raises :class:`CancelledError`.
        progress: called as ``progress(rows_done, rows_total)`` after each chunk.
        chunk_rows: message rows fetched per chunk (bounds memory held in Python tuples).
        timeout_s: how long to wait on a lock when opening.

    Returns:
        ReadResult with ``messages`` (MESSAGE_SCHEMA, ROWID order), ``chats`` (CHAT_SCHEMA) and
        ``stats`` with the keys in :data:`STAT_KEYS`.

    Raises:
        SourceMissingError, NotADatabaseError, UnknownSchemaError, DatabaseLockedError,
        CancelledError.
    """
    path = Path(path)
    conn = open_readonly(path, what=WHAT, required=REQUIRED, timeout_s=timeout_s)
    try:
        return _read(conn, default_region, cancel, progress, chunk_rows)
    except sqlite3.Error as e:
        raise translate_sqlite_error(e, WHAT, path) from None
    finally:
        conn.close()


def _read(
    conn: sqlite3.Connection,
    region: str,
    cancel: Callable[[], bool] | None,
    progress: Callable[[int, int], None] | None,
    chunk_rows: int,
) -> ReadResult:
    t0 = time.perf_counter()
    stats = dict.fromkeys(STAT_KEYS, 0)

    handles = {
        rowid: normalize_handle(raw, region)
        for rowid, raw in conn.execute("SELECT ROWID, id FROM handle")
    }
    chat_cols = table_columns(conn, "chat")
    style_col = "style" if "style" in chat_cols else "NULL"
    name_col = "display_name" if "display_name" in chat_cols else "NULL"
    chats_raw = conn.execute(f"SELECT ROWID, guid, {style_col}, {name_col} FROM chat").fetchall()
    parts: dict[int, set[str]] = {}
    for chat_rid, hid in conn.execute("SELECT chat_id, handle_id FROM chat_handle_join"):
        h = handles.get(hid)
        if h is not None:
            parts.setdefault(chat_rid, set()).add(h)
    chat_ids = {rid: f"{CHANNEL}:{guid}" for rid, guid, _, _ in chats_raw}
    # Incoming message with handle_id 0 in a one-person chat: the sender is that person.
    sole = {rid: next(iter(p)) for rid, p in parts.items() if len(p) == 1}

    mcols = table_columns(conn, "message")
    opt = {c: (f"m.{c}" if c in mcols else lit) for c, lit in _OPTIONAL.items()}
    body = "CASE WHEN m.text IS NULL OR m.text = '' THEN m.attributedBody END" if "attributedBody" in mcols else "NULL"
    if table_columns(conn, "message_attachment_join") >= {"message_id"}:
        att = "(SELECT COUNT(*) FROM message_attachment_join a WHERE a.message_id = m.ROWID)"
        if "cache_has_attachments" in mcols:
            att = f"CASE WHEN m.cache_has_attachments THEN {att} ELSE 0 END"
    else:
        att = "0"
    # Rare per-row facts folded into one integer so the common row costs few Python objects:
    # 1 tapback, 2 edited, 4 retracted, 8 non-text item (rename, member change...).
    atype = f"COALESCE({opt['associated_message_type']}, 0)"
    tap_where = f"({atype} BETWEEN 2000 AND 2007 OR {atype} BETWEEN 3000 AND 3007)"
    flags = (
        f"({tap_where}) + 2 * (COALESCE({opt['date_edited']}, 0) != 0) "
        f"+ 4 * (COALESCE({opt['date_retracted']}, 0) != 0) + 8 * (COALESCE({opt['item_type']}, 0) != 0)"
    )
    # Column names above come from our constants, never from data.
    sql = (
        f"SELECT m.ROWID, m.guid, m.text, {body}, m.handle_id, m.date, m.is_from_me, {flags}, "
        "(SELECT MIN(j.chat_id) FROM chat_message_join j WHERE j.message_id = m.ROWID), "
        f"{att} FROM message m WHERE m.ROWID > ? ORDER BY m.ROWID LIMIT ?"
    )
    tap_sql = (
        f"SELECT m.ROWID, {atype}, {opt['associated_message_guid']}, {opt['associated_message_emoji']} "
        f"FROM message m WHERE m.ROWID > ? AND m.ROWID <= ? AND {tap_where}"
    )
    total = conn.execute("SELECT COUNT(*) FROM message").fetchone()[0]
    if progress:
        progress(0, total)

    frames: list[pl.DataFrame] = []
    tapbacks: list[tuple] = []
    decode = decode_attributed_body
    last = -1
    while True:
        if cancel is not None and cancel():
            raise CancelledError(
                f"iMessage - read cancelled after {stats['messages_read']:,} of {total:,} messages"
            )
        rows = conn.execute(sql, (last, chunk_rows)).fetchall()
        if not rows:
            break
        first, last = last, rows[-1][0]
        stats["messages_read"] += len(rows)
        c_rowid: list[int] = []
        c_guid: list[str] = []
        c_chat: list[str] = []
        c_sender: list[str | None] = []
        c_me: list[bool] = []
        c_date: list[int | None] = []
        c_text: list[str | None] = []
        c_src: list[str] = []
        c_undec: list[bool] = []
        c_edit: list[bool] = []
        c_att: list[int] = []
        tap_info = None
        for rowid, guid, text, blob, hid, date, me, flag, chat_rid, natt in rows:
            if flag & 1:
                if tap_info is None:
                    tap_info = {r[0]: r[1:] for r in conn.execute(tap_sql, (first, last))}
                info = tap_info.get(rowid)
                if info is None:  # changed between the two queries (live file): read it next time
                    continue
                atype, aguid, aemoji = info
                if me:
                    sender = None
                else:
                    sender = handles.get(hid)
                    if sender is None and chat_rid is not None:
                        sender = sole.get(chat_rid)
                tapbacks.append((parent_guid(aguid), atype, bool(me), sender, date, aemoji))
                continue
            undec = False
            if text:
                src = "text"
            elif blob is not None:
                try:
                    text = decode(blob)
                except Exception:  # one bad blob must not stop the read; it is counted below
                    text = None
                if text:
                    src = "attributed_body"
                else:
                    text, src, undec = None, "none", True
            else:
                text, src = None, "none"
            if text is None and not natt:
                if flag & 6:
                    stats["unsent_dropped"] += 1
                    continue
                if not undec:
                    stats["system_skipped"] += 1  # group renames, member changes, payload-only
                    continue
            if undec:
                stats["undecodable"] += 1
            elif src == "attributed_body":
                stats["from_attributed_body"] += 1
            if flag & 2:
                stats["edited"] += 1
            chat = chat_ids.get(chat_rid) if chat_rid is not None else None
            if chat is None:  # no join row, or a join to a chat row that is gone
                chat = ORPHAN
                stats["orphans"] += 1
            if me:
                sender = None
            else:
                sender = handles.get(hid)
                if sender is None:
                    if hid:
                        stats["unknown_handle"] += 1  # points at a vanished handle row
                    elif chat_rid is not None:
                        sender = sole.get(chat_rid)
            c_rowid.append(rowid)
            c_guid.append(guid)
            c_chat.append(chat)
            c_sender.append(sender)
            c_me.append(bool(me))
            c_date.append(date)
            c_text.append(text)
            c_src.append(src)
            c_undec.append(undec)
            c_edit.append(bool(flag & 2))
            c_att.append(natt)
        frames.append(
            pl.DataFrame(
                [c_rowid, c_guid, c_chat, c_sender, c_me, c_date, c_text, c_src, c_undec, c_edit, c_att],
                schema=_RAW_SCHEMA,
                orient="col",
            )
        )
        if progress:
            progress(stats["messages_read"], total)

    raw = pl.concat(frames) if frames else pl.DataFrame(schema=_RAW_SCHEMA)
    messages = raw.select(
        pl.lit(CHANNEL).alias("channel"),
        (pl.lit(f"{CHANNEL}:") + pl.col("guid")).alias("message_id"),
        "source_rowid",
        "chat_id",
        "sender",
        "is_from_me",
        apple_date_to_us(pl.col("date")).alias("ts"),
        "text",
        "text_source",
        "undecodable",
        "edited",
        "attachments",
    )
    messages = _fold_tapbacks(messages, tapbacks, stats)
    stats["messages"] = messages.height

    chat_rows = []
    for rid, guid, style, name in chats_raw:
        p = sorted(parts.get(rid, ()))
        kind = "group" if style == 43 or len(p) > 1 else "direct"
        chat_rows.append((CHANNEL, chat_ids[rid], kind, name or None, p))
    if stats["orphans"]:
        chat_rows.append((CHANNEL, ORPHAN, "direct", None, []))
    chats = pl.DataFrame(chat_rows, schema=CHAT_SCHEMA, orient="row")

    warnings = []
    if stats["tapbacks_orphaned"]:
        warnings.append(f"iMessage - {stats['tapbacks_orphaned']:,} tapbacks whose parent message is missing")
    if stats["orphans"]:
        warnings.append(f"iMessage - {stats['orphans']:,} messages with no chat, kept under {ORPHAN}")
    if stats["unknown_handle"]:
        warnings.append(f"iMessage - {stats['unknown_handle']:,} messages from a handle that no longer exists")
    if stats["undecodable"]:
        warnings.append(f"iMessage - {stats['undecodable']:,} attributedBody blobs yielded no text")
    dt = time.perf_counter() - t0
    log.info(
        "iMessage - read %s rows into %s messages and %s chats in %.2f s",
        f"{stats['messages_read']:,}", f"{stats['messages']:,}", f"{chats.height:,}", dt,
    )
    return ReadResult(messages=messages.select(list(MESSAGE_SCHEMA)), chats=chats, stats=stats, warnings=warnings)


def _fold_tapbacks(messages: pl.DataFrame, tapbacks: list[tuple], stats: dict[str, int]) -> pl.DataFrame:
    """Attach the final tapback state to each parent as ``reactions`` (empty list when none).

    Args:
        messages: kept messages (no ``reactions`` column yet).
        tapbacks: ``(parent_guid, associated_message_type, is_from_me, sender, date, emoji)``
            in ROWID order.
        stats: updated with ``tapbacks_folded`` (tapback rows, adds and removals, whose parent
            is kept) and ``tapbacks_orphaned`` (the rest).
    """
    empty = pl.lit(pl.Series([[]], dtype=pl.List(REACTION))).first()
    if not tapbacks:
        return messages.with_columns(empty.alias("reactions"))
    prefix = f"{CHANNEL}:"
    wanted = {prefix + t[0] for t in tapbacks if t[0]}
    present = set(messages.filter(pl.col("message_id").is_in(list(wanted)))["message_id"].to_list())
    state: dict[tuple, tuple] = {}
    for pguid, atype, me, sender, date, emoji in tapbacks:
        pid = prefix + pguid if pguid else None
        if pid not in present:
            stats["tapbacks_orphaned"] += 1
            continue
        stats["tapbacks_folded"] += 1
        k = atype % 1000
        key = (pid, me, sender, k)
        if atype >= 3000:
            state.pop(key, None)
        else:
            state.pop(key, None)  # re-insert so dict order follows the latest add
            state[key] = (date, emoji if k == 6 else None)
    if not state:
        return messages.with_columns(empty.alias("reactions"))
    rx = pl.DataFrame(
        {
            "message_id": [k[0] for k in state],
            "kind": [REACTION_KINDS[k[3]] for k in state],
            "sender": [k[2] for k in state],
            "is_from_me": [k[1] for k in state],
            "date": [v[0] for v in state.values()],
            "emoji": [v[1] for v in state.values()],
        },
        schema={"message_id": pl.Utf8, "kind": pl.Utf8, "sender": pl.Utf8, "is_from_me": pl.Boolean,
                "date": pl.Int64, "emoji": pl.Utf8},
    )
    rx = (
        rx.with_columns(apple_date_to_us(pl.col("date")).alias("ts"))
        .sort("ts", maintain_order=True)
        .group_by("message_id", maintain_order=True)
        .agg(pl.struct("kind", "sender", "is_from_me", "ts", "emoji").alias("reactions"))
        .with_columns(pl.col("reactions").cast(pl.List(REACTION)))
    )
    out = messages.join(rx, on="message_id", how="left", maintain_order="left")
    return out.with_columns(pl.col("reactions").fill_null(empty))
