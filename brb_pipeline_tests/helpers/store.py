"""Chunk frames and vectors shaped like the chunking and embedding stages' output."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import polars as pl

from brb_pipeline.core.store import chunks as store
from brb_pipeline_tests.helpers import T0

DIM = 16


def make_chunks(batch: str, contact: str, n: int, *, texts: list[str] | None = None, chat: str | None = None) -> pl.DataFrame:
    """A chunk frame shaped like the chunking stage's output (n rows for one contact/chat)."""
    chat = chat or f"chat-{contact}"
    texts = texts or [f"{contact} chunk number {i} about the weekend" for i in range(n)]
    return pl.DataFrame(
        {
            "chunk_id": [f"{chat}:{i}" for i in range(n)],
            "batch": [batch] * n,
            "contact_id": [contact] * n,
            "chat_id": [chat] * n,
            "channel": ["imessage"] * n,
            "conversation": [i // 4 for i in range(n)],
            "position": list(range(n)),
            "first_message_id": [f"{chat}-m{4 * i}" for i in range(n)],
            "last_message_id": [f"{chat}-m{4 * i + 7}" for i in range(n)],
            "start_ts": [T0 + timedelta(hours=i) for i in range(n)],
            "end_ts": [T0 + timedelta(hours=i, minutes=20) for i in range(n)],
            "message_count": [8] * n,
            "content": texts,
            "embedding_text": texts,
        },
        schema_overrides={
            "conversation": pl.Int32, "position": pl.Int32, "message_count": pl.Int32,
            "start_ts": pl.Datetime("us", "UTC"), "end_ts": pl.Datetime("us", "UTC"),
        },
    )  # fmt: skip


def make_vectors(n: int, seed: int, dim: int = DIM) -> np.ndarray:
    """(n, dim) float32 unit vectors, deterministic."""
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def write(tmp: Path, batch: str, contact: str, n: int, *, seed: int = 0, model: str = "test@1", **kw) -> Path:
    return store.write_partition(tmp / "staging", batch, make_chunks(batch, contact, n, **kw), make_vectors(n, seed), model)

