"""A deterministic stand-in embedder for tests that are not about embedding quality (no MLX)."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import numpy as np

_WORD_RE = re.compile(r"\w+", re.UNICODE)


#: Words the test embedder reads of a text / 4 (the real models' truncation length).
MAX_TOKENS = 256


class HashEmbedder:
    """Deterministic bag of hashed words, word bigrams and character trigrams.

    Honest vectors for tests that are not about embedding: texts sharing words are closer,
    identical texts are identical, empty text is a fixed unit vector. No model, no MLX.

    Args:
        dim: embedding width.
    """

    document_prefix = ""
    query_prefix = ""
    device = "cpu"

    def __init__(self, dim: int = 384, max_tokens: int = MAX_TOKENS) -> None:
        self.dim = int(dim)
        self.max_tokens = int(max_tokens)
        self.model_id = f"hash-{self.dim}"

    def _features(self, text: str) -> list[tuple[str, float]]:
        words = _WORD_RE.findall(text.lower())[: self.max_tokens * 4]
        feats = [("w:" + w, 1.0) for w in words]
        feats += [("b:" + a + " " + b, 0.5) for a, b in zip(words, words[1:])]
        for w in words:
            padded = f"#{w}#"
            feats += [("c:" + padded[i : i + 3], 0.25) for i in range(len(padded) - 2)]
        return feats

    def _vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, np.float32)
        for feat, weight in self._features(text):
            h = zlib.crc32(feat.encode("utf-8"))
            v[h % self.dim] += weight if (h >> 31) & 1 == 0 else -weight
        norm = float(np.linalg.norm(v))
        if norm == 0.0:
            v[0] = 1.0
            return v
        return v / norm

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Returns (len(texts), dim) float32, rows L2-normalized."""
        if len(texts) == 0:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._vector(t) for t in texts]).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        """Returns (dim,) float32, L2-normalized."""
        return self.embed([self.query_prefix + text])[0]

    def count_tokens(self, texts: Sequence[str]) -> int:
        """Total words (truncated at max_tokens) over ``texts``."""
        return sum(min(len(_WORD_RE.findall(t)), self.max_tokens) for t in texts)
