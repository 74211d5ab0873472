"""Lookups in the distilled memory: a person's profile, their topics, and whether a question
asks about promises (then it is answered from the profile's commitments first).

``profiles`` and ``topics`` are written by the distillation load; either may be missing (an
older store) or empty (no local model configured): every reader here returns None or ``[]``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import duckdb

from brb_pipeline.core.contacts.routing import fold
from brb_pipeline.core.store.duck import table_exists

# Matched on the folded question (lower case, accents dropped): English, Turkish, Spanish,
# Portuguese, French, German, Italian and Arabic ways to ask what one promised or committed to.
_COMMITMENT_RE = re.compile(
    r"\b(promis\w*|commit\w*|pledg\w*|owe|vow\w*"
    r"|(said|say|told|tell|agreed?)\b.{0,40}\bi\s*(['’]d|would|['’]ll|will)\b"
    r"|soz\w*\s*ver\w*|taahhut\w*"
    r"|promet\w*|compromet\w*|compromis\w*|promesse\w*"
    r"|versproch\w*|versprech\w*|zugesagt)"
    r"|وعد",
)


def is_commitment_question(text: str) -> bool:
    """Whether ``text`` asks what one promised ("what did I promise Diego", "did I say I'd call",
    "Ayşe'ye ne söz verdim", "qué le prometí a Diego", "was habe ich versprochen")."""
    return bool(_COMMITMENT_RE.search(fold(text)))


def _commitments(raw: Any) -> list[dict[str, str | None]]:
    """``[{"text", "date"}]`` from the JSON column; entries without text are skipped."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return []
    out = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict) and isinstance(item.get("text"), str) and item["text"].strip():
            date = item.get("date")
            out.append({"text": item["text"].strip(), "date": str(date) if date else None})
    return out


def read_profile(con: duckdb.DuckDBPyConnection, contact_id: str) -> dict[str, Any] | None:
    """The contact's profile (``relationship``, ``tone``, ``recurring_topics``, ``commitments``,
    ``n_topics``, ``model_id``), or None without one."""
    if not table_exists(con, "profiles"):
        return None
    row = con.execute(
        "SELECT relationship, tone, recurring_topics, commitments, n_topics, model_id FROM profiles "
        "WHERE contact_id = ?", [contact_id]).fetchone()
    if row is None:
        return None
    return {"relationship": row[0], "tone": row[1], "recurring_topics": list(row[2] or []),
            "commitments": _commitments(row[3]), "n_topics": row[4], "model_id": row[5]}


def contact_topics(con: duckdb.DuckDBPyConnection, contact_id: str) -> list[dict[str, Any]]:
    """The contact's topics, newest first, each with the span of messages it summarizes."""
    if not table_exists(con, "topics"):
        return []
    cur = con.execute(
        "SELECT topic_id, month, language, label, summary, chat_id, first_ts, last_ts, first_message_id, "
        "last_message_id FROM topics WHERE contact_id = ? "
        "ORDER BY last_ts DESC NULLS LAST, month DESC NULLS LAST, topic_id", [contact_id])
    cols = [d[0] for d in cur.description]
    out = []
    for r in cur.fetchall():
        item = dict(zip(cols, r))
        for key in ("first_ts", "last_ts"):
            item[key] = item[key].isoformat() if item[key] is not None else None
        out.append(item)
    return out
