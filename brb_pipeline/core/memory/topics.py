"""A person's messages to topic rows: monthly batches, cut into windows, one prompt per window.

Each contact's messages (every channel) are grouped by calendar month (UTC); a month's dominant
language picks the prompt; a month longer than ``max_chars`` is cut into consecutive windows.
A window of nothing but greetings and acknowledgements is not sent to the model: it yields no
topic. The model's message numbers are mapped back to message ids, times and the chat.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from brb_pipeline.core.memory.generate import Generator
from brb_pipeline.core.memory.language import detect_language
from brb_pipeline.core.memory.params import WINDOW_CHARS
from brb_pipeline.core.memory.parse import Losses, parse_reply
from brb_pipeline.core.memory.prompts import PROMPT_VERSION, build_prompt

log = logging.getLogger(__name__)

#: Columns of a topics partition file, in the ``topics`` table's order.
TOPIC_SCHEMA = pl.Schema({
    "topic_id": pl.Utf8, "contact_id": pl.Utf8, "batch": pl.Utf8, "month": pl.Utf8, "language": pl.Utf8,
    "label": pl.Utf8, "summary": pl.Utf8, "chat_id": pl.Utf8, "first_ts": pl.Datetime("us", "UTC"),
    "last_ts": pl.Datetime("us", "UTC"), "first_message_id": pl.Utf8, "last_message_id": pl.Utf8,
    "model_id": pl.Utf8, "prompt_version": pl.Int32,
})

_GLUE = frozenset((
    "ok okay k kk thanks thank you thx ty lol haha hahaha hi hello hey yes no yeah yep yup sure cool "
    "nice great bye good night morning gn gm see ya np welcome tamam evet hayır selam merhaba "
    "teşekkürler sağol eyvallah günaydın hola gracias sí si vale adiós buenas buenos días hallo danke ja "
    "nein tschüss salut merci oui bonjour bonsoir ciao grazie obrigado olá").split())
_WORDS = re.compile(r"[^\W\d_]+", re.UNICODE)


def is_glue(text: str | None) -> bool:
    """Whether a message is only greetings, thanks, acknowledgements, emoji or punctuation."""
    words = _WORDS.findall((text or "").lower())
    return all(w in _GLUE for w in words)


@dataclass
class Distilled:
    """What one batch's distillation produced: topic rows, losses and text-free counts."""

    topics: pl.DataFrame
    losses: Losses = field(default_factory=Losses)
    windows: int = 0
    glue_windows: int = 0
    languages: dict[str, int] = field(default_factory=dict)


def month_windows(msgs: pl.DataFrame, max_chars: int) -> list[tuple[str, str, pl.DataFrame]]:
    """(contact_id, YYYY-MM, window) for every contact and month, windows of <= ``max_chars``
    characters of text (at least one message each), in time order."""
    m = (msgs.filter(pl.col("ts").is_not_null() & pl.col("text").is_not_null() & pl.col("contact_id").is_not_null()
                     & (pl.col("text").str.strip_chars() != ""))
         .with_columns(pl.col("ts").dt.strftime("%Y-%m").alias("month"))
         .sort(["contact_id", "ts", "message_id"]))
    out = []
    for (contact, month), part in m.group_by(["contact_id", "month"], maintain_order=True):
        sizes = part["text"].str.len_chars().to_list()
        start, used = 0, 0
        for i, n in enumerate(sizes):
            if used and used + n > max_chars:
                out.append((contact, month, part.slice(start, i - start)))
                start, used = i, 0
            used += n
        out.append((contact, month, part.slice(start)))
    return out


def _topic_id(contact: str, month: str, window: int, k: int, first_id: str, last_id: str) -> str:
    return hashlib.sha1(f"{contact}|{month}|{window}|{k}|{first_id}|{last_id}".encode()).hexdigest()[:24]


def _window_rows(batch: str, contact: str, month: str, window: int, language: str, part: pl.DataFrame,
                 reply: str, model_id: str, losses: Losses) -> list[dict[str, Any]]:
    ids, ts, chats = part["message_id"].to_list(), part["ts"].to_list(), part["chat_id"].to_list()
    rows = []
    for k, t in enumerate(parse_reply(reply, part.height, losses)):
        a, b = t.first - 1, t.last - 1
        rows.append({"topic_id": _topic_id(contact, month, window, k, ids[a], ids[b]), "contact_id": contact,
                     "batch": batch, "month": month, "language": language, "label": t.label, "summary": t.summary,
                     "chat_id": chats[a], "first_ts": ts[a], "last_ts": ts[b], "first_message_id": ids[a],
                     "last_message_id": ids[b], "model_id": model_id, "prompt_version": PROMPT_VERSION})
    return rows


def distill(msgs: pl.DataFrame, batch: str, generator: Generator, *, max_chars: int = WINDOW_CHARS,
            on_window: Any = None) -> Distilled:
    """Topics of every contact in ``msgs`` (one contact batch), one prompt per non-glue window.

    A generation that raises is counted as a failed window and the others go on.

    Args:
        msgs: messages with ``contact_id``, ``message_id``, ``chat_id``, ``ts``, ``text``,
            ``is_from_me``.
        on_window: called as ``on_window(done, total)`` after each window.
    """
    windows = month_windows(msgs, max_chars)
    out = Distilled(pl.DataFrame(schema=TOPIC_SCHEMA), windows=len(windows))
    month_texts: dict[tuple[str, str], list[str]] = {}
    for contact, month, part in windows:
        month_texts.setdefault((contact, month), []).extend(part["text"].to_list())
    langs = {key: detect_language(texts) for key, texts in month_texts.items()}
    for lang in langs.values():
        out.languages[lang] = out.languages.get(lang, 0) + 1
    rows: list[dict[str, Any]] = []
    for w, (contact, month, part) in enumerate(windows):
        texts = part["text"].to_list()
        lang = langs[(contact, month)]
        if all(is_glue(t) for t in texts):
            out.glue_windows += 1
        else:
            prompt = build_prompt(lang, list(zip(part["is_from_me"].fill_null(False).to_list(), texts)))
            try:
                reply = generator(prompt)
            except Exception as exc:  # one window's failure must not stop the batch
                log.warning("Memory - generation failed for a window of batch %s (%s)", batch, type(exc).__name__)
                out.losses.batches_failed += 1
            else:
                rows += _window_rows(batch, contact, month, w, lang, part, reply, generator.model_id, out.losses)
        if on_window:
            on_window(w + 1, len(windows))
    if rows:
        out.topics = pl.DataFrame(rows, schema=TOPIC_SCHEMA)
    return out
