"""A person's profile, derived deterministically from their topics only.

Re-derived from all of the person's topics every time, so a later month never conflicts with an
earlier one. Relationship and tone are the likeliest of a few kinds by keywords in the labels and
summaries; recurring topics are labels seen in more than one month; commitments are only the
sentences of summaries that state a promise explicitly, with a date when the sentence has one.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import polars as pl

from brb_pipeline.core.memory.prompts import PROMPT_VERSION

PROFILE_SCHEMA = pl.Schema({
    "contact_id": pl.Utf8, "relationship": pl.Utf8, "tone": pl.Utf8, "recurring_topics": pl.List(pl.Utf8),
    "commitments": pl.Utf8, "n_topics": pl.Int32, "model_id": pl.Utf8, "prompt_version": pl.Int32,
})

_KINDS = {
    "relationship": {
        "family": r"\b(mom|mum|dad|mother|father|sister|brother|aunt|uncle|cousin|grandma|grandpa|family|"
                  r"anne|baba|kardeş|madre|padre|hermana|hermano|mutter|vater|schwester|bruder|mère|père|sœur|frère)\b",
        "partner": r"\b(love|date night|anniversary|honey|girlfriend|boyfriend|wife|husband|sevgili|aşkım)\b",
        "work": r"\b(meeting|project|client|contract|deadline|office|invoice|boss|colleague|team|toplantı|"
                r"proje|reunión|proyecto|besprechung|projekt|réunion|projet)\b",
    },
    "tone": {
        "warm": r"\b(thank|thanks|love|congratulat|happy|glad|miss|teşekkür|gracias|danke|merci)\w*",
        "tense": r"\b(argu|upset|angry|complain|conflict|disagree|annoy|sorry|apolog)\w*",
        "practical": r"\b(plan|schedul|arrang|book|pick up|deliver|pay|send|buy|organi[sz])\w*",
    },
}
_FALLBACK = {"relationship": "acquaintance", "tone": "neutral"}
_PROMISE = re.compile(
    r"\b(promised|promises|will send|will pay|will call|will bring|will return|agreed to|committed to|"
    r"swore to|söz verdi|prometió|versprach|a promis)\b", re.IGNORECASE)
_MONTHS = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
_DATE = re.compile(
    rf"\b(\d{{4}}-\d{{2}}-\d{{2}}|\d{{1,2}}/\d{{1,2}}(?:/\d{{2,4}})?|{_MONTHS} \d{{1,2}}(?:st|nd|rd|th)?|"
    rf"\d{{1,2}}(?:st|nd|rd|th)? (?:of )?{_MONTHS}|(?:mon|tues|wednes|thurs|fri|satur|sun)day|tomorrow|tonight)\b",
    re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _likeliest(texts: list[str], kind: str) -> str:
    scores = {name: sum(len(re.findall(rx, t, re.IGNORECASE)) for t in texts)
              for name, rx in _KINDS[kind].items()}
    best = max(scores, key=lambda k: scores[k])
    return best if scores[best] else _FALLBACK[kind]


def recurring_topics(labels: list[str], months: list[str], limit: int = 5) -> list[str]:
    """Labels (case-folded) seen in more than one month, most frequent first; the most frequent
    labels when none recurs."""
    seen: dict[str, set[str]] = {}
    counts: Counter[str] = Counter()
    for label, month in zip(labels, months):
        key = " ".join(label.lower().split())
        seen.setdefault(key, set()).add(month)
        counts[key] += 1
    recurring = [k for k, _ in counts.most_common() if len(seen[k]) > 1]
    return (recurring or [k for k, _ in counts.most_common()])[:limit]


def commitments(summaries: list[str]) -> list[dict[str, Any]]:
    """``{text, date}`` for each summary sentence that states a promise explicitly (``date`` the
    sentence's date or day, else None); empty when none does."""
    out, seen = [], set()
    for summary in summaries:
        for sentence in _SENTENCE.split(summary):
            sentence = sentence.strip()
            if sentence and _PROMISE.search(sentence) and sentence not in seen:
                seen.add(sentence)
                m = _DATE.search(sentence)
                out.append({"text": sentence, "date": m.group(1) if m else None})
    return out


def derive_profiles(topics: pl.DataFrame, contacts: list[str], model_id: str) -> pl.DataFrame:
    """One profile per contact in ``contacts`` from their rows in ``topics`` only.

    A contact without topics gets an ``unknown`` relationship, no recurring topics and no
    commitments (n_topics 0), so every person has a row.
    """
    rows = []
    for contact in sorted(set(contacts)):
        mine = topics.filter(pl.col("contact_id") == contact).sort("first_ts")
        texts = [f"{a}. {b}" for a, b in zip(mine["label"].to_list(), mine["summary"].to_list())]
        rows.append({
            "contact_id": contact,
            "relationship": _likeliest(texts, "relationship") if texts else "unknown",
            "tone": _likeliest(texts, "tone") if texts else "unknown",
            "recurring_topics": recurring_topics(mine["label"].to_list(), mine["month"].to_list()),
            "commitments": json.dumps(commitments(mine["summary"].to_list()), ensure_ascii=False),
            "n_topics": mine.height, "model_id": model_id, "prompt_version": PROMPT_VERSION,
        })
    return pl.DataFrame(rows, schema=PROFILE_SCHEMA)
