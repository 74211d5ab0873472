"""Sub-topics of big clusters: the map's second label level, shown when you zoom in.

Each of the ``max_clusters`` biggest clusters with at least ``min_size`` chunks is split on the
2-D layout (k-means, 2-5 parts, about one per ``per_part`` chunks). Each part is labelled as the
clusters are (:mod:`~brb_pipeline.core.insights.labels`): c-TF-IDF candidates contrasted with its
siblings only, then, when a re-rank (an
:class:`~brb_pipeline.core.insights.labels.EmbeddingLabeler`) is given, those candidates re-ranked
by closeness to the part's centroid minus the parent cluster's centroid, so the label says what
sets that corner apart ("flights", "visa"). Words of the parent's label, people's names, chat
filler and file tokens are never sub-topic words. Deterministic (seeded).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl

from brb_pipeline.core import SEED
from brb_pipeline.core.insights.labels.base import ClusterDocs, ClusterLabel
from brb_pipeline.core.insights.labels.ctfidf import TfidfLabeler, _stem, label_phrase
from brb_pipeline.core.insights.labels.embed import representatives
from brb_pipeline.core.insights.labels.text import normalize_case

#: Words of a sub-topic label (the parent's label says the rest).
LABEL_TERMS = 2
#: c-TF-IDF candidates per part, as the cluster labels' re-rank reads.
CANDIDATES = 30
#: How the map splits: clusters of MIN_SIZE+ chunks, the MAX_CLUSTERS biggest, into about one part
#: per PER_PART chunks (2 to MAX_PARTS).
MIN_SIZE, PER_PART, MAX_PARTS, MAX_CLUSTERS = 48, 150, 5, 12


@dataclass
class _Part:
    """One part of a split cluster: its parent, its rows in ``points`` and what a labeler sees."""

    cluster_id: int
    rows: np.ndarray
    docs: ClusterDocs
    base: ClusterLabel


def subtopics(points: pl.DataFrame, *, min_size: int = MIN_SIZE, per_part: int = PER_PART,
              max_parts: int = MAX_PARTS, max_clusters: int = MAX_CLUSTERS, docs_per_part: int = 200, names: Iterable[str] = (),
              seed: int = SEED, rerank: Any | None = None, embeddings: np.ndarray | None = None,
              embedding_model: str | None = None) -> list[dict[str, Any]]:
    """Sub-topic labels of the big clusters of ``points``.

    Args:
        points: one row per chunk with ``x``, ``y``, ``cluster_id`` and ``content`` (the chunk
            text; only read here, never returned); ``label`` (the cluster's) when there is one:
            its words are not repeated.
        min_size: smallest cluster that is split.
        per_part: chunks per part, roughly (2 parts at least, ``max_parts`` at most).
        max_clusters: only the biggest clusters are split (the ones a zoom makes room for).
        docs_per_part: chunks read per part at most (a seeded sample): bounds the time at 64K
            chunks.
        names: people's names, never label words (each chunk's senders are dropped anyway).
        seed: seeds k-means and the samples.
        rerank: a refiner (``refine(docs, base)``, e.g. an ``EmbeddingLabeler`` with
            ``label_terms=2``) run once over every part; None keeps the c-TF-IDF order.
        embeddings: (len(points), dim) stored embeddings in ``points``' row order, or None: the
            parts' centroids and representative chunks then come from them, else the re-rank
            embeds the chunks nearest each part's middle on the layout.
        embedding_model: the model id of ``embeddings`` (the re-rank uses them only when it is
            its own).

    Returns:
        ``[{"cluster_id", "label", "x", "y", "n", "top", "bottom", "left", "right"}]``: one per
        part that got a label (a part none of whose words is left after the filters, e.g. only
        names and links, gets none), ``x, y`` the part's median position in the layout, ``top,
        bottom, left, right`` its 95th/5th percentile y and 5th/95th percentile x (where a label
        off its points can go), ``n`` its chunks; biggest clusters first.
    """
    if not {"x", "y", "cluster_id", "content"} <= set(points.columns) or points.height == 0:
        return []
    names = list(names)
    parts = _split(points, min_size, per_part, max_parts, max_clusters, seed)
    if not parts:
        return []
    xy = points.select("x", "y").to_numpy()
    emb = None if embeddings is None or len(embeddings) != points.height else np.asarray(embeddings)
    texts = points["content"].to_list()
    parents = _parent_words(points)
    labelled: list[_Part] = []
    rng = np.random.default_rng(seed)
    for cid, group in _by_cluster(parts):
        docs = [_docs(i, texts, xy, emb, rows, embedding_model, seed) for i, rows in enumerate(group)]
        # The rest of the map as one more class: words every chat says ("chat", "love") lose there.
        rest = np.flatnonzero(points["cluster_id"].to_numpy() != cid)
        rest = np.sort(rng.choice(rest, min(rest.size, 2 * docs_per_part), replace=False))
        base = TfidfLabeler(n_terms=CANDIDATES, label_terms=LABEL_TERMS, names=names, seed=seed,
                            max_docs=docs_per_part).label(docs + [ClusterDocs(-1, [texts[r] for r in rest])])
        if emb is not None:  # a part against its parent: what sets this corner apart
            parent = emb[np.concatenate(group)].mean(axis=0)
            for d in docs:
                d.corpus_mean = parent
        keep = _term_filter(parents.get(cid, set()))
        for rows, d, lab in zip(group, docs, base):
            terms = [t for t in lab.terms if keep(t)]
            labelled.append(_Part(cid, rows, d, ClusterLabel(
                d.cluster_id, label_phrase(terms, LABEL_TERMS), terms, lab.source)))
    labels = _rerank(rerank, labelled)
    return _placed(labelled, labels, xy)


def _split(points: pl.DataFrame, min_size: int = MIN_SIZE, per_part: int = PER_PART,
           max_parts: int = MAX_PARTS, max_clusters: int = MAX_CLUSTERS,
           seed: int = SEED) -> list[tuple[int, np.ndarray]]:
    """(cluster id, row indices of one part) for every part of every split cluster, biggest
    clusters first, parts in k-means order; the defaults are the map's (``judge_subtopics.py``
    splits as the map does by calling this with none given)."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    cids = points["cluster_id"].to_numpy()
    xy = points.select("x", "y").to_numpy()
    sizes = points.filter(pl.col("cluster_id") >= 0).group_by("cluster_id").len().sort(
        ["len", "cluster_id"], descending=[True, False])
    out: list[tuple[int, np.ndarray]] = []
    for cid, size in sizes.head(max_clusters).iter_rows():
        if size < min_size:
            break
        rows = np.flatnonzero(cids == cid)
        k = int(min(max_parts, max(2, round(size / per_part))))
        pts = xy[rows]
        # Fitted on the cluster's body: a few far-out members would otherwise be a part of their own.
        dist = np.linalg.norm(pts - np.median(pts, axis=0), axis=1)
        body = pts[dist <= np.quantile(dist, 0.9)]
        with threadpool_limits(1, user_api="openmp"):  # a few thousand points: threads only wait
            centres = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(body).cluster_centers_
        assign = _nearest(pts, centres, min_part=max(8, size // (4 * k)))
        out += [(int(cid), rows[assign == j]) for j in range(k) if (assign == j).any()]
    return out


def _nearest(pts: np.ndarray, centres: np.ndarray, min_part: int) -> np.ndarray:
    """Each point's nearest centre, leaving out centres with fewer than ``min_part`` points (their
    points go to the next nearest), so no part is a handful of stragglers."""
    d = ((pts[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
    alive = np.ones(len(centres), dtype=bool)
    while True:
        assign = np.where(alive[None, :], d, np.inf).argmin(axis=1)
        counts = np.bincount(assign, minlength=len(centres))
        small = alive & (counts < min_part)
        if not small.any() or alive.sum() <= 1:
            return assign
        alive[np.flatnonzero(small)[np.argmin(counts[small])]] = False  # the smallest goes first


def _by_cluster(parts: list[tuple[int, np.ndarray]]) -> list[tuple[int, list[np.ndarray]]]:
    """Parts grouped by their cluster, in order."""
    groups: dict[int, list[np.ndarray]] = {}
    for cid, rows in parts:
        groups.setdefault(cid, []).append(rows)
    return list(groups.items())


def _docs(i: int, texts: list[str], xy: np.ndarray, emb: np.ndarray | None, rows: np.ndarray,
          model: str | None, seed: int, n_reps: int = 8) -> ClusterDocs:
    """What a labeler sees of one part: its texts, its representative chunks (nearest its
    centroid, then diverse, with embeddings; else nearest its middle on the layout) and centroid."""
    if emb is not None:
        reps = rows[representatives(emb[rows], np.zeros(rows.size, np.int64), 0, n_reps, seed)]
        centroid = emb[rows].mean(axis=0)
    else:
        mid = np.median(xy[rows], axis=0)
        reps = rows[np.argsort(((xy[rows] - mid) ** 2).sum(axis=1), kind="stable")[:n_reps]]
        centroid = None
    return ClusterDocs(i, [texts[r] for r in rows], [texts[r] for r in reps], centroid=centroid,
                       centroid_model=model if emb is not None else None)


def _parent_words(points: pl.DataFrame) -> dict[int, set[str]]:
    """Each cluster's label words (lower-cased, plural-folded), which its sub-topics leave out."""
    if "label" not in points.columns:
        return {}
    out: dict[int, set[str]] = {}
    for cid, label in points.select("cluster_id", "label").unique().iter_rows():
        words = normalize_case(str(label or "")).replace("·", " ").split()
        out.setdefault(int(cid), set()).update(_stem(w.strip(".,;:!?'\"()")) for w in words)
    return out


def _term_filter(parent: set[str]) -> Any:
    """A test for a sub-topic candidate: no word of the parent's label. (Names, stop words and
    filler never become candidates: the c-TF-IDF tokenizer drops them.)"""

    def keep(term: str) -> bool:
        words = normalize_case(term).split()
        return bool(words) and not any(_stem(w) in parent for w in words)
    return keep


def _rerank(rerank: Any | None, parts: list[_Part]) -> list[ClusterLabel]:
    """Every part's label: the re-rank's (one call for all parts, so one embedding batch), the
    c-TF-IDF one where it declines or has nothing; sibling labels kept distinct."""
    docs = [replace(p.docs, cluster_id=i) for i, p in enumerate(parts)]  # one id space for one call
    base = [replace(p.base, cluster_id=i) for i, p in enumerate(parts)]
    labels = base
    if rerank is not None and any(b.terms for b in base):
        refined = rerank.refine(docs, base)
        labels = [b if r is None or not r.label else r for b, r in zip(base, refined)]
    seen: dict[int, set[str]] = {}
    out = []
    for p, lab in zip(parts, labels):
        taken = seen.setdefault(p.cluster_id, set())
        if lab.label and lab.label.lower() in taken:  # a sibling says it already: the next terms
            rest = [t for t in lab.terms if t.lower() not in {w for s in taken for w in s.split(" · ")}]
            lab = ClusterLabel(lab.cluster_id, label_phrase(rest, LABEL_TERMS), rest, lab.source)
        if lab.label:
            taken.add(lab.label.lower())
        out.append(lab)
    return out


def _placed(parts: list[_Part], labels: list[ClusterLabel], xy: np.ndarray) -> list[dict[str, Any]]:
    """The page's rows: a part's label, size, median position and extent."""
    out = []
    for p, lab in zip(parts, labels):
        if not lab.label:
            continue
        pxy = xy[p.rows]
        (left, bottom), (right, top) = np.percentile(pxy, 5, axis=0), np.percentile(pxy, 95, axis=0)
        out.append({"cluster_id": p.cluster_id, "label": lab.label, "n": int(p.rows.size),
                    "x": float(np.median(pxy[:, 0])), "y": float(np.median(pxy[:, 1])),
                    "top": float(top), "bottom": float(bottom), "left": float(left),
                    "right": float(right)})
    return out
