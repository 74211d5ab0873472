"""The attachments and link previews of the messages a search hit spans, with their paths.

A passage shows ``[attachment: report.pdf, PDF, 1.2 MB]``; a program asking for JSON (``brb
search --json``, the MCP tools) also gets the file's resolved path and whether it is there, read
from the staged messages' ``extras`` (:data:`brb_pipeline.core.records.EXTRA`). Files are never
opened. Only rows with extras are kept in memory.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from brb_pipeline.core.crypto import files

LISTED_KINDS = ("file", "sticker", "voice", "link")


def extras_index(messages_path: Path) -> dict[str, list[tuple[datetime | None, str, list[dict]]]]:
    """chat_id -> [(ts, message_id, entries)] for the staged messages that hold a file or a link.

    An archive staged before extras existed (no ``extras`` column) gives an empty index.
    """
    import polars as pl

    if not Path(messages_path).exists():
        return {}
    try:
        msgs = files.read_parquet(messages_path, columns=["message_id", "chat_id", "ts", "extras"])
    except Exception:  # an older staging file without the column: nothing to list
        return {}
    msgs = msgs.filter(pl.col("extras").list.len() > 0)
    out: dict[str, list[tuple[datetime | None, str, list[dict]]]] = {}
    for mid, chat, ts, extras in msgs.iter_rows():
        listed = [e for e in extras if e["kind"] in LISTED_KINDS]
        if listed:
            out.setdefault(chat, []).append((ts, mid, listed))
    return out


def hit_files(index: dict, chat_id: str, start: datetime | None, end: datetime | None) -> list[dict[str, Any]]:
    """The files and links of ``chat_id``'s messages from ``start`` to ``end`` (inclusive)."""
    found = []
    for ts, mid, entries in index.get(chat_id, ()):
        if start is not None and end is not None and (ts is None or ts < start or ts > end):
            continue
        for e in entries:
            item = {"message_id": mid, "kind": e["kind"]}
            if e["kind"] == "link":
                item.update(url=e["ref"], title=e["name"], summary=e["text"])
            else:
                item.update(name=e["name"], mime=e["mime"], bytes=e["bytes"], path=e["path"], exists=e["exists"])
                if e.get("text"):
                    item["transcription" if e["kind"] == "voice" else "caption"] = e["text"]
                if e["kind"] == "voice" and str(e.get("ref") or "").isdigit():
                    item["seconds"] = int(e["ref"])
            found.append(item)
    return found


def add_hit_files(out: dict[str, Any], messages_path: Path) -> None:
    """Add ``files`` to every chunk hit of a search answer (in place)."""
    hits = [h for h in out.get("hits", ()) if h.get("kind") == "chunk"]
    if not hits:
        return
    index = extras_index(messages_path)
    for h in hits:
        start = datetime.fromisoformat(h["start"]) if h.get("start") else None
        end = datetime.fromisoformat(h["end"]) if h.get("end") else None
        h["files"] = hit_files(index, h["chat_id"], start, end)
