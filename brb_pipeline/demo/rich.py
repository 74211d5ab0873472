"""The demo archive's messages that hold more than text, written in chat.db's real columns.

Attachments (a PDF, a photo whose file is missing, a sticker), a voice message, link previews
(an ``NSKeyedArchiver`` payload in ``payload_data`` as Messages writes for URL balloons, and one
that cannot be decoded), a reply (``thread_originator_guid``), group members added and removed
(``item_type`` 1), a group photo change (a system item brb skips) and an attachment row no message
points at. The attachment files the archive has are small placeholders under ``Attachments/``,
where chat.db's ``~/Library/Messages/Attachments/...`` paths resolve with ``--attachments``.
"""

from __future__ import annotations

import plistlib
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from brb_pipeline.demo.chatdb_writer import ChatDbBuilder
from brb_pipeline.sources.typedstream import encode_attributed_body

URL_BALLOON = "com.apple.messages.URLBalloonProvider"
CHATDB_DIR = "~/Library/Messages/Attachments"

REPORT = "quarterly-report.pdf"
MISSING_PHOTO = "IMG_4021.heic"  # the one attachment whose file the archive leaves out, on purpose
SOURDOUGH_URL = "https://example.com/sourdough-starter-guide"
SOURDOUGH_TITLE = "How to keep a sourdough starter alive"
SOURDOUGH_SUMMARY = "Feed it flour and water every day and keep it warm."
REPLY_TEXT = "yes, Saturday works for the ski trip"
VOICE_TRANSCRIPT = "Mix two cups of flour with the starter and let it rest overnight"
VOICE_SECONDS = 42  # the length its .caf header says (read only with the voice_lengths opt-in)


def url_payload(url: str, title: str, summary: str) -> bytes:
    """A URL balloon's ``payload_data``: an NSKeyedArchiver binary plist holding rich link metadata."""
    uid = plistlib.UID
    objects: list[Any] = [
        "$null",
        {"richLinkMetadata": uid(2), "$class": uid(8)},
        {"URL": uid(3), "originalURL": uid(3), "title": uid(5), "summary": uid(6), "$class": uid(7)},
        {"NS.base": uid(0), "NS.relative": uid(4), "$class": uid(9)},
        url, title, summary,
        {"$classname": "LPLinkMetadata", "$classes": ["LPLinkMetadata", "NSObject"]},
        {"$classname": "RichLink", "$classes": ["RichLink", "NSObject"]},
        {"$classname": "NSURL", "$classes": ["NSURL", "NSObject"]},
    ]
    archive = {"$version": 100000, "$archiver": "NSKeyedArchiver", "$top": {"root": uid(1)}, "$objects": objects}
    return plistlib.dumps(archive, fmt=plistlib.FMT_BINARY)


def _file(root: Path, n: int, name: str, mime: str | None, uti: str, size: int, *, present: bool = True,
          sticker: bool = False) -> dict[str, Any]:
    """An attachment row's columns; its placeholder file is written under ``root`` when ``present``."""
    rel = f"{n:02x}/{n % 16:02d}/DEMO-ATT-{n:04d}/{name}"
    if present:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"demo attachment placeholder\n")
    return {"filename": f"{CHATDB_DIR}/{rel}", "mime_type": mime, "uti": uti, "transfer_name": name,
            "total_bytes": size, "is_sticker": int(sticker)}


def _voice(root: Path, n: int, seconds: float) -> dict[str, Any]:
    """A voice message's attachment row; its file is a CAF whose header holds ``seconds``."""
    from brb_pipeline.sources.caf import write_caf

    spec = _file(root, n, "Audio Message.caf", None, "com.apple.coreaudio-format", 0)
    path = root / spec["filename"][len(CHATDB_DIR) + 1:]
    write_caf(path, seconds)
    return {**spec, "total_bytes": path.stat().st_size}


def write_rich_messages(b: ChatDbBuilder, root: Path, direct: tuple[int, int, datetime],
                        group: tuple[int, list[int], datetime] | None, reply_to: str,
                        counts: dict[str, int]) -> None:
    """Write the rich messages into ``b``; update ``counts``.

    Args:
        b: the chat.db being written.
        root: the archive's ``Attachments`` folder (placeholder files go there).
        direct: (chat rowid, the contact's handle rowid, a time) of a direct chat.
        group: (chat rowid, member handle rowids, a time) of a group chat, or None.
        reply_to: guid of a message in the direct chat the reply answers.
        counts: the generator's counts: ``rich_messages`` (kept, group events aside),
            ``group_events`` (kept), ``system_messages`` (skipped), ``message_rows``...
    """
    chat, handle, t0 = direct
    t = [t0 + timedelta(minutes=k) for k in range(1, 10)]
    kept = 0
    b.add_message(chat, handle, "here is the report \ufffc", ts=t[0],
                  files=[_file(root, 1, REPORT, "application/pdf", "com.adobe.pdf", 1_250_000)])
    b.add_message(chat, 0, "\ufffc", ts=t[1], is_from_me=True,
                  files=[_file(root, 2, MISSING_PHOTO, "image/heic", "public.heic", 2_400_000, present=False)])
    b.add_message(chat, handle, None, ts=t[2],
                  files=[_file(root, 3, "sticker.png", "image/png", "public.png", 48_000, sticker=True)])
    b.add_message(chat, handle, "\ufffc", ts=t[3],
                  columns={"is_audio_message": 1,
                           "attributedBody": encode_attributed_body("\ufffc", transcription=VOICE_TRANSCRIPT)},
                  files=[_voice(root, 4, VOICE_SECONDS)])
    b.add_message(chat, handle, SOURDOUGH_URL, ts=t[4],
                  columns={"balloon_bundle_id": URL_BALLOON,
                           "payload_data": url_payload(SOURDOUGH_URL, SOURDOUGH_TITLE, SOURDOUGH_SUMMARY)})
    b.add_message(chat, 0, "https://example.com/broken-preview", ts=t[5], is_from_me=True,
                  columns={"balloon_bundle_id": URL_BALLOON, "payload_data": b"bplist00 not really"})
    b.add_message(chat, 0, REPLY_TEXT, ts=t[6], is_from_me=True,
                  columns={"thread_originator_guid": reply_to, "thread_originator_part": "0:0:10"})
    kept += 7
    counts["message_rows"] += 7
    b.add_unjoined_file({"filename": f"{CHATDB_DIR}/ff/00/GONE/old.jpg", "mime_type": "image/jpeg",
                         "uti": "public.jpeg", "transfer_name": "old.jpg", "total_bytes": 1000})
    counts["rich_attachments"] = 4
    counts["rich_attachments_missing"] = 1
    counts["link_previews"] = 1
    counts["link_previews_undecodable"] = 1
    counts["replies"] = 1
    if group is not None:
        gchat, members, g0 = group
        added = members[-1]
        b.add_message(gchat, 0, None, ts=g0 - timedelta(minutes=3), is_from_me=True, item_type=1,
                      columns={"group_action_type": 0, "other_handle": added})
        b.add_message(gchat, members[0], None, ts=g0 + timedelta(days=1), item_type=1,
                      columns={"group_action_type": 1, "other_handle": added})
        b.add_message(gchat, members[0], None, ts=g0 + timedelta(days=1, minutes=1), item_type=3,
                      columns={"group_action_type": 1})  # group photo changed: skipped
        counts["message_rows"] += 3
        counts["group_events"] += 2
        counts["system_messages"] += 1
    counts["rich_messages"] = kept


def write_placeholders(chat_db: Path, root: Path) -> int:
    """A small placeholder file under ``root`` for every attachment a message of ``chat_db`` points
    at under ``~/Library/Messages/Attachments`` (the older photos of the generated chats), except
    :data:`MISSING_PHOTO`: the archive then misses exactly that one file, which the reader counts.
    Returns the files written."""
    import sqlite3

    con = sqlite3.connect(f"file:{chat_db}?mode=ro", uri=True)
    try:
        names = [r[0] for r in con.execute(
            "SELECT a.filename FROM attachment a JOIN message_attachment_join j ON j.attachment_id = a.ROWID "
            "WHERE a.filename LIKE ? AND COALESCE(a.transfer_name, '') != ?", (CHATDB_DIR + "/%", MISSING_PHOTO))]
    finally:
        con.close()
    written = 0
    for name in names:
        path = root / name[len(CHATDB_DIR) + 1:]
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"demo attachment placeholder\n")
            written += 1
    return written
