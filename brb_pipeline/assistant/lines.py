"""Messages one per line, with who sent each, when, and its id: what a passage and a stretch of
conversation show an assistant.

The one place `brb mcp` names senders: a sender's name is that of the person (AddressBook card)
whose handles hold the sender's handle (``people_db.handle_names``, as chunking names the lines
of a chunk, group members included; in a store made before people, the direct contact's), else
the handle itself; "Me" for the owner. Messages come from the staging copy
(``staging/messages.parquet``, sealed in an encrypted home) and chats' names and participants
from ``staging/parsed_chats.parquet``.

Order: within a chat, the order chunking gives (time, then message id; a message without a time
right after the message before it by ROWID), so a chunk's ``first_message_id`` ..
``last_message_id`` is exactly the run of messages it holds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

from brb_pipeline.core.chunk_params import ChunkParams
from brb_pipeline.core.chunking import ATTACHMENT_CHAR, BALLOON_CHAR, _place_untimed, resolve_time_zone
from brb_pipeline.core.crypto import files
from brb_pipeline.core.records.extras import render_extras

#: The longest text a line carries (characters); a longer message ends in "…".
MAX_LINE_CHARS = 2000
_COLUMNS = ["message_id", "chat_id", "channel", "contact_id", "source_rowid", "sender", "is_from_me", "ts",
            "text", "attachments"]


def _read_messages(messages_path: Path) -> Any:
    """The staged messages' columns a transcript uses (``extras`` when the file has it)."""
    import polars as pl

    if not Path(messages_path).exists():
        return pl.DataFrame(schema={c: pl.Utf8 for c in _COLUMNS})
    try:
        return files.read_parquet(messages_path, columns=[*_COLUMNS, "extras"])
    except Exception:  # staged before extras existed
        return files.read_parquet(messages_path, columns=_COLUMNS)


def _file(e: dict) -> dict[str, Any]:
    """An attachment or link of a line, for an assistant."""
    if e["kind"] == "link":
        return {"kind": "link", "url": e["ref"], "title": e["name"], "summary": e["text"]}
    return {"kind": e["kind"], "name": e["name"], "mime": e["mime"], "bytes": e["bytes"], "path": e["path"],
            "exists": e["exists"]}


def citation_id(chat_id: str, first_message_id: str, last_message_id: str) -> str:
    """A short id for a run of messages: the same messages give the same id on every start and
    every re-ingest of the same source (message ids are the sources' own GUIDs)."""
    h = hashlib.sha1(f"{chat_id}\x1f{first_message_id}\x1f{last_message_id}".encode()).hexdigest()
    return f"brb:{h[:16]}"


def _text(text: str | None, attachments: int) -> str:
    body = (text or "").replace(ATTACHMENT_CHAR, "").replace(BALLOON_CHAR, "").strip()
    if len(body) > MAX_LINE_CHARS:
        body = body[:MAX_LINE_CHARS - 1].rstrip() + "…"
    if attachments:
        body = f"{body} {'[attachment]' if attachments == 1 else f'[{attachments} attachments]'}".strip()
    return body


@dataclass
class Transcript:
    """Every staged message in chat order, held in memory for a session.

    Rows of one chat are contiguous: ``spans[chat_id]`` is its ``[lo, hi)``; ``row_of`` maps a
    message id to its row.
    """

    ids: list[str]
    chat_ids: list[str]
    senders: list[str | None]
    mine: list[bool]
    ts: list[datetime | None]
    texts: list[str | None]
    attachments: list[int]
    spans: dict[str, tuple[int, int]]
    row_of: dict[str, int]
    handle_names: Mapping[str, str]
    chats: dict[str, dict[str, Any]] = field(default_factory=dict)  # chat_id -> channel, contact_id, name, handles
    tz: tzinfo | None = None
    extras: list = field(default_factory=list)  # per row: EXTRA entries or None (files, links, reply...)

    @classmethod
    def load(cls, messages_path: Path, chats_path: Path, *, contact_names: Mapping[str, str],
             handle_names: Mapping[str, str], time_zone: str = ChunkParams.time_zone) -> Transcript:
        """Read the staged messages and chats.

        Args:
            contact_names: contact_id -> display name (a chat's name when the source gives none).
            handle_names: sender handle -> display name.
            time_zone: the zone times are shown in (IANA name; "" the machine's).
        """
        import polars as pl

        msgs = _read_messages(messages_path)
        if msgs.height and msgs["ts"].null_count():
            msgs = _place_untimed(msgs, ["chat_id"]).sort(["chat_id", "_place", "_untimed", "_rid", "message_id"])
        else:
            msgs = msgs.sort(["chat_id", "ts", "message_id"])
        chat_ids = msgs["chat_id"].to_list()
        spans: dict[str, tuple[int, int]] = {}
        for i, c in enumerate(chat_ids):
            lo, _ = spans.get(c, (i, i))
            spans[c] = (lo, i + 1)
        ids = msgs["message_id"].to_list()
        t = cls(ids, chat_ids, msgs["sender"].to_list(), [bool(m) for m in msgs["is_from_me"].to_list()],
                msgs["ts"].to_list(), msgs["text"].to_list(), [int(a or 0) for a in msgs["attachments"].to_list()],
                spans, {m: i for i, m in enumerate(ids)}, dict(handle_names), tz=resolve_time_zone(time_zone))
        t.chats = _chats(msgs, chats_path, contact_names)
        if "extras" in msgs.columns:
            t.extras = msgs["extras"].to_list()
        return t

    def __len__(self) -> int:
        return len(self.ids)

    def sender(self, i: int) -> tuple[str, str | None]:
        """(name, handle) of row ``i``'s sender; the owner is ("Me", None)."""
        if self.mine[i]:
            return "Me", None
        handle = self.senders[i]
        return self.handle_names.get(handle or "", handle or "Unknown"), handle

    def line(self, i: int) -> dict[str, Any]:
        """Row ``i`` as a line: ``{"id", "time", "sender", "sender_handle", "text"}`` (time in the
        shown zone, ISO 8601 with its offset; None when the source had none)."""
        name, handle = self.sender(i)
        ts = self.ts[i]
        shown = None if ts is None else (ts.astimezone(self.tz) if self.tz is not None else ts.astimezone())
        extras = self.extras[i] if self.extras else None
        if not extras:
            return {"id": self.ids[i], "time": shown.isoformat(timespec="seconds") if shown else None,
                    "sender": name, "sender_handle": handle, "text": _text(self.texts[i], self.attachments[i])}
        body, _, named = render_extras(self.texts[i], extras, self.handle_names)
        out = {"id": self.ids[i], "time": shown.isoformat(timespec="seconds") if shown else None,
               "sender": name, "sender_handle": handle, "text": _text(body, max(0, self.attachments[i] - named))}
        listed = [_file(e) for e in extras if e["kind"] in ("file", "sticker", "voice", "link")]
        if listed:
            out["files"] = listed  # with their paths: an assistant can point at or open the file
        return out

    def lines(self, lo: int, hi: int) -> list[dict[str, Any]]:
        return [self.line(i) for i in range(lo, hi)]

    def run(self, chat_id: str, first_id: str, last_id: str) -> tuple[int, int] | None:
        """``[lo, hi)`` of the messages ``first_id`` .. ``last_id`` of a chat (None: not staged)."""
        lo, hi = self.row_of.get(first_id), self.row_of.get(last_id)
        if lo is None or hi is None or chat_id not in self.spans or lo > hi:
            return None
        return lo, hi + 1

    def chat(self, chat_id: str) -> dict[str, Any]:
        """The chat's ``channel``, ``contact_id``, ``name`` and ``participants`` (names, "Me" first)."""
        info = self.chats.get(chat_id) or {}
        handles = info.get("handles") or []
        people = ["Me", *dict.fromkeys(self.handle_names.get(h, h) for h in handles)]
        return {"conversation": chat_id, "conversation_name": info.get("name"), "channel": info.get("channel"),
                "contact_id": info.get("contact_id"), "participants": people}


def _chats(msgs: Any, chats_path: Path, contact_names: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """chat_id -> channel, contact_id, name and participant handles, from the parsed chats where
    staged, else from the senders seen in the messages."""
    out: dict[str, dict[str, Any]] = {}
    firsts = msgs.unique("chat_id", keep="first", maintain_order=True)
    seen: dict[str, list[str]] = {}
    for c, h, me in zip(msgs["chat_id"].to_list(), msgs["sender"].to_list(), msgs["is_from_me"].to_list()):
        if h and not me:
            seen.setdefault(c, []).append(h)
    for r in firsts.iter_rows(named=True):
        out[r["chat_id"]] = {"channel": r["channel"], "contact_id": r["contact_id"],
                             "name": contact_names.get(r["contact_id"], r["contact_id"]),
                             "handles": list(dict.fromkeys(seen.get(r["chat_id"], [])))}
    if Path(chats_path).exists():
        for r in files.read_parquet(chats_path, columns=["chat_id", "display_name", "participants"]).iter_rows(named=True):
            if r["chat_id"] in out:
                out[r["chat_id"]]["name"] = r["display_name"] or out[r["chat_id"]]["name"]
                out[r["chat_id"]]["handles"] = list(dict.fromkeys([*(r["participants"] or []),
                                                                   *out[r["chat_id"]]["handles"]]))
    return out
