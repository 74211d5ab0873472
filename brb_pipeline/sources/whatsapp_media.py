"""WhatsApp media rows (``ZWAMEDIAITEM``) as message extras (:data:`brb_pipeline.core.records.EXTRA`).

Facts used, read by column name (the store's DDL is in ``shared/schemas/ChatStorage.sqlite.sql``):

* ``ZWAMESSAGE.ZMEDIAITEM`` -> ``ZWAMEDIAITEM.Z_PK``; ``ZWAMESSAGE.ZMESSAGETYPE`` says what the
  media is: 1 image, 2 video, 3 audio (voice notes included), 4 contact card, 5 location,
  8 document, 15 sticker (other values: a file of unknown kind).
* ``ZMEDIALOCALPATH``: the file's path relative to WhatsApp's shared container (kept as text,
  never resolved, never opened); ``ZFILESIZE`` bytes; ``ZMOVIEDURATION`` whole seconds of audio
  or video; ``ZTITLE``: a document's file name, otherwise the caption written under the media.

A store without ``ZWAMEDIAITEM`` (or without one of these columns) reads as before: messages
with media stay counted in ``attachments`` and carry no extras.
"""

from __future__ import annotations

import sqlite3

MEDIA_COLUMNS = ("ZMEDIALOCALPATH", "ZFILESIZE", "ZTITLE", "ZMOVIEDURATION")
DOCUMENT, AUDIO, STICKER = 8, 3, 15
_MIME = {1: "image/*", 2: "video/*", AUDIO: "audio/*", 4: "text/vcard", 5: "text/x-vlocation"}


def media_select(conn: sqlite3.Connection) -> tuple[str, str]:
    """The SELECT columns and JOIN that read the media row of each message, or NULLs when the
    store has no usable ``ZWAMEDIAITEM``. Returns ``(columns, join)`` for ``_MESSAGES_SQL``."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(ZWAMEDIAITEM)")}
    if not set(MEDIA_COLUMNS) <= have:
        return ", NULL, NULL, NULL, NULL", ""
    return (", mi.ZMEDIALOCALPATH, mi.ZFILESIZE, mi.ZTITLE, mi.ZMOVIEDURATION",
            "LEFT JOIN ZWAMEDIAITEM AS mi ON mi.Z_PK = m.ZMEDIAITEM")


def _int(v: object) -> int | None:
    return int(v) if isinstance(v, (int, float)) and v == v and v >= 0 else None


def _s(v: object) -> str | None:
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    s = str(v).strip() if v is not None else ""
    return s or None


def media_extra(mtype: object, path: object, size: object, title: object, seconds: object) -> list[dict] | None:
    """One message's extras from its media row: ``[entry]``, or None when it has no media row.

    The entry's ``name`` is the document's title or the file's base name, ``text`` the caption
    (never a document's own title), ``ref`` a voice note's duration in whole seconds.
    """
    path_s, title_s = _s(path), _s(title)
    if path_s is None and title_s is None and size is None:
        return None
    base = path_s.replace("\\", "/").rsplit("/", 1)[-1] if path_s else None
    kind = {AUDIO: "voice", STICKER: "sticker"}.get(mtype, "file")  # type: ignore[arg-type]
    is_doc = mtype == DOCUMENT
    secs = _int(seconds)
    return [{
        "kind": kind,
        "name": (title_s if is_doc and title_s else base),
        "mime": _MIME.get(mtype),  # type: ignore[arg-type]
        "bytes": _int(size),
        "path": path_s,
        "exists": None,
        "text": None if is_doc or kind == "voice" else title_s,
        "ref": str(secs) if kind == "voice" and secs else None,
    }]
