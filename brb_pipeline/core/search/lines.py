"""Parent-child re-ranking: hybrid search's candidate windows, re-ranked by their best message.

A window (8 messages) is found by its two lists as a whole; the one message that answers a
question is a small part of its words and of its vector. Here every candidate window (the union
of the vector and BM25 lists, already filtered) also gets

* its best line's cosine similarity to the query (the stored message-line vectors of
  :mod:`brb_pipeline.core.store.line_index`), and, when its weight is not 0,
* its best line's BM25 (each line of the window's text a document; the query's terms weighted by
  the chunk index's own idf, since a line is too small a sample to estimate one),

and the fused list and the line orders are merged by weighted RRF (:data:`WEIGHTS`, k = 60). The windows themselves are what is returned: the re-ranking only
moves candidates, it never adds one, so filters and the relevance floor hold as before.

How the weights were chosen. First on the long-chats dev half alone, among the re-rank-the-pool
variants of ``benchmarks/parent_child_lab.py`` (line BM25 0.25, line vectors 0.5). Wired in, that
lost 3 questions on the own frozen set's dev half (full demo corpus: chit-chat, paraphrases that
share at most one word with their answer). ``benchmarks/line_rerank_lab.py`` then ran 14 variants
on both dev halves in one process; line vectors alone at 0.5 found one question more than no
re-rank on the own dev half (62 vs 61 of 98, MRR@10 0.527 vs 0.484) and the same on the
long-chats dev half (125 of 136, MRR@10 0.766 vs 0.763), and is the default.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence

import numpy as np

from brb_pipeline.core.search.fusion import rrf_fuse

#: Weights of (the fused list, line BM25, line vectors) in the RRF. Line BM25 is off (weight 0,
#: not computed): on the own set's dev half it cost 2-5 questions, chasing the one common word a
#: paraphrase shares with its answer (``benchmarks/results/line_rerank_lab_dev.json``).
WEIGHTS = (1.0, 0.0, 0.5)
#: Lines saying fewer words than this are left out of the line-vector order (measured, off).
MIN_LINE_WORDS = 0
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


def _said(line: str) -> str:
    """A window line without its ``Sender (hh:mm): `` prefix."""
    head, sep, rest = line.partition("): ")
    return rest if sep and "(" in head else line


def line_vector_order(pool: Sequence[str], vectors: Mapping[str, np.ndarray], query_vec: np.ndarray,
                      contents: Mapping[str, str | None] | None = None, min_words: int = 0) -> list[str]:
    """``pool``'s windows that have line vectors, by their best line's cosine similarity.

    ``vectors``: chunk id -> ``(lines, dim)`` float32 unit rows (:func:`.line_index.dequantize`),
    one per non-blank line of the window's text (``contents``). With ``min_words``, lines that
    say fewer words ("lol", "ok see you") do not count: their vectors match anything a little."""
    q = np.asarray(query_vec, dtype=np.float32).reshape(-1)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    best: dict[str, float] = {}
    for cid in pool:
        v = vectors.get(cid)
        if v is None or not len(v):
            continue
        sims = v @ q
        if min_words and contents is not None:
            said = [_said(x) for x in (contents.get(cid) or "").split("\n") if x.strip()]
            if len(said) == len(sims):  # aligned line for line (always, for a store's own rows)
                keep = np.array([len(terms(x)) >= min_words for x in said])
                if not keep.any():
                    continue
                sims = sims[keep]
        best[cid] = float(sims.max())
    at = {cid: i for i, cid in enumerate(pool)}
    return sorted(best, key=lambda c: (-best[c], at[c]))


def rerank(fused: Sequence[tuple[str, float]], lex_order: Sequence[str], vec_order: Sequence[str],
           weights: Sequence[float] | None = None) -> list[tuple[str, float]]:
    """The weighted RRF of the fused list and the two line orders: ``(chunk_id, score)`` best first,
    the same chunks as ``fused``. ``weights``: default :data:`WEIGHTS`."""
    weights = WEIGHTS if weights is None else weights
    if not fused or not ((lex_order and weights[1]) or (vec_order and weights[2])):
        return list(fused)
    keep = {cid for cid, _ in fused}
    out = rrf_fuse([[cid for cid, _ in fused], list(lex_order), list(vec_order)], k=RRF_K, weights=list(weights))
    return [(cid, s) for cid, s in out if cid in keep]
