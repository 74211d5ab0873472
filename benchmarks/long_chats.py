"""The long-chats question source (``../shared/eval/long-chats/``): archives, questions, the split.

Two LoCoMo conversations (CC BY-NC 4.0; see that folder's README) are read from the shared
folder at run time and never copied into this repository. Each becomes a real Messages archive:
a group chat of the two speakers (both on AddressBook cards, the owner silent), every session at
its date and time, its turns one minute apart, in Apple's own schemas (``brb_pipeline.demo``'s
writers).

The dev/test split is fixed and written down here, once: a question is in **test** when the
first byte of ``sha256("<conversation file stem>\\x00<question text>")`` is odd, else in **dev**
(no seed to choose, so nothing to re-draw). Tune on dev; report test.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from brb_pipeline.demo.addressbook_writer import PersonRecord, write_addressbook
from brb_pipeline.demo.chatdb_writer import ChatDbBuilder

#: ``../shared`` beside the project folder (a git worktree one level further down finds it too).
SHARED = next((p / "shared" / "eval" / "long-chats" for p in Path(__file__).resolve().parents[1:4]
               if (p / "shared" / "eval" / "long-chats").is_dir()),
              Path(__file__).resolve().parents[2] / "shared" / "eval" / "long-chats")
CONVERSATIONS = ("26", "30")
CATEGORIES = {1: "multi-hop", 2: "when", 3: "inference", 4: "single-hop"}
_DIA_RE = re.compile(r"D:?(\d+):0*(\d+)")
_PHONES = ("+1 415 555 0142", "+1 415 555 0187")  # fictional (555 01xx) numbers of the two speakers


def shared_dir() -> Path:
    """The shared folder (``BRB_LONG_CHATS`` overrides), which must hold the two files."""
    import os

    return Path(os.environ.get("BRB_LONG_CHATS") or SHARED)


def load(stem: str) -> dict[str, Any]:
    return json.loads((shared_dir() / f"{stem}.json").read_text())


def session_date(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` -> an aware datetime (read as UTC)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def sessions(conv: Mapping[str, Any]) -> Iterator[tuple[datetime, list[dict[str, Any]]]]:
    """``(start, turns)`` of every session in order."""
    n = 1
    while f"session_{n}" in conv:
        if conv[f"session_{n}"]:
            yield session_date(conv[f"session_{n}_date_time"]), conv[f"session_{n}"]
        n += 1


def turns(conv: Mapping[str, Any]) -> dict[str, str]:
    """dia_id -> the turn's text."""
    return {t["dia_id"]: t["text"] for _, ts in sessions(conv) for t in ts}


def evidence_ids(raw: list[str]) -> list[str]:
    """The evidence ids, repaired for the dataset's known flaws ("D8:6; D9:17", "D:11:26", "D30:05")."""
    out = []
    for item in raw:
        out.extend(f"D{a}:{b}" for a, b in _DIA_RE.findall(item))
    return list(dict.fromkeys(out))


def in_test(stem: str, question: str) -> bool:
    """The fixed split (see the module docstring)."""
    return hashlib.sha256(f"{stem}\x00{question}".encode()).digest()[0] % 2 == 1


@dataclass(frozen=True)
class Question:
    qid: str
    stem: str
    text: str
    category: str
    evidence: tuple[str, ...]  # the evidence turns' texts
    half: str


def questions(stem: str, conv: Mapping[str, Any]) -> list[Question]:
    """The category 1-4 questions with at least one evidence turn found in the conversation."""
    by_id = turns(conv)
    out = []
    for i, qa in enumerate(conv["qa"]):
        if qa.get("category") not in CATEGORIES:
            continue
        texts = tuple(by_id[d] for d in evidence_ids(qa.get("evidence") or []) if d in by_id and by_id[d].strip())
        if not texts:
            continue
        out.append(Question(f"{stem}-{i}", stem, qa["question"], CATEGORIES[qa["category"]], texts,
                            "test" if in_test(stem, qa["question"]) else "dev"))
    return out


def write_archive(conv: Mapping[str, Any], dest: Path) -> tuple[Path, Path]:
    """Write ``dest/chat.db`` and ``dest/AddressBook/`` for one conversation; returns both paths."""
    dest.mkdir(parents=True, exist_ok=True)
    db = dest / "chat.db"
    db.unlink(missing_ok=True)
    names = (conv["speaker_a"], conv["speaker_b"])
    with ChatDbBuilder(db, seed=29) as b:
        handles = {name: b.add_handle(phone.replace(" ", "")) for name, phone in zip(names, _PHONES, strict=True)}
        chat = b.add_chat(list(handles.values()))
        for start, ts in sessions(conv):
            for j, t in enumerate(ts):
                b.add_message(chat, handles[t["speaker"]], t["text"], ts=start + timedelta(minutes=j))
    ab = dest / "AddressBook"
    write_addressbook(ab / "AddressBook-v22.abcddb",
                      [PersonRecord(first=n, last=None, phones=[p]) for n, p in zip(names, _PHONES, strict=True)])
    return db, ab


def squash(text: str) -> str:
    """Whitespace collapsed, for "is the turn's text inside the passage"."""
    return " ".join(text.split())
