"""Parent-child re-ranking: hybrid search's candidate windows, re-ranked by their best message.

A window (8 messages) is found by its two lists as a whole; the one message that answers a
question is a small part of its words and of its vector. Here every candidate window (the union
of the vector and BM25 lists, already filtered) also gets

* its best line's cosine similarity to the query (the stored message-line vectors of
  :mod:`brb_pipeline.core.store.line_index`), and
* its best line's BM25 (each line of the window's text a document; the query's terms weighted by
  the chunk index's own idf, since a line is too small a sample to estimate one),

and the fused list, the line-BM25 order and the line-vector order are merged by weighted RRF
(:data:`WEIGHTS`, k = 60). The windows themselves are what is returned: the re-ranking only
moves candidates, it never adds one, so filters and the relevance floor hold as before.

The weights are the variant chosen on the long-chats dev half among the re-rank-the-pool variants
(``benchmarks/parent_child_lab.py``: "pool rrf brb+0.25*clex+0.5*cvec", dev recall@5 0.941 beside
brb's 0.919), before this code existed or its test half was read.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence

import numpy as np

from brb_pipeline.core.search.fusion import rrf_fuse

#: Weights of (the fused list, line BM25, line vectors) in the RRF.
WEIGHTS = (1.0, 0.25, 0.5)
RRF_K = 60
_K1, _B = 1.2, 0.75
_SPLIT = re.compile(r"[\W_]+")


def terms(text: str) -> list[str]:
    """Lower-cased, accent-stripped word tokens, split as the BM25 index splits (on anything
    that is not a letter, digit or mark)."""
    folded = "".join(ch for ch in unicodedata.normalize("NFKD", (text or "").lower())
                     if not unicodedata.combining(ch))
    return [t for t in _SPLIT.split(folded) if t]


def line_bm25_order(pool: Sequence[str], contents: Mapping[str, str | None], query_terms: Sequence[str],
                    df: Mapping[str, int], num_docs: int) -> list[str]:
    """``pool``'s windows that have a line holding a query term, by their best line's BM25.

    Args:
        pool: candidate chunk ids, in the fused order (ties keep it).
        contents: chunk id -> the window's text (one message per line).
        query_terms: the query's terms (:func:`terms`); those absent from ``df`` are stop words
            or unknown to the index and count for nothing.
        df: term -> document frequency in the chunk index; ``num_docs``: chunks indexed.
    """
    idf = {t: math.log10((num_docs - df[t] + 0.5) / (df[t] + 0.5) + 1)
           for t in dict.fromkeys(query_terms) if t in df and num_docs > 0}
    if not idf:
        return []
    lines = {cid: [terms(line) for line in (contents.get(cid) or "").split("\n") if line.strip()] for cid in pool}
    lengths = [len(toks) for ls in lines.values() for toks in ls]
    avg = (sum(lengths) / len(lengths)) if lengths else 0.0
    if avg <= 0:
        return []
    best: dict[str, float] = {}
    for cid, ls in lines.items():
        for toks in ls:
            counts: dict[str, int] = {}
            for t in toks:
                if t in idf:
                    counts[t] = counts.get(t, 0) + 1
            if not counts:
                continue
            norm = _K1 * ((1 - _B) + _B * len(toks) / avg)
            score = sum(idf[t] * c * (_K1 + 1) / (c + norm) for t, c in counts.items())
            best[cid] = max(best.get(cid, 0.0), score)
    at = {cid: i for i, cid in enumerate(pool)}
    return sorted(best, key=lambda c: (-best[c], at[c]))


def line_vector_order(pool: Sequence[str], vectors: Mapping[str, np.ndarray], query_vec: np.ndarray) -> list[str]:
    """``pool``'s windows that have line vectors, by their best line's cosine similarity.

    ``vectors``: chunk id -> ``(lines, dim)`` float32 unit rows (:func:`.line_index.dequantize`)."""
    q = np.asarray(query_vec, dtype=np.float32).reshape(-1)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    best = {cid: float((vectors[cid] @ q).max()) for cid in pool if cid in vectors and len(vectors[cid])}
    at = {cid: i for i, cid in enumerate(pool)}
    return sorted(best, key=lambda c: (-best[c], at[c]))


def rerank(fused: Sequence[tuple[str, float]], lex_order: Sequence[str], vec_order: Sequence[str],
           weights: Sequence[float] = WEIGHTS) -> list[tuple[str, float]]:
    """The weighted RRF of the fused list and the two line orders: ``(chunk_id, score)`` best first,
    the same chunks as ``fused``."""
    if not fused or not (lex_order or vec_order):
        return list(fused)
    keep = {cid for cid, _ in fused}
    out = rrf_fuse([[cid for cid, _ in fused], list(lex_order), list(vec_order)], k=RRF_K, weights=list(weights))
    return [(cid, s) for cid, s in out if cid in keep]
