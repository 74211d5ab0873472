"""What hybrid search does with its two candidate lists: fuse, merge overlapping windows, diversify.

Pure functions over ranked ids and small row tuples; no database. :mod:`brb_pipeline.core.search.hybrid`
runs the queries and calls these in order: :func:`fuse` -> :func:`merge_overlapping` ->
(optionally) :func:`mmr_order` -> top-k.

Fusion. Equal-weight Reciprocal Rank Fusion lets a weak lexical match (one shared common word)
push the right passage out of the top 5: on our dev questions it lost to its own vector half.
:class:`Fusion` therefore weights the lexical list, and can raise that weight only for a query
that carries a *specific* term (a rare word of the archive, a 3+ digit number or a quoted phrase),
the questions where lexical search wins. The defaults were chosen on the dev half of
``benchmarks/questions/`` (``benchmarks/bench_retrieval.py``; its table keeps every variant).

Per query, the lexical weight also follows the BM25 list's *coverage*: the largest share of the
query terms' idf mass that one candidate holds. A question written from what was said ("When did
Priya go to the pottery fair in Leeds?") has a candidate holding most of its rare words, and
BM25 ranks it well; a paraphrase shares at most a common word with its answer, and a low weight
keeps BM25's weak matches out of the way. Above ``coverage_from`` (0.5) the weight is 0.5
(chosen on the long-chats dev half, ``benchmarks/bench_long_chats.py --tune``).

When the two lists disagree outright (neither one's best candidate is in the other's top 10),
:func:`both_bests_first` puts the vector's best first and BM25's best second: that is how a
paraphrase looks, and there the coverage weight pushed the vector's right answer down (chosen on
the long-chats dev half and the 4K paraphrase check with ``benchmarks/fusion_lab.py``).

Merging. Windows overlap (window 8, stride 4: each message is in two chunks), so the two chunks
around one remembered moment would take two of the k slots. Hits of one chat and conversation
whose time spans intersect become one hit: the union span, the best score and rank, every chunk
id, and the union of their lines; at most three windows (16 messages) to a hit.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

FUSION_METHODS = ("rrf", "score")
_QUOTED_RE = re.compile(r"[\"“”«»„]([^\"“”«»„]{2,})[\"“”«»„]")
_NUMBER_RE = re.compile(r"\d{3,}")
_WORD_RE = re.compile(r"[^\W_]+")
_OPENERS = frozenset("what when where who whom whose why how which did do does was were is are can could would "
                     "should i i'm my me we our you your the a an that this those these there remember find show "
                     "tell told said anything something someone".split())


@dataclass(frozen=True)
class Fusion:
    """How hybrid mode combines the vector and the lexical list.

    Attributes:
        method: ``rrf`` (weighted Reciprocal Rank Fusion) or ``score`` (a convex combination of
            min-max normalized cosine and BM25 scores).
        lexical_weight: weight of the lexical list (the vector list weighs 1; in ``score``,
            the lexical share of the combination).
        specific_lexical_weight: weight used instead for a query with a specific term (see
            :func:`is_specific`); None keeps ``lexical_weight`` for every query.
        rare_df_share: a query term found in at most this share of the chunks is rare.
        rrf_k: the RRF constant.
        covered_lexical_weight: weight used when one lexical candidate matches most of the
            query (its *coverage*: the share of the query terms' idf mass it holds); None keeps
            ``lexical_weight``. The weight ramps linearly from ``lexical_weight`` at coverage
            ``coverage_from`` to this at ``coverage_full``.
    """

    method: str = "score"
    lexical_weight: float = 0.05
    specific_lexical_weight: float | None = 0.7
    rare_df_share: float = 0.0001
    rrf_k: int = 60
    covered_lexical_weight: float | None = 0.5
    coverage_from: float = 0.5
    coverage_full: float = 0.5
    agreement_depth: int | None = None  # the covered weight needs BM25's best in the vector top-n
    disagreement_depth: int | None = 10  # lists whose bests are both outside the other's top-n: see fuse

    def __post_init__(self) -> None:
        if self.method not in FUSION_METHODS:
            raise ValueError(f"unknown fusion method {self.method!r}; expected one of {FUSION_METHODS}")
        if self.lexical_weight < 0 or (self.specific_lexical_weight or 0) < 0:
            raise ValueError("fusion weights must be >= 0")

    def weight_for(self, specific: bool, coverage: float | None = None) -> float:
        """The lexical list's weight for one query: the specific weight for a query naming
        something rare, else ramped up by the lexical coverage (see the class doc)."""
        if specific and self.specific_lexical_weight is not None:
            return self.specific_lexical_weight
        if self.covered_lexical_weight is None or coverage is None or coverage <= self.coverage_from:
            return self.lexical_weight
        span = self.coverage_full - self.coverage_from
        ramp = 1.0 if span <= 0 else min(1.0, (coverage - self.coverage_from) / span)
        return self.lexical_weight + ramp * (self.covered_lexical_weight - self.lexical_weight)


def specific_terms(query: str) -> list[str]:
    """Terms of a query that may name something exact: words of a quoted phrase, numbers of 3+
    digits, and capitalized words that are not a question's opening word ("What", "When"). Only
    these are looked up for rarity: a paraphrase's own uncommon words ("abandoning") are rare in
    the archive too, and treating them as exact lets weak lexical matches lead (measured on dev)."""
    out: list[str] = []
    for m in _QUOTED_RE.finditer(query):
        out.extend(_WORD_RE.findall(m.group(1)))
    out.extend(_NUMBER_RE.findall(query))
    for w in _WORD_RE.findall(query):
        if w[:1].isupper() and w.lower() not in _OPENERS and not w.isdigit():
            out.append(w)
    return list(dict.fromkeys(out))


def is_specific(query: str, min_df: int | None, num_docs: int, rare_df_share: float) -> bool:
    """Whether a query names something lexical search finds best: a quoted phrase, or one of its
    :func:`specific_terms` occurring in at most ``rare_df_share`` of the ``num_docs`` chunks
    (``min_df``: the smallest document frequency among those terms in the index)."""
    if _QUOTED_RE.search(query):
        return True
    # Every message sits in two overlapping windows, so a name said once is in two chunks; up to
    # four chunks (two messages) is rare in any archive, however small.
    return min_df is not None and num_docs > 0 and min_df <= max(4.0, rare_df_share * num_docs)


def quoted_phrases(query: str) -> list[str]:
    """The quoted phrases of a query (straight, curly or guillemet quotes), each of 2+ characters."""
    return [m.group(1).strip() for m in _QUOTED_RE.finditer(query) if _WORD_RE.search(m.group(1))]


def _words(text: str) -> str:
    return " " + " ".join(_WORD_RE.findall(unicodedata.normalize("NFKC", text).casefold())) + " "


def phrase_first(fused: Sequence[tuple[str, float]], texts: Mapping[str, tuple], phrases: Sequence[str]
                 ) -> list[tuple[str, float]]:
    """``fused`` with the candidates whose text holds every phrase first, each group in its own
    order. A phrase matches as consecutive words, case and punctuation aside ("great to chat"
    is in "Great to chat, Sam!"). ``texts``: chunk_id -> a row whose last value is the text.
    Nothing is dropped: when no candidate holds them all, the order is unchanged."""
    wanted = [_words(p) for p in phrases]
    wanted = [w for w in wanted if w.strip()]
    if not wanted:
        return list(fused)
    hold = {cid for cid, row in texts.items() if all(w in _words(row[-1] or "") for w in wanted)}
    return [x for x in fused if x[0] in hold] + [x for x in fused if x[0] not in hold]


def rrf_fuse(lists: Sequence[Sequence[str]], k: int = 60, weights: Sequence[float] | None = None
             ) -> list[tuple[str, float]]:
    """Weighted Reciprocal Rank Fusion: ``score(d) = sum_i w_i / (k + rank_i(d))``, ranks 1-based.

    Args:
        lists: ranked id lists, best first. A repeated id counts at its first position only.
        k: RRF constant; larger flattens the weight of top ranks.
        weights: one weight per list (default all 1).

    Returns:
        ``(id, score)`` best first. Ties break by best single rank, then id, so the order is
        deterministic.
    """
    weights = [1.0] * len(lists) if weights is None else list(weights)
    if len(weights) != len(lists):
        raise ValueError("one weight per list")
    scores: dict[str, float] = {}
    best: dict[str, int] = {}
    for ranked, w in zip(lists, weights, strict=True):
        seen: set[str] = set()
        for rank, doc in enumerate(ranked, start=1):
            if doc in seen:
                continue
            seen.add(doc)
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank)
            best[doc] = min(best.get(doc, rank), rank)
    return sorted(scores.items(), key=lambda item: (-item[1], best[item[0]], item[0]))


def _minmax(values: dict[str, float]) -> dict[str, float]:
    if not values:
        return {}
    lo, hi = min(values.values()), max(values.values())
    if hi - lo <= 1e-12:
        return {d: 1.0 for d in values}
    return {d: (v - lo) / (hi - lo) for d, v in values.items()}


def score_fuse(vector: Sequence[tuple[str, float]], lexical: Sequence[tuple[str, float]], lexical_weight: float
               ) -> list[tuple[str, float]]:
    """Convex combination of min-max normalized scores: ``(1 - w) * cos + w * bm25`` (w clipped
    to [0, 1]; a document missing from a list scores 0 there). Ties break by id."""
    w = min(max(lexical_weight, 0.0), 1.0)
    v = _minmax(dict(vector))
    lx = _minmax(dict(lexical))
    docs = set(v) | set(lx)
    scored = {d: (1 - w) * v.get(d, 0.0) + w * lx.get(d, 0.0) for d in docs}
    return sorted(scored.items(), key=lambda item: (-item[1], item[0]))


def fuse(vector: Sequence[tuple[str, float]], lexical: Sequence[tuple[str, float]], fusion: Fusion, *,
         specific: bool = False, coverage: float | None = None) -> list[tuple[str, float]]:
    """Fuse ``(id, cosine similarity)`` and ``(id, BM25)`` lists, each best first (``coverage``:
    the lexical list's, see :meth:`Fusion.weight_for`)."""
    if fusion.agreement_depth is not None and coverage is not None and lexical:
        near = {d for d, _ in vector[:fusion.agreement_depth]}
        coverage = coverage if lexical[0][0] in near else 0.0
    w = fusion.weight_for(specific, coverage)
    if fusion.method == "score":
        fused = score_fuse(vector, lexical, w)
    else:
        fused = rrf_fuse([[d for d, _ in vector], [d for d, _ in lexical]], k=fusion.rrf_k, weights=[1.0, w])
    return both_bests_first(fused, vector, lexical, fusion.disagreement_depth)


def both_bests_first(fused: Sequence[tuple[str, float]], vector: Sequence[tuple[str, float]],
                     lexical: Sequence[tuple[str, float]], depth: int | None) -> list[tuple[str, float]]:
    """When the two lists disagree (neither one's best is in the other's top ``depth``), the
    vector's best first and the lexical's best second, the rest in fused order.

    Disagreement is what a paraphrase looks like: its words are not the ones said, so BM25's best
    shares a word or two by chance, and the coverage weight can push the vector's right answer
    down to 2nd-4th. Keeping both bests on top bounds either mode's first hit at rank 2 whatever
    the weight did (measured on the long-chats dev half and the 4K paraphrase check:
    ``benchmarks/fusion_lab.py``). The two take the fused list's top score; order is by position."""
    out = list(fused)
    if depth is None or not vector or not lexical or len(out) < 2:
        return out
    v1, l1 = vector[0][0], lexical[0][0]
    if v1 in {d for d, _ in lexical[:depth]} or l1 in {d for d, _ in vector[:depth]}:
        return out
    top = out[0][1]
    rest = [x for x in out if x[0] not in (v1, l1)]
    return [(v1, top), (l1, top), *rest]


# ----------------------------------------------------------------------------- merging


@dataclass
class Span:
    """A candidate (or merged) passage: its chat, conversation, time span and members."""

    chunk_id: str  # the best-ranked member
    chat_id: str | None
    conversation: int | None
    start: datetime | None
    end: datetime | None
    score: float
    order: int  # rank of the best member in the fused list, 0-based
    chunk_ids: list[str] = field(default_factory=list)

    def overlaps(self, other: Span) -> bool:
        if self.chat_id is None or self.chat_id != other.chat_id or self.conversation != other.conversation:
            return False
        if None in (self.start, self.end, other.start, other.end):
            return False
        return self.start <= other.end and other.start <= self.end

    def absorb(self, other: Span) -> None:
        if other.order < self.order:
            self.chunk_id, self.score, self.order = other.chunk_id, other.score, other.order
        self.start = min(self.start, other.start)
        self.end = max(self.end, other.end)
        self.chunk_ids.extend(c for c in other.chunk_ids if c not in self.chunk_ids)


MAX_MERGED = 3  # windows per passage: 3 chained windows of 8 at stride 4 are 16 messages


def merge_overlapping(spans: Iterable[Span], max_members: int = MAX_MERGED) -> list[Span]:
    """Merge spans of one chat and conversation whose times intersect, transitively (windows
    A and C that touch only through B become one once B is seen), up to ``max_members`` windows
    per passage: a span that would grow a passage past that is dropped, since its messages
    overlap a passage already kept (without the cap, a search filtered to one contact chained
    ten windows of one long conversation into a 44-message "passage"). Returns the merged spans,
    best first (by their best member's order), each with its chunk ids best first."""
    groups: list[Span] = []
    rank: dict[str, int] = {}
    for span in spans:
        rank.setdefault(span.chunk_id, span.order)
        cur = Span(span.chunk_id, span.chat_id, span.conversation, span.start, span.end, span.score, span.order,
                   list(span.chunk_ids or [span.chunk_id]))
        touching = [g for g in groups if g.overlaps(cur)]
        while touching:
            if len(cur.chunk_ids) + sum(len(g.chunk_ids) for g in touching) > max_members:
                cur = None  # overlaps what is kept already; a longer passage would not read as one
                break
            for g in touching:
                groups.remove(g)
                cur.absorb(g)
            touching = [g for g in groups if g.overlaps(cur)]
        if cur is not None:
            groups.append(cur)
    for g in groups:
        g.chunk_ids.sort(key=lambda c: (rank.get(c, g.order), c))
    return sorted(groups, key=lambda g: g.order)


def merge_lines(texts: Sequence[str]) -> str:
    """The union of overlapping windows' lines, in order: each next text (later in the chat)
    adds the lines after its longest prefix that ends the text so far."""
    out: list[str] = []
    for text in texts:
        lines = text.split("\n") if text else []
        if not out:
            out = list(lines)
            continue
        overlap = 0
        for n in range(min(len(out), len(lines)), 0, -1):
            if out[-n:] == lines[:n]:
                overlap = n
                break
        out.extend(lines[overlap:])
    return "\n".join(out)


# ----------------------------------------------------------------------------- diversity


def mmr_order(relevance: Sequence[float], vectors: np.ndarray, lam: float, k: int) -> list[int]:
    """Maximal Marginal Relevance: indices of up to ``k`` items picked one by one, each
    maximizing ``lam * relevance - (1 - lam) * max cosine to the picked``.

    Args:
        relevance: per item, higher is better (min-max normalized here).
        vectors: ``(n, d)`` item embeddings (normalized here).
        lam: 1 is pure relevance order, 0 pure novelty.
    """
    import numpy as np  # here, so Settings reads the Fusion defaults without loading numpy

    n = len(relevance)
    if n == 0:
        return []
    rel = np.asarray(relevance, dtype=np.float64)
    span = rel.max() - rel.min()
    rel = (rel - rel.min()) / span if span > 1e-12 else np.ones(n)
    v = np.asarray(vectors, dtype=np.float64)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    picked: list[int] = []
    max_sim = np.full(n, -math.inf)
    left = np.ones(n, dtype=bool)
    while len(picked) < min(k, n):
        penalty = np.where(np.isfinite(max_sim), max_sim, 0.0)
        gain = np.where(left, lam * rel - (1 - lam) * penalty, -math.inf)
        i = int(np.argmax(gain))
        picked.append(i)
        left[i] = False
        max_sim = np.maximum(max_sim, v @ v[i])
    return picked
