"""Write Apple Messages ``chat.db`` files from the real DDL, for tests and the demo archive.

The schema is ``schemas/chat.db.sql`` exactly as Apple ships it, triggers included. Those
triggers call functions only Messages registers (``delete_attachment_path`` and friends), so the
writer's connection registers no-op Python functions under those names; the file keeps Apple's
triggers and any other writer (without the functions) fails, as it would on a real chat.db.

Dates are written as Apple stores them: nanoseconds since 2001-01-01 UTC (``date_unit="ns"``,
modern macOS) or seconds (``date_unit="s"``, old macOS).

Example:
    b = ChatDbBuilder(tmp / "chat.db")
    h = b.add_handle("+15550102233")
    c = b.add_chat([h])
    guid = b.add_message(c, h, "hi", ts=datetime(2024, 1, 1, tzinfo=UTC))
    b.add_tapback(c, 0, guid, "love", ts=..., is_from_me=True)
    b.close()
"""

from __future__ import annotations

import plistlib
import random
import sqlite3
import struct
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from brb_pipeline.core.records import REACTION_KINDS
from brb_pipeline.demo.chatdb_schema import LEGACY_DDL, STYLE_DIRECT, STYLE_GROUP, TRIGGER_FUNCTIONS, apple_ddl

_APPLE_EPOCH_S = 978307200


def apple_time(ts: datetime, unit: str = "ns") -> int:
    """Apple's ``message.date`` for ``ts``: ns (modern) or s (old macOS) since 2001-01-01 UTC."""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    secs = int(ts.timestamp()) - _APPLE_EPOCH_S
    micros = ts.microsecond
    if unit == "s":
        return secs
    return secs * 1_000_000_000 + micros * 1000


def _len_bytes(n: int) -> bytes:
    """A non-negative typedstream integer: 1 byte below 0x80, else 0x81 + int16 / 0x82 + int32 (LE)."""
    if n < 0x80:
        return bytes((n,))
    if n < 0x8000:
        return b"\x81" + struct.pack("<h", n)
    return b"\x82" + struct.pack("<i", n)


def _templated(encode: Callable[[str], bytes]) -> Callable[[str], bytes]:
    """A faster equivalent of ``encode`` for plain message bodies, or ``encode`` itself.

    A plain body is a fixed prefix, the UTF-8 length and bytes, a fixed middle, the UTF-16
    length of the attribute run and a fixed suffix. The template is cut from ``encode("ab")``
    and only used if it reproduces ``encode`` byte for byte on a few probes.
    """
    try:
        ref = encode("ab")
        i = ref.index(b"+\x02ab") + 1
        j = ref.index(b"iI\x01\x02", i + 3) + 3
        prefix, mid, suffix = ref[:i], ref[i + 3 : j], ref[j + 1 :]
    except ValueError:
        return encode

    def fast(text: str) -> bytes:
        if not text:
            return encode(text)
        u8 = text.encode("utf-8", errors="surrogatepass")
        u16 = len(text.encode("utf-16-le", errors="surrogatepass")) // 2
        return prefix + _len_bytes(len(u8)) + u8 + mid + _len_bytes(u16) + suffix

    probes = ("a", "x" * 200, "é🎉" * 90, "look \ufffc", "y" * 40000)
    return fast if all(fast(t) == encode(t) for t in probes) else encode


def _register_trigger_functions(conn: sqlite3.Connection) -> None:
    for name, nargs in TRIGGER_FUNCTIONS.items():
        conn.create_function(name, nargs, lambda *a: None)


class ChatDbBuilder:
    """Create a chat.db and fill it; rows are buffered and written in batches on flush/close.

    Args:
        path: the file to create (must not exist).
        legacy: use :data:`~brb_pipeline.demo.chatdb_schema.LEGACY_DDL` (old macOS column set) instead of Apple's current DDL.
        date_unit: ``"ns"`` (modern macOS) or ``"s"`` (old macOS) for every date written.
        wal: put the file in WAL mode with auto-checkpoint off, so committed rows stay in
            ``chat.db-wal`` while this builder is open (as when Messages is running).
        attributed_body_always: also store an ``attributedBody`` for messages whose text is in
            ``text`` (what recent macOS does); the blob is then redundant.
        seed: make generated guids (messages, attachments) deterministic; None uses uuid4.
        bulk: create Apple's indexes and triggers at :meth:`close` instead of up front (much
            faster for big files; the columns the triggers maintain, ``cache_roomnames`` and
            ``cache_has_attachments``, are written directly). The final schema is identical.
    """

    def __init__(
        self,
        path: Path,
        *,
        legacy: bool = False,
        date_unit: str = "ns",
        wal: bool = False,
        attributed_body_always: bool = False,
        bulk: bool = False,
        seed: int | None = None,
    ) -> None:
        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(f"{self.path} exists")
        self.date_unit = date_unit
        self.legacy = legacy
        self.attributed_body_always = attributed_body_always and not legacy
        self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        _register_trigger_functions(self.conn)
        if wal:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA wal_autocheckpoint=0")
        else:
            self.conn.execute("PRAGMA journal_mode=MEMORY")
            self.conn.execute("PRAGMA synchronous=OFF")
            self.conn.execute("PRAGMA cache_size=-131072")  # 128 MiB while building
        self.bulk = bulk and not legacy
        self.conn.executescript(LEGACY_DDL if legacy else apple_ddl("tables" if self.bulk else "all"))
        self._room: dict[int, str] = {}
        self._cols = {
            t: [r[1] for r in self.conn.execute("SELECT * FROM pragma_table_info(?)", (t,))]
            for t in ("message", "handle", "chat", "attachment")
        }
        self._next = {"message": 1, "handle": 1, "chat": 1, "attachment": 1}
        self._rows: dict[str, list[dict[str, Any]]] = {t: [] for t in self._cols}
        self._joins: dict[str, list[tuple[int, ...]]] = {
            "chat_handle_join": [],
            "chat_message_join": [],
            "message_attachment_join": [],
        }
        self._encode = None
        self._rng = random.Random(seed) if seed is not None else None

    # ---------------------------------------------------------------- helpers

    def _date(self, ts: datetime | None) -> int:
        return 0 if ts is None else apple_time(ts, self.date_unit)

    def _body(self, text: str) -> bytes:
        if self._encode is None:
            from brb_pipeline.sources.typedstream import encode_attributed_body

            self._encode = _templated(encode_attributed_body)
        return self._encode(text)

    def new_guid(self) -> str:
        """A new upper-case UUID string (deterministic when the builder has a seed)."""
        if self._rng is not None:
            return str(uuid.UUID(int=self._rng.getrandbits(128), version=4)).upper()
        return str(uuid.uuid4()).upper()

    # ---------------------------------------------------------------- rows

    def add_handle(
        self,
        handle_id: str,
        *,
        service: str = "iMessage",
        country: str = "us",
        rowid: int | None = None,
        write: bool = True,
    ) -> int:
        """Add a ``handle`` row; returns its ROWID.

        ``write=False`` reserves the ROWID without writing the row: a vanished handle that
        messages still point at.
        """
        rid = rowid if rowid is not None else self._next["handle"]
        self._next["handle"] = max(self._next["handle"], rid + 1)
        if write:
            self._rows["handle"].append(
                {"ROWID": rid, "id": handle_id, "country": country, "service": service,
                 "uncanonicalized_id": None}
            )
        return rid

    def add_chat(
        self,
        handles: Sequence[int],
        *,
        guid: str | None = None,
        display_name: str | None = None,
        style: int | None = None,
        identifier: str | None = None,
    ) -> int:
        """Add a ``chat`` with its ``chat_handle_join`` rows; returns its ROWID.

        ``style`` defaults to 43 (group) for more than one handle, else 45 (direct).
        """
        rid = self._next["chat"]
        self._next["chat"] += 1
        if style is None:
            style = STYLE_GROUP if len(handles) > 1 else STYLE_DIRECT
        if identifier is None:
            identifier = f"chat{rid:09d}" if style == STYLE_GROUP else f"handle-{rid}"
        if guid is None:
            guid = f"iMessage;{'+' if style == STYLE_GROUP else '-'};{identifier}"
        self._rows["chat"].append(
            {"ROWID": rid, "guid": guid, "style": style, "state": 3, "chat_identifier": identifier,
             "service_name": "iMessage", "room_name": identifier if style == STYLE_GROUP else None,
             "display_name": display_name or ""}
        )
        for h in handles:
            self._joins["chat_handle_join"].append((rid, h))
        if style == STYLE_GROUP:
            self._room[rid] = identifier
        return rid

    def add_message(
        self,
        chat: int | Iterable[int] | None,
        handle: int,
        text: str | None,
        *,
        ts: datetime | None,
        is_from_me: bool = False,
        text_mode: str = "text",
        guid: str | None = None,
        attachments: int = 0,
        date_edited: datetime | None = None,
        date_retracted: datetime | None = None,
        item_type: int = 0,
        group_title: str | None = None,
        raw_body: bytes | None = None,
        associated_guid: str | None = None,
        associated_type: int = 0,
        associated_emoji: str | None = None,
        raw_date: Any = None,
        summary_info: bytes | None = None,
        columns: dict[str, Any] | None = None,
        files: list[dict[str, Any]] | None = None,
    ) -> str:
        """Add a ``message`` (+ chat and attachment joins); returns its guid.

        Args:
            chat: chat ROWID(s) to join it to; None leaves it orphaned (no chat_message_join).
            handle: ``handle_id`` (0 for none, as Messages writes for the owner in groups).
            text: the message text (None for no text at all).
            ts: when it was sent; None writes a NULL ``date`` (seen on real databases).
            text_mode: where the text goes: ``"text"`` (``message.text``), ``"body_null"``
                (only in ``attributedBody``, ``text`` NULL) or ``"body_empty"`` (``text`` '').
            attachments: number of attachment rows to create and join.
            raw_body: store these bytes as ``attributedBody`` verbatim (e.g. junk).
            raw_date: store this ``date`` verbatim instead of ``ts`` (a wrong unit, year 1...).
            summary_info: ``message_summary_info`` bytes (see :meth:`add_edited_message`).
            columns: further ``message`` columns written verbatim (``thread_originator_guid``...).
            files: attachment rows to create and join, each a dict of ``attachment`` columns.
        """
        rid = self._next["message"]
        self._next["message"] += 1
        guid = guid or self.new_guid()
        body = raw_body
        col_text: str | None = text
        if text is not None and raw_body is None:
            if text_mode != "text":
                body = self._body(text)
                col_text = None if text_mode == "body_null" else ""
            elif self.attributed_body_always:
                body = self._body(text)
        elif text is None and raw_body is not None and text_mode == "body_empty":
            col_text = ""
        date = raw_date if raw_date is not None else (None if ts is None else self._date(ts))
        self._rows["message"].append(
            {"ROWID": rid, "guid": guid, "text": col_text, "attributedBody": body,
             "handle_id": handle, "date": date, "date_read": date if not is_from_me else 0,
             "date_delivered": date if is_from_me else 0, "is_from_me": int(is_from_me),
             "service": "iMessage", "is_finished": 1, "is_sent": int(is_from_me),
             "is_delivered": 1, "is_read": int(not is_from_me), "item_type": item_type,
             "group_title": group_title, "date_edited": self._date(date_edited),
             "date_retracted": self._date(date_retracted),
             "associated_message_guid": associated_guid, "associated_message_type": associated_type,
             "associated_message_emoji": associated_emoji,
             "cache_has_attachments": int(attachments > 0), "cache_roomnames": None,
             "message_summary_info": summary_info, **(columns or {})}
        )
        chats = [] if chat is None else ([chat] if isinstance(chat, int) else list(chat))
        if self.bulk:  # what the after_insert_on_chat_message_join trigger would have written
            rooms = [self._room[c] for c in chats if c in self._room]
            self._rows["message"][-1]["cache_roomnames"] = ",".join(rooms) if rooms else None
        for c in chats:
            self._joins["chat_message_join"].append((c, rid, date))
        self._add_attachments(rid, attachments, date, is_from_me)
        for spec in files or ():
            self._add_file(rid, spec, date, is_from_me)
        if files:
            self._rows["message"][-1]["cache_has_attachments"] = 1
        return guid

    def _add_file(self, rid: int, spec: dict[str, Any], date: Any, is_from_me: bool) -> None:
        """One attachment row with the given columns, joined to message ``rid`` (``rid`` None: no join)."""
        aid = self._next["attachment"]
        self._next["attachment"] += 1
        ag = self.new_guid()
        self._rows["attachment"].append({"ROWID": aid, "guid": ag, "original_guid": ag, "created_date": date,
                                         "transfer_state": 5, "is_outgoing": int(is_from_me), **spec})
        if rid is not None:
            self._joins["message_attachment_join"].append((rid, aid))

    def add_unjoined_file(self, spec: dict[str, Any]) -> None:
        """An attachment row no message points at (seen after a message is deleted mid-sync)."""
        self._add_file(None, spec, 0, False)

    def _add_attachments(self, rid: int, n: int, date: Any, is_from_me: bool) -> None:
        """``n`` photo attachment rows joined to message ``rid``."""
        for _ in range(n):
            aid = self._next["attachment"]
            self._next["attachment"] += 1
            ag = self.new_guid()
            self._rows["attachment"].append(
                {"ROWID": aid, "guid": ag, "original_guid": ag, "created_date": date,
                 "filename": f"~/Library/Messages/Attachments/{aid:02x}/IMG_{aid:04d}.heic",
                 "mime_type": "image/heic", "uti": "public.heic", "transfer_name": f"IMG_{aid:04d}.heic",
                 "total_bytes": 1_200_000, "transfer_state": 5, "is_outgoing": int(is_from_me)}
            )
            self._joins["message_attachment_join"].append((rid, aid))

    def add_edited_message(
        self,
        chat: int | Iterable[int] | None,
        handle: int,
        versions: Sequence[tuple[str, datetime]],
        *,
        retracted_parts: Sequence[int] = (),
        body: bool = True,
        **kwargs: Any,
    ) -> str:
        """Add a message edited on macOS 13+ / iOS 16+, laid out as Messages stores it.

        ``text`` is NULL, ``attributedBody`` holds the final version (``body=False`` leaves it
        NULL, so only the history holds the text), ``date_edited`` is the last edit and
        ``message_summary_info`` is a binary plist with ``ec`` (edited content: part index ->
        every version of that part, oldest first, each ``{"d": seconds since 2001, "t":
        attributedBody typedstream}``), ``ep`` (edited part indices), ``otr`` (original text
        range per part) and ``rp`` (retracted part indices, ``date_retracted`` set) when some
        part was unsent.

        Args:
            versions: ``(text, when)`` of the original (sent at ``when``) then of each edit.
            kwargs: passed on to :meth:`add_message` (``is_from_me``, ``attachments``...).
        """
        first_text, first_ts = versions[0]
        final_text, last_ts = versions[-1]
        info: dict[str, Any] = {
            "ec": {"0": [{"d": int(apple_time(t, "s")), "t": self._body(v)} for v, t in versions]},
            "ep": [0],
            "otr": {"0": {"lo": 0, "le": len(first_text.encode("utf-16-le")) // 2}},
        }
        if retracted_parts:  # Messages stamps date_retracted when a part is unsent
            info["rp"] = list(retracted_parts)
            kwargs.setdefault("date_retracted", last_ts)
        return self.add_message(
            chat, handle, None, ts=first_ts, raw_body=self._body(final_text) if body else None,
            date_edited=last_ts if len(versions) > 1 else None,
            summary_info=plistlib.dumps(info, fmt=plistlib.FMT_BINARY), **kwargs,
        )

    def add_tapback(
        self,
        chat: int | None,
        handle: int,
        parent_guid: str,
        kind: str,
        *,
        ts: datetime,
        is_from_me: bool = False,
        remove: bool = False,
        part: int | None = 0,
        emoji: str | None = None,
    ) -> str:
        """Add a tapback (2000+k) or its removal (3000+k) on ``parent_guid``; returns its guid.

        ``part`` N writes ``p:N/GUID``; ``part=None`` writes the older ``bp:GUID`` form.
        """
        k = REACTION_KINDS.index(kind)
        assoc = f"bp:{parent_guid}" if part is None else f"p:{part}/{parent_guid}"
        return self.add_message(
            chat, handle, "Loved \u201c...\u201d" if kind == "love" else f"Reacted {kind}",
            ts=ts, is_from_me=is_from_me, associated_guid=assoc,
            associated_type=(3000 if remove else 2000) + k, associated_emoji=emoji,
        )

    # ---------------------------------------------------------------- writing

    def _insert_rows(self, table: str) -> None:
        rows = self._rows[table]
        if not rows:
            return
        have = set(self._cols[table])
        k0 = rows[0].keys()  # rows written with further columns (add_message's columns, files) differ
        keys = dict.fromkeys(k0) | dict.fromkeys(k for r in rows if r.keys() != k0 for k in r)
        cols = [c for c in keys if c in have]
        sql = 'INSERT INTO "{}" ({}) VALUES ({})'.format(
            table, ", ".join(f'"{c}"' for c in cols), ", ".join("?" * len(cols))
        )
        self.conn.executemany(sql, ([r.get(c) for c in cols] for r in rows))
        rows.clear()

    def flush(self) -> None:
        """Write and commit everything buffered so far (stays in the WAL when ``wal=True``)."""
        self.conn.execute("BEGIN")
        for t in ("handle", "chat", "attachment", "message"):
            self._insert_rows(t)
        cmj = self._joins["chat_message_join"]
        if self.legacy:
            self.conn.executemany(
                "INSERT INTO chat_message_join (chat_id, message_id) VALUES (?, ?)",
                [(c, m) for c, m, _ in cmj],
            )
        else:
            self.conn.executemany(
                "INSERT INTO chat_message_join (chat_id, message_id, message_date) VALUES (?, ?, ?)", cmj
            )
        self.conn.executemany(
            "INSERT OR IGNORE INTO chat_handle_join (chat_id, handle_id) VALUES (?, ?)",
            self._joins["chat_handle_join"],
        )
        self.conn.executemany(
            "INSERT INTO message_attachment_join (message_id, attachment_id) VALUES (?, ?)",
            self._joins["message_attachment_join"],
        )
        for j in self._joins.values():
            j.clear()
        self.conn.execute("COMMIT")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one statement on the writer's connection (trigger functions are registered)."""
        self.flush()
        self.conn.execute(sql, params)

    def close(self) -> Path:
        """Flush and close; returns the path."""
        self.flush()
        if self.bulk:
            self.conn.executescript(apple_ddl("rest"))
            self.bulk = False
        self.conn.close()
        return self.path

    def __enter__(self) -> ChatDbBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.conn.close()
