"""The attachments and link previews of the messages a search hit spans, with their paths.

A passage shows ``[attachment: report.pdf, PDF, 1.2 MB]``; a program asking for JSON (``brb
search --json``, the MCP tools) also gets the file's resolved path and whether it is there, read
from the staged messages' ``extras`` (:data:`brb_pipeline.core.records.EXTRA`). Files are never
opened. Only rows with extras are kept in memory.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from collections.abc import Iterable
from typing import Any

from brb_pipeline.core.crypto import files

LISTED_KINDS = ("file", "sticker", "voice", "link")


def extras_index(messages_path: Path, contact_ids: Iterable[str] | None = None
                 ) -> dict[str, list[tuple[datetime | None, str, list[dict]]]]:
    """chat_id -> [(ts, message_id, entries)] for the staged messages that hold a file or a link.

    Args:
        contact_ids: only these conversations (the hits'); None: every one.

    A one-shot search has not loaded polars (0.14 s of CPU to import), so a plain file is read
    by DuckDB, which the search has loaded, with the filter pushed down into the scan. A sealed
    file is decrypted in memory and read by polars. An archive staged before extras existed (no
    ``extras`` column) gives an empty index.
    """
    path = Path(messages_path)
    if not path.exists():
        return {}
    ids = sorted(set(contact_ids)) if contact_ids is not None else None
    try:
        rows = _read_sealed(path, ids) if files.sealed(path) else _read_plain(path, ids)
    except Exception:  # an older staging file without the column: nothing to list
        return {}
    out: dict[str, list[tuple[datetime | None, str, list[dict]]]] = {}
    for mid, chat, ts, extras in rows:
        listed = [e for e in extras or () if e["kind"] in LISTED_KINDS]
        if listed:
            out.setdefault(chat, []).append((ts, mid, listed))
    return out


def _read_plain(path: Path, ids: list[str] | None) -> list[tuple]:
    import duckdb

    where = "len(extras) > 0" + (" AND contact_id IN (SELECT unnest($ids))" if ids is not None else "")
    con = duckdb.connect()
    try:
        got = con.execute(f"SELECT message_id, chat_id, epoch_us(ts), extras FROM read_parquet($path) WHERE {where}",
                          {"path": str(path), **({"ids": ids} if ids is not None else {})}).fetchall()
    finally:
        con.close()
    return [(mid, chat, _utc(us), ex) for mid, chat, us, ex in got]


def _read_sealed(path: Path, ids: list[str] | None) -> list[tuple]:
    import polars as pl

    wanted = pl.col("extras").list.len() > 0
    if ids is not None:
        wanted = wanted & pl.col("contact_id").is_in(ids)
    frame = files.read_parquet(path, columns=["message_id", "chat_id", "ts", "extras", "contact_id"])
    return frame.filter(wanted).select("message_id", "chat_id", "ts", "extras").rows()


def _utc(us: int | None) -> datetime | None:
    return None if us is None else datetime.fromtimestamp(us / 1e6, tz=timezone.utc)


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


def _chunk_hits(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [h for h in out.get("hits", ()) if h.get("kind") == "chunk"]


def _attach(hits: list[dict[str, Any]], index: dict) -> None:
    for h in hits:
        start = datetime.fromisoformat(h["start"]) if h.get("start") else None
        end = datetime.fromisoformat(h["end"]) if h.get("end") else None
        h["files"] = hit_files(index, h["chat_id"], start, end)


def add_hit_files(out: dict[str, Any], messages_path: Path) -> None:
    """Add ``files`` to every chunk hit of one search answer (in place): only the hits'
    conversations are read."""
    hits = _chunk_hits(out)
    if hits:
        _attach(hits, extras_index(messages_path, {h["contact_id"] for h in hits if h.get("contact_id")}))


class HitFiles:
    """``files`` for the hits of many searches (``brb search -``, one process): the index of every
    conversation is read on the first answer with hits, and again only when the staged file
    changes (an ingest in between), so each later answer costs a dictionary look-up."""

    def __init__(self, messages_path: Path) -> None:
        self.path = Path(messages_path)
        self._stamp: tuple[int, int, int] | None = None
        self._index: dict = {}

    def add(self, out: dict[str, Any]) -> None:
        """Add ``files`` to every chunk hit of ``out`` (in place)."""
        hits = _chunk_hits(out)
        if not hits:
            return
        try:
            st = self.path.stat()
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:  # nothing staged (or moved away mid-session): no files to list
            stamp, self._index = None, {}
        if stamp is not None and stamp != self._stamp:
            self._index = extras_index(self.path)
        self._stamp = stamp
        _attach(hits, self._index)
