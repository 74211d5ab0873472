"""Chunking's parameters, apart from :mod:`.chunking` so that reading settings imports no
polars or pyarrow."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkParams:
    """Chunking parameters (production defaults: window 8, stride 4, 6-hour gap).

    Attributes:
        window: messages per chunk.
        stride: messages between consecutive window starts (< window gives overlap).
        gap_s: a silence longer than this (seconds) starts a new conversation.
        min_chars: chunks with fewer characters of message text are dropped (e.g. a lone "ok").
        max_message_chars: the longest line; a longer message continues on further lines
            (split grapheme-safe, at a space when one is near), each line one window slot.
            2000 characters is ~500 tokens, past what the embedder reads of a chunk (256), so
            one line never hides its neighbours from the model.
        document_prefix: the model's document prefix (``"search_document: "`` for nomic).
        time_zone: IANA zone for the times shown ("Europe/Istanbul"); "" = the machine's zone.
    """

    window: int = 8
    stride: int = 4
    gap_s: int = 6 * 3600
    min_chars: int = 20
    max_message_chars: int = 2000
    document_prefix: str = ""
    time_zone: str = ""

    def __post_init__(self) -> None:
        if self.window < 1 or self.stride < 1 or self.stride > self.window:
            raise ValueError(f"chunking needs 1 <= stride <= window, got window={self.window} stride={self.stride}")
        if self.max_message_chars < 16:
            raise ValueError(f"max_message_chars must be at least 16, got {self.max_message_chars}")
