"""Parent-child re-ranking: hybrid search's candidate windows, re-ranked by their best message.

A window (8 messages) is found by its two lists as a whole; the one message that answers a
question is a small part of its words and of its vector. Here every candidate window (the union
of the vector and BM25 lists, already filtered) also gets its best line's cosine similarity to
the query (the stored message-line vectors of :mod:`brb_pipeline.core.store.line_index`), and the
fused order and that order are merged by weighted RRF (:data:`WEIGHT`, k = 60). The windows
themselves are what is returned: the re-ranking only moves candidates, it never adds one, so
filters and the relevance floor hold as before.

How the weight was chosen. First on the long-chats dev half alone, among the re-rank-the-pool
variants of ``benchmarks/parent_child_lab.py`` (line BM25 0.25, line vectors 0.5). Wired in, that
lost 3 questions on the own frozen set's dev half (full demo corpus: chit-chat, paraphrases that
share at most one word with their answer). ``benchmarks/line_rerank_lab.py`` then ran 14 variants
on both dev halves in one process (``benchmarks/results/line_rerank_lab_dev.json``; the line-BM25
and fewer-words variants ran on the code of commit debe49b): line vectors alone at 0.5 found one
question more than no re-rank on the own dev half (62 vs 61 of 98, MRR@10 0.527 vs 0.484) and
the same on the long-chats dev half (125 of 136, MRR@10 0.766 vs 0.763), and is the default.
A line BM25 beside it lost 2-5 own-dev questions (it chases the one common word a paraphrase
shares with its answer), and leaving out short lines changed at most one question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from brb_pipeline.core.search.fusion import rrf_fuse

#: Weight of the line-vector order in the RRF, beside the fused order's 1.
WEIGHT = 0.5
RRF_K = 60


def line_vector_order(pool: Sequence[str], vectors: Mapping[str, np.ndarray], query_vec: np.ndarray) -> list[str]:
    """``pool``'s windows that have line vectors, by their best line's cosine similarity (ties
    keep the pool's order).

    ``vectors``: chunk id -> ``(lines, dim)`` float32 unit rows (:func:`.line_index.dequantize`)."""
    q = np.asarray(query_vec, dtype=np.float32).reshape(-1)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    best = {cid: float((vectors[cid] @ q).max()) for cid in pool if cid in vectors and len(vectors[cid])}
    at = {cid: i for i, cid in enumerate(pool)}
    return sorted(best, key=lambda c: (-best[c], at[c]))


def rerank(fused: Sequence[tuple[str, float]], line_order: Sequence[str], weight: float | None = None
           ) -> list[tuple[str, float]]:
    """The weighted RRF of the fused list (weight 1) and the line order (``weight``, default
    :data:`WEIGHT`): ``(chunk_id, score)`` best first, the same chunks as ``fused``."""
    weight = WEIGHT if weight is None else weight
    if not fused or not line_order or not weight:
        return list(fused)
    keep = {cid for cid, _ in fused}
    out = rrf_fuse([[cid for cid, _ in fused], list(line_order)], k=RRF_K, weights=[1.0, weight])
    return [(cid, s) for cid, s in out if cid in keep]
