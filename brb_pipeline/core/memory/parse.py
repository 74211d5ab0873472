"""Topics out of a model's reply: every complete object kept, each field decoded on its own.

A reply is meant to be a JSON array of ``{"label", "summary", "first_message", "last_message"}``
objects, but models wrap it in prose, cut it off at the token limit, and break one field while
the others are fine. :func:`parse_reply` scans the text for top-level objects (strings and
escapes respected), keeps every object that closed before the cut, and decodes each field
separately, falling back per field; :class:`Losses` counts what that cost.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

MAX_LABEL_CHARS = 80
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL | re.IGNORECASE)


@dataclass
class Losses:
    """What distillation lost, counted (text-free: safe for metadata and logs).

    Attributes:
        truncated_replies: replies cut off before their array closed.
        objects_lost: topic objects dropped (cut mid-object, or neither label nor summary usable).
        fields_fallen_back: fields replaced by their fallback (the object was kept).
        batches_failed: windows whose generation raised or whose reply held no JSON at all.
    """

    truncated_replies: int = 0
    objects_lost: int = 0
    fields_fallen_back: int = 0
    batches_failed: int = 0

    def add(self, other: "Losses") -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class RawTopic:
    """One decoded topic; message numbers are the prompt's (1-based, first <= last)."""

    label: str
    summary: str
    first: int
    last: int


def split_objects(text: str) -> tuple[list[str], bool, bool, bool]:
    """The top-level ``{...}`` slices of the array in ``text``.

    Returns:
        (complete object slices in order, whether an object was open at the end, whether the
        reply was cut off (an object or the array left open), whether it held any JSON at all).
    """
    starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
    if not starts:
        return [], False, False, False
    objects: list[str] = []
    depth, start, in_str, esc, closed = 0, 0, False, False, False
    in_array = text[min(starts)] == "["
    for i in range(min(starts) + (1 if in_array else 0), len(text)):
        ch = text[i]
        if in_str:
            esc, in_str = (False, True) if esc else (ch == "\\", ch != '"')
        elif ch == '"' and depth:
            in_str = True
        elif ch == "{":
            start = i if depth == 0 else start
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                objects.append(text[start:i + 1])
                if not in_array:
                    closed = True
                    break
        elif ch == "]" and depth == 0:
            closed = True
            break
    return objects, depth > 0, depth > 0 or not closed, True


def _string_field(raw: str, name: str) -> object:
    m = re.search(rf'"{name}"\s*:\s*"((?:[^"\\]|\\.)*)"', raw, re.DOTALL)
    if not m:
        return None
    try:
        return json.loads(f'"{m.group(1)}"')
    except ValueError:
        return None


def _number_field(raw: str, name: str) -> object:
    m = re.search(rf'"{name}"\s*:\s*"?(\d+)', raw)
    return int(m.group(1)) if m else None


def _fields(raw: str) -> dict[str, object]:
    """The four fields of one object: from JSON when it decodes, else one by one from the text."""
    try:
        obj = json.loads(raw)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        return {k: obj.get(k) for k in ("label", "summary", "first_message", "last_message")}
    return {"label": _string_field(raw, "label"), "summary": _string_field(raw, "summary"),
            "first_message": _number_field(raw, "first_message"),
            "last_message": _number_field(raw, "last_message")}


def _text(v: object, limit: int | None = None) -> str | None:
    if not isinstance(v, str) or not v.strip():
        return None
    v = " ".join(v.split())
    return v if limit is None or len(v) <= limit else None


def _number(v: object, n: int) -> int | None:
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= n else None


def decode_object(raw: str, n: int, losses: Losses) -> RawTopic | None:
    """One topic from one object's text; each field falls back on its own (counted).

    Fallbacks: a bad label becomes the summary's first five words, a bad summary the label, a
    bad message number the window's first (or last) message. An object with neither a usable
    label nor summary is lost (counted).

    Args:
        n: how many messages the prompt numbered.
    """
    f = _fields(raw)
    label, summary = _text(f["label"], MAX_LABEL_CHARS), _text(f["summary"])
    if label is None and summary is None:
        losses.objects_lost += 1
        return None
    if label is None:
        label, losses.fields_fallen_back = " ".join(summary.split()[:5]), losses.fields_fallen_back + 1
    if summary is None:
        summary, losses.fields_fallen_back = label, losses.fields_fallen_back + 1
    first, last = _number(f["first_message"], n), _number(f["last_message"], n)
    if first is None:
        first, losses.fields_fallen_back = 1, losses.fields_fallen_back + 1
    if last is None:
        last, losses.fields_fallen_back = n, losses.fields_fallen_back + 1
    return RawTopic(label, summary, min(first, last), max(first, last))


def parse_reply(reply: str, n: int, losses: Losses) -> list[RawTopic]:
    """Every topic a reply holds, its losses added to ``losses``.

    Args:
        reply: the generated text.
        n: how many messages the prompt numbered.
    """
    text = _THINK.sub(" ", reply or "")
    objects, open_object, cut, any_json = split_objects(text)
    if not any_json:
        losses.batches_failed += 1
        return []
    if cut:
        losses.truncated_replies += 1
        losses.objects_lost += int(open_object)
    return [t for t in (decode_object(o, n, losses) for o in objects) if t is not None]
