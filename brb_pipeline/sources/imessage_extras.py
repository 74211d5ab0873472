"""What a chat.db message holds besides its text: attachments, link previews, replies, group events.

Every fact is read from Apple's columns by name, each optional (a macOS version without one reads
as NULL): ``attachment`` (``filename``, ``mime_type``, ``uti``, ``transfer_name``, ``total_bytes``,
``is_sticker``) through ``message_attachment_join``; ``message`` (``thread_originator_guid``,
``item_type``, ``group_action_type``, ``other_handle``, ``group_title``, ``balloon_bundle_id``,
``payload_data``, ``is_audio_message``). Entries have the shape of
:data:`brb_pipeline.core.records.EXTRA`.

Attachment files are never opened or copied (one opt-in exception: ``voice_lengths`` reads a voice
message's ``.caf`` header for its length, ``sources/caf.py``): a path from chat.db (``~/Library/Messages/
Attachments/ab/01/GUID/name.pdf``) is resolved against the attachments folder the person named
(so a copied archive works) and only checked to exist (``os.path.exists``, a stat).

Bad input is counted, never fatal, and never logged with its content: ``attachments_missing``
(the file is not there), ``attachments_unjoined`` (an attachment row no message points at),
``link_previews_undecodable`` (a URL balloon whose payload could not be read: the URL, when the
text has one, stays in the text), ``replies_unresolved`` (the message answered is not in the
archive).
"""

from __future__ import annotations

import os
import plistlib
import sqlite3
from pathlib import Path
from typing import Any

from brb_pipeline.sources.caf import caf_seconds
from brb_pipeline.sources.sqlite_ro import table_columns
from brb_pipeline.sources.typedstream import audio_transcription, decode_attributed_body

URL_BALLOON = "com.apple.messages.URLBalloonProvider"
AUDIO_UTI = "com.apple.coreaudio-format"
CHATDB_ATTACHMENTS = "~/Library/Messages/Attachments"  # how chat.db spells the folder
_PREFIX = CHATDB_ATTACHMENTS + "/"
REPLY_CHARS = 60  # the first words of a message a reply names

STAT_KEYS = (
    "attachments_listed",
    "attachments_missing",
    "attachments_unjoined",
    "link_previews",
    "link_previews_undecodable",
    "replies",
    "replies_unresolved",
    "group_events",
    "voice_messages",
    "voice_transcriptions",
    "voice_lengths_read",
)

_MESSAGE_OPTIONAL = {
    "thread_originator_guid": "NULL",
    "item_type": "0",
    "group_action_type": "0",
    "other_handle": "0",
    "group_title": "NULL",
    "balloon_bundle_id": "NULL",
    "is_audio_message": "0",
}
_ATTACHMENT_OPTIONAL = {
    "filename": "NULL",
    "mime_type": "NULL",
    "uti": "NULL",
    "transfer_name": "NULL",
    "total_bytes": "0",
    "is_sticker": "0",
}


def resolve_attachment(filename: str | None, attachments_dir: Path | None) -> tuple[str | None, bool]:
    """chat.db's ``attachment.filename`` -> (path on this machine, whether a file is there).

    A path under ``~/Library/Messages/Attachments`` is re-rooted at ``attachments_dir``; any other
    ``~`` path is expanded; an absolute path is kept. The file is never opened.
    """
    if not filename:
        return None, False
    name = filename.replace("\\", "/")
    if attachments_dir is not None and name.startswith(_PREFIX):
        path = os.path.join(attachments_dir, name[len(_PREFIX):])
    else:
        path = os.path.expanduser(name)
    try:
        return path, os.path.exists(path)
    except (OSError, ValueError):  # a name the file system cannot take
        return path, False


def link_preview(payload: bytes | None) -> tuple[str | None, str | None, str | None] | None:
    """(URL, title, summary) of a URL balloon's ``payload_data`` (an NSKeyedArchiver plist).

    The archive's ``$objects`` hold the rich link metadata as a dict whose ``URL`` /
    ``originalURL`` (an ``NSURL`` with ``NS.relative``), ``title`` and ``summary`` point at
    strings by UID. Returns None for a payload that is not such an archive (never raises).
    """
    if not payload:
        return None
    try:
        root = plistlib.loads(bytes(payload))
        objects = root["$objects"]
    except Exception:  # damaged, truncated or foreign: counted by the caller
        return None
    if not isinstance(objects, list):
        return None

    def deref(value: Any, depth: int = 0) -> Any:
        if isinstance(value, plistlib.UID) and depth < 4:
            idx = value.data
            return deref(objects[idx], depth + 1) if 0 <= idx < len(objects) else None
        if isinstance(value, dict) and "NS.relative" in value and depth < 4:
            return deref(value["NS.relative"], depth + 1)
        if isinstance(value, dict) and "NS.string" in value:
            return deref(value["NS.string"], depth + 1)
        return value if isinstance(value, str) and value != "$null" else None

    url = title = summary = None
    for obj in objects:
        if not isinstance(obj, dict):
            continue
        url = url or deref(obj.get("URL")) or deref(obj.get("originalURL"))
        title = title or deref(obj.get("title"))
        summary = summary or deref(obj.get("summary"))
    if url is None and title is None:
        return None
    return url, title, summary


def group_event(item_type: int, action: int, title: str | None) -> str | None:
    """The line a group event reads as (without its actor), or None for other system items.

    ``item_type`` 1: a member added (``group_action_type`` 0) or removed (1), the member in
    ``other_handle``; 2: the group renamed to ``group_title``; 3 with action 0: the actor left.
    """
    if item_type == 1:
        return {0: "added", 1: "removed"}.get(action)
    if item_type == 2:
        return f"renamed the group to {title}" if title else "removed the group name"
    if item_type == 3 and action == 0:
        return "left the group"
    return None


def _kind(mime: str | None, uti: str | None, sticker: Any, audio_message: bool) -> str:
    if sticker:
        return "sticker"
    if audio_message or uti == AUDIO_UTI:
        return "voice"
    return "file"


class ExtrasReader:
    """The extras of a chat.db, one block of message ROWIDs at a time.

    Args:
        conn: the open, read-only chat.db connection.
        attachments_dir: the folder chat.db's attachment paths resolve against (None: as written).
        handles: handle ROWID -> normalized handle.
        voice_lengths: read a voice message's length from its ``.caf`` header (opt-in; the only
            case where an attachment file is opened, and then only its header).
    """

    def __init__(self, conn: sqlite3.Connection, attachments_dir: Path | None, handles: dict[int, str], *,
                 voice_lengths: bool = False) -> None:
        self.dir = attachments_dir
        self.handles = handles
        self.voice_lengths = voice_lengths
        self.stats = dict.fromkeys(STAT_KEYS, 0)
        mcols = table_columns(conn, "message")
        m = {c: (f"m.{c}" if c in mcols else lit) for c, lit in _MESSAGE_OPTIONAL.items()}
        payload = (f"CASE WHEN {m['balloon_bundle_id']} = '{URL_BALLOON}' THEN m.payload_data END"
                   if "payload_data" in mcols else "NULL")
        #: SQL true for a message row that may hold extras besides attachments: the reader's main
        #: query flags such rows (a bit), and only they are read again, by ROWID.
        #: Group events (``item_type`` != 0) are flagged apart by the reader.
        self.row_predicate = (  # 0 or 1, never NULL
            f"({m['thread_originator_guid']} IS NOT NULL "
            f"OR COALESCE({m['balloon_bundle_id']} = '{URL_BALLOON}', 0) OR COALESCE({m['is_audio_message']}, 0) != 0)"
        )
        voice_body = (f"CASE WHEN COALESCE({m['is_audio_message']}, 0) != 0 THEN m.attributedBody END"
                      if "attributedBody" in mcols else "NULL")
        self._msg_sql = (
            f"SELECT m.ROWID, {m['thread_originator_guid']}, {m['item_type']}, {m['group_action_type']}, "
            f"{m['other_handle']}, {m['group_title']}, {m['balloon_bundle_id']}, {payload}, {m['is_audio_message']}, "
            f"{voice_body} FROM message m WHERE m.ROWID IN ({{}})"
        )
        acols = table_columns(conn, "attachment")
        self._att_sql = None
        if acols and table_columns(conn, "message_attachment_join") >= {"message_id", "attachment_id"}:
            a = {c: (f"a.{c}" if c in acols else lit) for c, lit in _ATTACHMENT_OPTIONAL.items()}
            self._att_sql = (
                f"SELECT j.message_id, {a['filename']}, {a['mime_type']}, {a['uti']}, {a['transfer_name']}, "
                f"{a['total_bytes']}, {a['is_sticker']} FROM message_attachment_join j "
                f"JOIN attachment a ON a.ROWID = j.attachment_id WHERE j.message_id IN ({{}}) "
                f"ORDER BY j.message_id, a.ROWID"
            )
            self.stats["attachments_unjoined"] = conn.execute(
                "SELECT COUNT(*) FROM attachment a WHERE NOT EXISTS "
                "(SELECT 1 FROM message_attachment_join j JOIN message m ON m.ROWID = j.message_id "
                "WHERE j.attachment_id = a.ROWID)").fetchone()[0]
        body = "m.attributedBody" if "attributedBody" in mcols else "NULL"
        self._quote_sql = (f"SELECT m.guid, m.handle_id, m.is_from_me, m.text, {body} FROM message m "
                           f"WHERE m.guid IN ({{}})")

    def block(self, conn: sqlite3.Connection, flagged: list[int],
              with_files: list[int]) -> tuple[dict[int, list[dict]], dict[int, tuple]]:
        """Extras of one chunk of messages.

        Args:
            flagged: ROWIDs of the rows :attr:`row_predicate` holds for.
            with_files: ROWIDs of the rows with attachments.

        Returns:
            ``(entries per ROWID (a reply first), the ROWIDs of voice messages)``.
        """
        out: dict[int, list[dict]] = {}
        audio_rows: dict[int, str | None] = {}  # voice message ROWID -> Apple's transcription
        replies: list[tuple[int, str]] = []
        # ROWIDs are integers from the database, so they are written into the SQL as such.
        rows = conn.execute(self._msg_sql.format(",".join(str(int(r)) for r in flagged))) if flagged else ()
        for rid, origin, itype, action, other, title, balloon, payload, audio, voice_body in rows:
            event = group_event(int(itype or 0), int(action or 0), title)
            if event is not None:
                self.stats["group_events"] += 1
                who = self.handles.get(other) if other else None
                out.setdefault(rid, []).append(_entry("event", name=who, text=event))
            if balloon == URL_BALLOON:
                preview = link_preview(payload)
                if preview is None:
                    self.stats["link_previews_undecodable"] += 1
                else:
                    self.stats["link_previews"] += 1
                    out.setdefault(rid, []).append(
                        _entry("link", ref=preview[0], name=preview[1], text=preview[2]))
            if audio:
                audio_rows[rid] = audio_transcription(voice_body)
                self.stats["voice_transcriptions"] += audio_rows[rid] is not None
            if origin:
                replies.append((rid, origin))
        if replies:
            self._replies(conn, replies, out)
        if self._att_sql is not None and with_files:
            sql = self._att_sql.format(",".join(str(int(r)) for r in with_files))
            for rid, filename, mime, uti, tname, size, sticker in conn.execute(sql):
                path, exists = resolve_attachment(filename, self.dir)
                self.stats["attachments_listed"] += 1
                if not exists:
                    self.stats["attachments_missing"] += 1
                kind = _kind(mime, uti, sticker, rid in audio_rows)
                self.stats["voice_messages"] += kind == "voice"
                name = tname or (Path(filename).name if filename else None)
                out.setdefault(rid, []).append(_entry(kind, name=name, mime=mime or uti, size=int(size or 0),
                                                      path=path, exists=exists,
                                                      text=audio_rows.get(rid) if kind == "voice" else None,
                                                      ref=self._length(kind, path, exists)))
        return out, audio_rows

    def _length(self, kind: str, path: str | None, exists: bool) -> str | None:
        """A voice message's length in whole seconds (the entry's ``ref``), when opted in and its
        ``.caf`` header tells it; counted as ``voice_lengths_read``."""
        if kind != "voice" or not self.voice_lengths or not exists or path is None:
            return None
        seconds = caf_seconds(path)
        if seconds is None:
            return None
        self.stats["voice_lengths_read"] += 1
        return str(max(1, round(seconds)))

    def _replies(self, conn: sqlite3.Connection, replies: list[tuple[int, str]], out: dict[int, list[dict]]) -> None:
        """A reply entry, first, for each ``(ROWID, thread_originator_guid)``: the answered
        message's sender and first words, looked up by guid (Apple indexes it). Counted."""
        quoted: dict[str, tuple[str | None, str | None]] = {}
        wanted = sorted({g for _, g in replies})
        for i in range(0, len(wanted), 500):  # under SQLite's bound-parameter limit
            part = wanted[i:i + 500]
            for guid, hid, me, text, body in conn.execute(self._quote_sql.format(",".join("?" * len(part))), part):
                quoted[guid] = (None if me else self.handles.get(hid, "Unknown"), _first_words(text, body))
        for rid, origin in replies:
            self.stats["replies"] += 1
            sender, words = quoted.get(origin, (None, None))
            if origin not in quoted:
                self.stats["replies_unresolved"] += 1
            out.setdefault(rid, []).insert(0, _entry("reply", ref=f"imessage:{origin}", name=sender, text=words))


def _first_words(text: Any, body: bytes | None) -> str | None:
    """The first :data:`REPLY_CHARS` characters of a message's text (else of its attributedBody)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not text and isinstance(body, bytes):
        try:
            text = decode_attributed_body(body)
        except Exception:  # an unreadable body: the reply says it answers an earlier message
            text = None
    words = " ".join((text or "").replace("\ufffc", "").split())
    if not words:
        return None
    return words[:REPLY_CHARS] + ("…" if len(words) > REPLY_CHARS else "")


def _entry(kind: str, *, name: str | None = None, mime: str | None = None, size: int | None = None,
           path: str | None = None, exists: bool | None = None, text: str | None = None,
           ref: str | None = None) -> dict:
    return {"kind": kind, "name": name, "mime": mime, "bytes": size, "path": path, "exists": exists,
            "text": text, "ref": ref}
