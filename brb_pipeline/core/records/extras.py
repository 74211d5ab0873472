"""How a message's extras (:data:`brb_pipeline.core.records.EXTRA`) read in a passage.

``[attachment: report.pdf, PDF, 1.2 MB]`` (``— caption`` inside when the sender wrote one),
``[sticker]``, ``[voice message]`` (``[voice message, 0:42]`` when the entry's ``ref`` holds its
length in whole seconds, ``[voice message: transcription]`` / ``[voice message, 0:42: ...]``
with Apple's transcription), ``[link: title — summary]``, a reply's ``↪ replying to Sam: "first words"``
before the text, and a group event as the whole line: ``Sam renamed the group to Ski trip``.
Names and kinds are plain words in the passage, so lexical search (BM25) finds a file by its
name ("report") and its kind ("PDF"). Paths never go into a passage.
"""

from __future__ import annotations

from collections.abc import Mapping

FILE_KINDS = ("file", "sticker", "voice")

_MIME_WORDS = {
    "application/pdf": "PDF",
    "com.adobe.pdf": "PDF",
    "text/plain": "text",
    "text/vcard": "contact card",
    "text/x-vlocation": "location",
    "application/zip": "ZIP",
    "application/msword": "Word document",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "Word document",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "spreadsheet",
    "application/vnd.ms-excel": "spreadsheet",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "presentation",
}


def kind_word(mime: str | None, name: str | None) -> str | None:
    """A word for a file's kind: "PDF", "photo", "video", "audio", else its extension in capitals."""
    m = (mime or "").lower()
    if m in _MIME_WORDS:
        return _MIME_WORDS[m]
    for prefix, word in (("image/", "photo"), ("public.heic", "photo"), ("public.jpeg", "photo"),
                         ("public.png", "photo"), ("video/", "video"), ("audio/", "audio")):
        if m.startswith(prefix):
            return word
    if name and "." in name:
        return name.rsplit(".", 1)[1].upper()[:8] or None
    return None


def human_size(n: int | None) -> str | None:
    """``1_250_000`` -> ``"1.2 MB"`` (decimal units, as Finder shows them); None for 0 or unknown."""
    if not n or n <= 0:
        return None
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return None  # unreachable


def _tag(e: Mapping) -> str:
    kind = e.get("kind")
    if kind == "sticker":
        return "[sticker]"
    if kind == "voice":
        secs = e.get("ref")
        length = f", {int(secs) // 60}:{int(secs) % 60:02d}" if secs and str(secs).isdigit() else ""
        if e.get("text"):
            return f"[voice message{length}: {e['text']}]"
        return f"[voice message{length}]"
    parts = [p for p in (e.get("name") or "file", kind_word(e.get("mime"), e.get("name")),
                         human_size(e.get("bytes"))) if p]
    caption = f" — {e['text']}" if e.get("text") else ""
    return "[attachment: " + ", ".join(parts) + caption + "]"


def render_extras(text: str | None, extras: list | None, names: Mapping[str, str]) -> tuple[str | None, bool, int]:
    """The body a message reads as with its extras, whether it is a group event, and how many
    attachments the tags name.

    Args:
        text: the message's text (attachment placeholders are removed later by the line format).
        extras: the message's ``extras`` entries (dicts), possibly empty.
        names: normalized handle -> display name, for reply authors and people added or removed.

    Returns:
        ``(body, is_event, attachments named)``. For an event the body is the line after the
        actor's name ("renamed the group to Ski trip", "added Sam").
    """
    if not extras:
        return text, False, 0
    before: list[str] = []
    after: list[str] = []
    files = 0
    for e in extras:
        kind = e.get("kind")
        if kind == "event":
            who = e.get("name")
            what = e.get("text") or ""
            return (f"{what} {names.get(who, who)}" if who else what), True, 0
        if kind == "reply":
            if e.get("text"):
                who = e.get("name")
                author = names.get(who, who) if who else "Me"
                before.append(f'↪ replying to {author}: "{e["text"]}"')
            else:
                before.append("↪ replying to an earlier message")
        elif kind == "link":
            bits = [b for b in (e.get("name"), e.get("text")) if b]
            url = e.get("ref") or ""
            if url and url not in (text or ""):
                bits.insert(0, url)
            if bits:
                after.append("[link: " + " — ".join(bits) + "]")
        elif kind in FILE_KINDS:
            files += 1
            after.append(_tag(e))
    body = " ".join(p for p in (*before, text or "", *after) if p)
    return body or None, False, files
