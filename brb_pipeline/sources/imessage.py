"""Read an Apple Messages ``chat.db`` (a snapshot of it) into the normalized record frames.

Rules, in the order they are applied to each ``message`` row (read in ROWID order, in chunks):

* ``associated_message_type`` 2000-2007 (add) / 3000-3007 (remove) rows are tapbacks (2006 an
  emoji tapback with ``associated_message_emoji``, 2007 a sticker); a later kind (2008-2999,
  3008-3999) is a reaction this reader does not know: never a message, counted
  (``tapbacks_unknown``), never fatal. Tapbacks are
  never messages; they are folded onto their parent (``p:N/GUID`` or ``bp:GUID``) as the final
  state per (sender, kind) after removals. Tapbacks whose parent is not among the kept messages
  are counted (``tapbacks_orphaned``). They are read in a first pass (a small share of the rows),
  so the messages can then be produced block by block with their final reactions attached.
* Text comes from ``text`` unless it is NULL or ''; then from ``attributedBody`` (typedstream)
  via :func:`decode_attributed_body` (``text_source="attributed_body"``); a blob that yields
  nothing sets ``undecodable``.
* A message with no text and no attachments is dropped: as ``unsent_dropped`` when it was
  retracted/edited (unsent), as ``system_skipped`` otherwise (group renames, member changes,
  plugin payloads). Undecodable messages are kept, flagged.
* Edits (macOS 13+): ``date_edited != 0`` or an edit history in ``message_summary_info`` marks
  ``edited``. The final text wins: ``text``, else ``attributedBody`` (where Messages keeps the
  final version of an edited message, ``text`` being NULL), else the last version of each part
  in the history's ``ec`` (``text_source="edit_history"``, counted ``from_edit_history``).
  Earlier versions are never read into the text: what a person replaced is not made
  searchable. See :func:`edit_history`.
* Unsent (retracted) messages: ``date_retracted != 0`` or every part listed in the history's
  ``rp``. Nothing of a fully unsent message is kept (``unsent_dropped``); a message with some
  parts unsent keeps the parts that remain (``partly_unsent``), the unsent parts' text never.
* ``text`` that is not valid UTF-8 (a damaged row, a buggy writer) never stops the read: the
  row's ``attributedBody`` is decoded instead when it yields text (``text_recovered_from_body``),
  else the bytes are decoded with U+FFFD replacement characters (``text_invalid_utf8``); the
  message is kept either way. Any other text column that is not UTF-8 (a guid, a handle, a chat
  name) is decoded with replacement too (``other_invalid_utf8``). Logs name the row (ROWID and
  column), never its content.
* Messages without a ``chat_message_join`` row get ``chat_id = "imessage:orphan"``; incoming
  messages whose ``handle_id`` points at a vanished handle keep ``sender = None`` and are counted
  (``unknown_handle``).

:func:`read_imessage` returns the whole archive as one frame; :class:`IMessageStream` yields the
same rows in blocks of ``chunk_rows`` so a caller can write them out without holding them all.
Dates and the per-row text rules are decoded by :mod:`brb_pipeline.sources.imessage_rows`.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl

from brb_pipeline.sources.sqlite_ro import LOCK_TIMEOUT_S
from brb_pipeline.core.records.handles import DEFAULT_REGION
from brb_pipeline.core.errors import CancelledError
from brb_pipeline.core.records.handles import normalize_handle
from brb_pipeline.core.records import (
    CHAT_SCHEMA,
    EXTRA,
    MESSAGE_SCHEMA,
    ORPHAN_CHAT_ID,
    REACTION,
    REACTION_KINDS,
    ReadResult,
    read_all,
)
from brb_pipeline.sources.imessage_extras import STAT_KEYS as EXTRA_STAT_KEYS
from brb_pipeline.sources.imessage_extras import ExtrasReader
from brb_pipeline.sources.typedstream import decode_attributed_body
from brb_pipeline.sources.imessage_rows import apple_date_to_us, parent_guid, reaction_frame, row_text
from brb_pipeline.sources.sqlite_ro import (
    BlockReader,
    closed_on_error,
    open_readonly,
    stat_warnings,
    table_columns,
    translate_sqlite_error,
)

log = logging.getLogger(__name__)

CHANNEL = "imessage"
WHAT = "chat.db"
ORPHAN = f"{CHANNEL}:{ORPHAN_CHAT_ID}"
CHUNK_ROWS = 10_000  # source rows per block (10K rows read as fast as 50K and hold less at once)

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

# message.date as an integer, or NULL for text, blobs and values beyond int64 (a REAL 1e30 from a
# damaged file): the conversion above then never overflows.
_DATE_SQL = ("CASE WHEN typeof(m.date) IN ('integer', 'real') AND m.date BETWEEN -9.0e18 AND 9.0e18 "
             "THEN CAST(m.date AS INTEGER) END")

STAT_KEYS = (
    "messages_read",
    "messages",
    "tapbacks_folded",
    "tapbacks_orphaned",
    "tapbacks_unknown",
    "orphans",
    "unknown_handle",
    "from_attributed_body",
    "undecodable",
    "unsent_dropped",
    "edited",
    "system_skipped",
    "date_invalid",
    "from_edit_history",
    "partly_unsent",
    *EXTRA_STAT_KEYS,
    "text_invalid_utf8",
    "text_recovered_from_body",
    "other_invalid_utf8",
)

#: Rows whose invalid ``text`` is logged by ROWID (the rest are only counted).
BAD_TEXT_LOGGED = 5

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


def read_imessage(
    path: Path,
    *,
    default_region: str = DEFAULT_REGION,
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[int, int], None] | None = None,
    chunk_rows: int = CHUNK_ROWS,
    timeout_s: float = LOCK_TIMEOUT_S,
    attachments_dir: Path | None = None,
    voice_lengths: bool = False,
) -> ReadResult:
    """Read every message and chat of a chat.db, read-only.

    Args:
        path: the chat.db file (normally the snapshot copy, never written).
        default_region: region for phone handles without a country code.
        cancel: polled between chunks; returning True raises :class:`CancelledError`.
        progress: called as ``progress(rows_done, rows_total)`` after each chunk.
        chunk_rows: message rows fetched per chunk (bounds memory held in Python tuples).
        timeout_s: how long to wait on a lock when opening.
        attachments_dir: the folder chat.db's ``~/Library/Messages/Attachments/...`` paths
            resolve against (None: as written); files are only checked to exist, never opened.
        voice_lengths: read each voice message's length from its ``.caf`` header (opt-in: the
            one case where an attachment file is opened; ``sources/caf.py``).

    Returns:
        ReadResult with ``messages`` (MESSAGE_SCHEMA, ROWID order), ``chats`` (CHAT_SCHEMA) and
        ``stats`` with the keys in :data:`STAT_KEYS`.

    Raises:
        SourceMissingError, NotADatabaseError, UnknownSchemaError, DatabaseLockedError,
        CancelledError.
    """
    with IMessageStream(path, default_region=default_region, cancel=cancel, progress=progress,
                        chunk_rows=chunk_rows, timeout_s=timeout_s, attachments_dir=attachments_dir,
                        voice_lengths=voice_lengths) as stream:
        return read_all(stream)


class IMessageStream(BlockReader):
    """A chat.db read block by block: the rows of :func:`read_imessage`, never all at once.

    Use as a context manager (the connection is closed on exit)::

        with IMessageStream(path) as stream:
            stream.chats            # every chat a message can point at (CHAT_SCHEMA), orphan bucket included
            for block in stream.blocks():   # MESSAGE_SCHEMA frames, ROWID order
                ...
            result = stream.result()        # final chats, stats, warnings; messages empty

    Memory held between blocks: the handle and chat maps and the final tapback state (one entry
    per reaction still standing), not the messages.

    Args:
        path, default_region, cancel, progress, chunk_rows, timeout_s, attachments_dir,
            voice_lengths: as for :func:`read_imessage`.
    """

    def __init__(self, path: Path, *, chunk_rows: int = CHUNK_ROWS, attachments_dir: Path | None = None,
                 voice_lengths: bool = False, **options: Any) -> None:
        super().__init__(path, chunk_rows=chunk_rows, **options)
        self.attachments_dir = Path(attachments_dir).expanduser() if attachments_dir is not None else None
        self.voice_lengths = voice_lengths  # opt-in: a voice message's .caf header is read
        self.stats = dict.fromkeys(STAT_KEYS, 0)
        self.chats = pl.DataFrame(schema=CHAT_SCHEMA)
        self._t0 = time.perf_counter()

    def __enter__(self) -> "IMessageStream":
        self._conn = open_readonly(self.path, what=WHAT, required=REQUIRED, timeout_s=self.timeout_s,
                                   io=self.io)
        self._conn.text_factory = self._decode_other
        self._has_body = "attributedBody" in table_columns(self._conn, "message")
        with closed_on_error(self._conn, WHAT, self.path):
            self._prepare(self._conn)
        return self

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Handles, chats, the two message queries, and the final tapback state (first pass)."""
        self.handles = {rowid: normalize_handle(raw, self.region) for rowid, raw in conn.execute("SELECT ROWID, id FROM handle")}
        chat_cols = table_columns(conn, "chat")
        style_col = "style" if "style" in chat_cols else "NULL"
        name_col = "display_name" if "display_name" in chat_cols else "NULL"
        chats_raw = conn.execute(f"SELECT ROWID, guid, {style_col}, {name_col} FROM chat").fetchall()
        parts: dict[int, set[str]] = {}
        for chat_rid, hid in conn.execute("SELECT chat_id, handle_id FROM chat_handle_join"):
            h = self.handles.get(hid)
            if h is not None:
                parts.setdefault(chat_rid, set()).add(h)
        self.chat_ids = {rid: f"{CHANNEL}:{guid}" for rid, guid, _, _ in chats_raw}
        # Incoming message with handle_id 0 in a one-person chat: the sender is that person.
        self.sole = {rid: next(iter(p)) for rid, p in parts.items() if len(p) == 1}
        chat_rows = []
        for rid, guid, style, name in chats_raw:
            p = sorted(parts.get(rid, ()))
            kind = "group" if style == 43 or len(p) > 1 else "direct"
            chat_rows.append((CHANNEL, self.chat_ids[rid], kind, name or None, p))
        chat_rows.append((CHANNEL, ORPHAN, "direct", None, []))  # listed by result() only when used
        self.chats = pl.DataFrame(chat_rows, schema=CHAT_SCHEMA, orient="row")

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
        tap_where = f"({atype} BETWEEN 2000 AND 3999)"  # kinds past 2007/3007: counted in _fold_state
        self._extras = ExtrasReader(conn, self.attachments_dir, self.handles, voice_lengths=self.voice_lengths)
        flags = (  # 16: a reply, link preview or voice message; with 8, read again by ROWID
            f"({tap_where}) + 2 * (COALESCE({opt['date_edited']}, 0) != 0) "
            f"+ 4 * (COALESCE({opt['date_retracted']}, 0) != 0) + 8 * (COALESCE({opt['item_type']}, 0) != 0) "
            f"+ 16 * {self._extras.row_predicate}"
        )
        chat_of = "(SELECT MIN(j.chat_id) FROM chat_message_join j WHERE j.message_id = m.ROWID)"
        # The edit history is fetched only where it can matter: an edited or unsent row, or one
        # with no other text.
        no_text = "(m.text IS NULL OR m.text = '')" + (" AND m.attributedBody IS NULL" if "attributedBody" in mcols else "")
        summary = (
            f"CASE WHEN COALESCE({opt['date_edited']}, 0) != 0 OR COALESCE({opt['date_retracted']}, 0) != 0 "
            f"OR ({no_text}) THEN m.message_summary_info END"
            if "message_summary_info" in mcols else "NULL"
        )
        # Column names above come from our constants, never from data.
        self._sql = (
            f"SELECT m.ROWID, m.guid, CAST(m.text AS BLOB), {body}, m.handle_id, {_DATE_SQL}, m.is_from_me, {flags}, "
            f"{chat_of}, {att}, {summary} FROM message m WHERE m.ROWID > ? ORDER BY m.ROWID LIMIT ?"
        )
        tap_sql = (
            f"SELECT {atype}, {opt['associated_message_guid']}, {opt['associated_message_emoji']}, "
            f"m.handle_id, {_DATE_SQL}, m.is_from_me, {chat_of} FROM message m WHERE {tap_where} ORDER BY m.ROWID"
        )
        self.total = conn.execute("SELECT COUNT(*) FROM message").fetchone()[0]
        self._fold_state(conn.execute(tap_sql))

    def _fold_state(self, rows: Iterator[tuple]) -> None:
        """Final tapback state per parent (``self._rx``) and tapback rows per parent id.

        Args:
            rows: ``(associated_message_type, associated_message_guid, emoji, handle_id, date,
                is_from_me, chat rowid)`` of every tapback row, in ROWID order.
        """
        prefix = f"{CHANNEL}:"
        state: dict[tuple, tuple] = {}
        self._tap_rows: dict[str | None, int] = {}
        n_kinds = len(REACTION_KINDS)
        for atype, aguid, emoji, hid, date, me, chat_rid in rows:
            if me:
                sender = None
            else:
                sender = self.handles.get(hid)
                if sender is None and chat_rid is not None:
                    sender = self.sole.get(chat_rid)
            k = atype % 1000
            if k >= n_kinds:  # a reaction kind newer than this reader: never a message, counted
                self.stats["tapbacks_unknown"] += 1
                continue
            pguid = parent_guid(aguid)
            pid = prefix + pguid if pguid else None
            self._tap_rows[pid] = self._tap_rows.get(pid, 0) + 1
            if pid is None:
                continue
            key = (pid, bool(me), sender, k)
            state.pop(key, None)  # removed, or re-inserted so dict order follows the latest add
            if atype < 3000:
                state[key] = (date, emoji if k == 6 else None)
        self._tap_pids = [p for p in self._tap_rows if p is not None]
        self._rx = reaction_frame(state)

    def blocks(self) -> Iterator[pl.DataFrame]:
        """Yield the kept messages in ROWID order, ``chunk_rows`` source rows at a time.

        Yields:
            MESSAGE_SCHEMA frames (possibly empty when a chunk held only tapbacks or skipped rows).

        Raises:
            CancelledError, DatabaseLockedError (and the other source errors) between chunks.
        """
        if self._conn is None:
            raise RuntimeError("IMessageStream.blocks() outside its with-block")
        conn = self._conn
        if self.progress:
            self.progress(0, self.total)
        last = -1
        try:
            while True:
                if self.cancel is not None and self.cancel():
                    raise CancelledError(
                        f"iMessage - read cancelled after {self.stats['messages_read']:,} of {self.total:,} messages"
                    )
                rows = conn.execute(self._sql, (last, self.chunk_rows)).fetchall()
                if not rows:
                    break
                last = rows[-1][0]
                self.stats["messages_read"] += len(rows)
                extras = self._extras.block(conn, [r[0] for r in rows if r[7] & 24], [r[0] for r in rows if r[9]])
                block = self._block(rows, *extras)
                del rows
                if self.progress:
                    self.progress(self.stats["messages_read"], self.total)
                yield block
        except sqlite3.Error as e:
            raise translate_sqlite_error(e, WHAT, self.path) from None
        self._done = True

    def _block(self, rows: list[tuple], ext: dict[int, list[dict]], _audio: set[int]) -> pl.DataFrame:
        """One chunk of source rows -> kept messages (MESSAGE_SCHEMA) with their reactions and
        extras (``ext``: entries per ROWID, from :meth:`ExtrasReader.block`)."""
        self._ext, self._pending = ext, []
        raw = pl.DataFrame(self._kept_columns(rows), schema=_RAW_SCHEMA, orient="col")
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
        self.stats["messages"] += messages.height
        self.stats["date_invalid"] += messages["ts"].null_count()
        return self._attach_extras(self._attach_reactions(messages)).select(list(MESSAGE_SCHEMA))

    def _kept_columns(self, rows: list[tuple]) -> list[list]:
        """The kept messages of a chunk as the columns of :data:`_RAW_SCHEMA`; counts the rest.

        Tapbacks are skipped (folded from the first pass); a row with no text and no attachments
        is dropped as unsent or as a system item, unless its blob was undecodable.
        """
        stats, handles, sole, chat_ids = self.stats, self.handles, self.sole, self.chat_ids
        ext = self._ext
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
        for rowid, guid, text, blob, hid, date, me, flag, chat_rid, natt, info in rows:
            if flag & 1:
                continue  # a tapback: folded from the first pass
            if text is not None:
                text, blob = self._decode_text(rowid, text, blob)
            text, src, undec, flag = row_text(text, blob, info, flag, stats)
            if text is None and not natt and rowid not in ext:
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
            if (flag & 24 or natt) and rowid in ext:
                self._pending.append((len(c_rowid) - 1, ext[rowid]))
        return [c_rowid, c_guid, c_chat, c_sender, c_me, c_date, c_text, c_src, c_undec, c_edit, c_att]

    def _attach_extras(self, messages: pl.DataFrame) -> pl.DataFrame:
        """Add ``extras`` (null when none) from the entries queued by :meth:`_note_extras`; the
        rows are in the order :meth:`_kept_columns` produced them: ``self._pending`` holds
        ``(position in the chunk, entries)``."""
        if not self._pending:
            return messages.with_columns(pl.lit(None, dtype=pl.List(EXTRA)).alias("extras"))
        col: list[list[dict] | None] = [None] * messages.height
        for position, entries in self._pending:
            col[position] = entries
        return messages.with_columns(pl.Series("extras", col, dtype=pl.List(EXTRA)))
    def _decode_other(self, raw: bytes) -> str:
        """The connection's text factory: UTF-8, else replacement characters (counted)."""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.stats["other_invalid_utf8"] += 1
            return raw.decode("utf-8", "replace")

    def _decode_text(self, rowid: int, raw: bytes, blob: bytes | None) -> tuple[str, bytes | None]:
        """``message.text`` (fetched as bytes) as a string, and the blob :func:`row_text` gets.

        Invalid UTF-8 gives '' and the row's ``attributedBody`` when that decodes to text, else
        the bytes decoded with replacement characters. Counted; logged by ROWID, never content.
        """
        if isinstance(raw, str):  # a text_factory or an older SQLite handing back str
            return raw, blob
        try:
            return raw.decode("utf-8"), blob
        except UnicodeDecodeError:
            pass
        body = None
        if self._has_body and self._conn is not None:
            row = self._conn.execute("SELECT attributedBody FROM message WHERE ROWID = ?", (rowid,)).fetchone()
            body = row[0] if row and isinstance(row[0], bytes) else None
        try:
            recovered = decode_attributed_body(body) if body is not None else None
        except Exception:  # a bad blob as well: the replaced text below
            recovered = None
        kind = "text_recovered_from_body" if recovered else "text_invalid_utf8"
        self.stats[kind] += 1
        if self.stats["text_invalid_utf8"] + self.stats["text_recovered_from_body"] <= BAD_TEXT_LOGGED:
            log.warning("iMessage - message ROWID %d: column text is not valid UTF-8; %s", rowid,
                        "its attributedBody is used" if recovered else "kept with replacement characters")
        if recovered:
            return "", body
        return raw.decode("utf-8", "replace"), blob

    def _attach_reactions(self, messages: pl.DataFrame) -> pl.DataFrame:
        """Add ``reactions`` (empty list when none); count the tapback rows of these parents."""
        empty = pl.lit(pl.Series([[]], dtype=pl.List(REACTION))).first()
        if self._tap_pids:
            parents = messages.filter(pl.col("message_id").is_in(self._tap_pids))["message_id"].to_list()
            self.stats["tapbacks_folded"] += sum(self._tap_rows[p] for p in parents)
        if self._rx.height == 0:
            return messages.with_columns(empty.alias("reactions"))
        out = messages.join(self._rx, on="message_id", how="left", maintain_order="left")
        return out.with_columns(pl.col("reactions").fill_null(empty))

    def _summary(self) -> tuple[pl.DataFrame, list[str]]:
        """Chats (with the orphan bucket when used) and warnings."""
        stats = self.stats
        stats["tapbacks_orphaned"] = sum(self._tap_rows.values()) - stats["tapbacks_folded"]
        stats.update(self._extras.stats)
        chats = self.chats if stats["orphans"] else self.chats.head(self.chats.height - 1)  # the bucket is last
        warnings = stat_warnings(stats, {
            "tapbacks_orphaned": "iMessage - {n:,} tapbacks whose parent message is missing",
            "tapbacks_unknown": "iMessage - {n:,} reactions of a kind newer than this reader (associated_message_type past 2007/3007) were not folded",
            "orphans": f"iMessage - {{n:,}} messages with no chat, kept under {ORPHAN}",
            "unknown_handle": "iMessage - {n:,} messages from a handle that no longer exists",
            "undecodable": "iMessage - {n:,} attributedBody blobs yielded no text",
            "text_invalid_utf8": "iMessage - {n:,} messages had text that is not valid UTF-8 (kept, replaced)",
            "text_recovered_from_body": "iMessage - {n:,} messages had text that is not valid UTF-8 (read from attributedBody)",
            "other_invalid_utf8": "iMessage - {n:,} other values (guids, handles, names) were not valid UTF-8 (replaced)",
            "date_invalid": "iMessage - {n:,} messages with a missing or impossible date, kept without a time",
            "attachments_unjoined": "iMessage - {n:,} attachment rows no message points at",
            "link_previews_undecodable": "iMessage - {n:,} link previews that could not be read (their URL is kept)",
        })
        if stats.get("attachments_missing"):  # normal with Messages in iCloud: counted, not a warning
            log.info("iMessage - %s attachments are not in the attachments folder (offloaded or deleted)",
                     f"{stats['attachments_missing']:,}")
        log.info(
            "iMessage - read %s rows into %s messages and %s chats in %.2f s",
            f"{stats['messages_read']:,}", f"{stats['messages']:,}", f"{chats.height:,}", time.perf_counter() - self._t0,
        )
        return chats, warnings
