"""Insights clusters: HDBSCAN on the 2-D layout, merging, noise reassignment, stable ids.

HDBSCAN runs on the 2-D UMAP layout so the clusters are the blobs the user sees. Two
corrections then run in embedding space, where similarity means "talks about the same thing":

1. :func:`merge_similar` joins clusters whose (normalized) centroids have cosine >= a threshold.
   UMAP often tears one topic into neighbouring islands; merging is transitive (single linkage
   over centroid pairs), so A~B and B~C puts A, B and C together.
2. :func:`reassign_noise` gives each noise point (-1) the cluster whose centroid it is most
   similar to, if that cosine clears a threshold; the rest stays noise.

:func:`stable_cluster_ids` keeps cluster ids steady across runs when the data changes a little,
so labels, caches and a user's memory of "cluster 7" survive a re-ingest.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)


@dataclass
class ClusterResult:
    """Result of :func:`cluster`.

    Attributes:
        labels: (n,) int64 cluster ids 0..n_clusters-1, -1 for points that stayed noise.
            Ids are ordered by cluster size (0 is the largest; ties by first member).
        noise_before: share of points HDBSCAN left as noise, in [0, 1].
        noise_after: share still noise after reassignment, in [0, 1].
        merged: pairs (a, b) of HDBSCAN cluster ids that were merged (a < b, as found).
        n_clusters: number of clusters after merging.
        hdbscan_clusters: number of clusters HDBSCAN found before merging.
    """

    labels: np.ndarray
    noise_before: float
    noise_after: float
    merged: list[tuple[int, int]] = field(default_factory=list)
    n_clusters: int = 0
    hdbscan_clusters: int = 0


def cluster(
    xy: np.ndarray,
    embeddings: np.ndarray,
    *,
    min_cluster_size: int = 25,
    min_samples: int = 5,
    merge_threshold: float = 0.92,
    noise_threshold: float = 0.5,
    seed: int = 42,
) -> ClusterResult:
    """HDBSCAN on the layout, then merge similar clusters and reassign noise.

    Args:
        xy: (n, 2) float layout (UMAP units) that HDBSCAN clusters.
        embeddings: (n, dim) float32 L2-normalized embeddings (similarity for merge/noise).
        min_cluster_size: HDBSCAN's smallest cluster; clamped to n for tiny inputs.
        min_samples: HDBSCAN's density smoothing; clamped to min_cluster_size.
        merge_threshold: centroid cosine at or above which two clusters merge.
        noise_threshold: centroid cosine at or above which a noise point joins a cluster.
        seed: accepted for interface symmetry; HDBSCAN itself has no randomness.

    Returns:
        A :class:`ClusterResult`.
    """
    del seed  # HDBSCAN (exact, tree-based) is deterministic for a given input order.
    xy = np.asarray(xy, dtype=np.float64)
    emb = np.asarray(embeddings, dtype=np.float32)
    n = xy.shape[0]
    if emb.shape[0] != n:
        raise ValueError(f"Clustering - layout has {n} rows but embeddings have {emb.shape[0]}")
    if n == 0:
        return ClusterResult(np.empty(0, dtype=np.int64), 0.0, 0.0)

    raw = _hdbscan(xy, min_cluster_size, min_samples)
    found = int(raw.max()) + 1 if raw.size else 0
    noise_before = float(np.mean(raw < 0))
    merged_labels, merged = merge_similar(raw, emb, merge_threshold)
    labels = reassign_noise(merged_labels, emb, noise_threshold)
    labels = order_by_size(labels)
    n_clusters = int(labels.max()) + 1 if labels.size and labels.max() >= 0 else 0
    noise_after = float(np.mean(labels < 0))
    log.info("Clustering - %d chunks: HDBSCAN %d clusters (%.1f%% noise), %d merges, "
             "%d clusters (%.1f%% noise after reassignment)", n, found, 100 * noise_before,
             len(merged), n_clusters, 100 * noise_after)
    return ClusterResult(labels, noise_before, noise_after, merged, n_clusters, found)


def _hdbscan(xy: np.ndarray, min_cluster_size: int, min_samples: int) -> np.ndarray:
    """HDBSCAN labels (n,) int64 for a (n, 2) layout; all noise when n is below the cluster size."""
    n = xy.shape[0]
    mcs = max(2, min(int(min_cluster_size), n))
    ms = max(1, min(int(min_samples), mcs))
    if n < 3 or n < mcs:
        return np.full(n, -1, dtype=np.int64)
    import hdbscan

    model = hdbscan.HDBSCAN(min_cluster_size=mcs, min_samples=ms, core_dist_n_jobs=1)
    return np.asarray(model.fit_predict(xy), dtype=np.int64)


def centroids(labels: np.ndarray, embeddings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Normalized mean embedding of each cluster.

    Args:
        labels: (n,) int cluster ids, -1 for noise (ids need not be contiguous).
        embeddings: (n, dim) float embeddings.

    Returns:
        (ids, cents): ids (k,) sorted cluster ids >= 0; cents (k, dim) float32 unit rows.
    """
    labels = np.asarray(labels)
    ids = np.unique(labels[labels >= 0])
    if ids.size == 0:
        return ids.astype(np.int64), np.zeros((0, embeddings.shape[1]), dtype=np.float32)
    pos = np.searchsorted(ids, labels[labels >= 0])
    sums = np.zeros((ids.size, embeddings.shape[1]), dtype=np.float64)
    np.add.at(sums, pos, embeddings[labels >= 0])
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    cents = (sums / np.where(norms > 0, norms, 1.0)).astype(np.float32)
    return ids.astype(np.int64), cents


def merge_similar(labels: np.ndarray, embeddings: np.ndarray,
                  threshold: float) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Merge clusters whose centroids have cosine >= ``threshold``, transitively.

    Each merged group takes the smallest member id; noise (-1) is untouched. Deterministic:
    pairs are visited in (a, b) order.

    Args:
        labels: (n,) int cluster ids, -1 for noise.
        embeddings: (n, dim) float L2-normalized embeddings.
        threshold: cosine in [-1, 1]; > 1 disables merging.

    Returns:
        (new_labels (n,) int64, merged pairs [(a, b), ...] of original ids that were joined).
    """
    labels = np.asarray(labels, dtype=np.int64)
    ids, cents = centroids(labels, embeddings)
    out = labels.copy()
    if ids.size < 2:
        return out, []
    sims = cents @ cents.T
    parent = list(range(ids.size))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    merged: list[tuple[int, int]] = []
    rows, cols = np.nonzero(np.triu(sims >= threshold, k=1))
    for a, b in sorted(zip(rows.tolist(), cols.tolist())):
        ra, rb = find(a), find(b)
        if ra == rb:
            continue
        parent[max(ra, rb)] = min(ra, rb)
        merged.append((int(ids[a]), int(ids[b])))
    root_id = np.array([ids[find(i)] for i in range(ids.size)], dtype=np.int64)
    mask = labels >= 0
    out[mask] = root_id[np.searchsorted(ids, labels[mask])]
    return out, merged


def reassign_noise(labels: np.ndarray, embeddings: np.ndarray, threshold: float) -> np.ndarray:
    """Give noise points the most similar cluster when the centroid cosine >= ``threshold``.

    Centroids are computed once from the clustered points (reassigned points do not move them),
    so the result does not depend on the order of noise points.

    Args:
        labels: (n,) int cluster ids, -1 for noise.
        embeddings: (n, dim) float L2-normalized embeddings.
        threshold: cosine in [-1, 1]; > 1 disables reassignment.

    Returns:
        (n,) int64 labels; points below the threshold (or with no cluster at all) stay -1.
    """
    labels = np.asarray(labels, dtype=np.int64)
    out = labels.copy()
    noise = np.flatnonzero(labels < 0)
    ids, cents = centroids(labels, embeddings)
    if noise.size == 0 or ids.size == 0:
        return out
    for start in range(0, noise.size, 8192):  # bound the (block, k) similarity matrix
        idx = noise[start:start + 8192]
        sims = np.asarray(embeddings[idx], dtype=np.float32) @ cents.T
        best = np.argmax(sims, axis=1)  # first max on ties: lowest id wins
        ok = sims[np.arange(idx.size), best] >= threshold
        out[idx[ok]] = ids[best[ok]]
    return out


def order_by_size(labels: np.ndarray) -> np.ndarray:
    """Renumber clusters 0..k-1 by decreasing size (ties: earliest first member); -1 stays.

    Args:
        labels: (n,) int cluster ids, -1 for noise.

    Returns:
        (n,) int64 relabelled ids.
    """
    labels = np.asarray(labels, dtype=np.int64)
    out = np.full(labels.shape, -1, dtype=np.int64)
    ids, first, counts = np.unique(labels, return_index=True, return_counts=True)
    keep = ids >= 0
    ids, first, counts = ids[keep], first[keep], counts[keep]
    order = np.lexsort((first, -counts))
    remap = {int(ids[j]): new for new, j in enumerate(order)}
    for old, new in remap.items():
        out[labels == old] = new
    return out


def stable_cluster_ids(
    prev: Mapping[str, int],
    chunk_ids: Sequence[str],
    labels: np.ndarray,
    *,
    min_overlap: float = 0.5,
) -> np.ndarray:
    """Carry cluster ids over from a previous run when membership mostly persists.

    Old and new clusters are matched one-to-one by maximum total Jaccard overlap (Hungarian
    assignment), counting only old members that still exist (deleted chunks cannot be in any new
    cluster, so they should not count against it). A matched pair with Jaccard >= ``min_overlap``
    keeps the old id; other new clusters get fresh ids above the largest old id, in order of
    their current label. Noise (-1) stays -1.

    Args:
        prev: chunk id -> previous cluster id (-1 noise entries allowed, ignored).
        chunk_ids: (n,) chunk ids of the current run, aligned with ``labels``.
        labels: (n,) int current cluster ids, -1 for noise.
        min_overlap: smallest Jaccard overlap in (0, 1] for a new cluster to keep an old id.

    Returns:
        (n,) int64 cluster ids.
    """
    from scipy.optimize import linear_sum_assignment

    labels = np.asarray(labels, dtype=np.int64)
    if len(chunk_ids) != labels.shape[0]:
        raise ValueError(f"Clustering - {len(chunk_ids)} chunk ids but {labels.shape[0]} labels")
    out = np.full(labels.shape, -1, dtype=np.int64)
    new_ids = np.unique(labels[labels >= 0])
    if new_ids.size == 0:
        return out
    old_of = np.array([int(prev.get(cid, -1)) for cid in chunk_ids], dtype=np.int64)
    old_ids = np.unique(old_of[old_of >= 0])
    assigned: dict[int, int] = {}
    if old_ids.size:
        # Contingency table over current chunks: inter[i, j] = |new_i ∩ old_j|.
        both = (labels >= 0) & (old_of >= 0)
        ni = np.searchsorted(new_ids, labels[both])
        oj = np.searchsorted(old_ids, old_of[both])
        inter = np.zeros((new_ids.size, old_ids.size), dtype=np.int64)
        np.add.at(inter, (ni, oj), 1)
        new_size = np.array([(labels == c).sum() for c in new_ids], dtype=np.int64)
        old_size = np.array([(old_of == c).sum() for c in old_ids], dtype=np.int64)
        union = new_size[:, None] + old_size[None, :] - inter
        jac = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
        rows, cols = linear_sum_assignment(-jac)
        for r, c in zip(rows.tolist(), cols.tolist()):
            if jac[r, c] >= min_overlap and jac[r, c] > 0:
                assigned[int(new_ids[r])] = int(old_ids[c])
    all_old = [int(v) for v in prev.values() if int(v) >= 0]
    next_id = max(all_old) + 1 if all_old else 0
    for c in new_ids.tolist():
        if c not in assigned:
            assigned[c] = next_id
            next_id += 1
    for c, target in assigned.items():
        out[labels == c] = target
    kept = sum(1 for c in new_ids.tolist() if assigned[c] < (max(all_old) + 1 if all_old else 0))
    log.info("Clustering - stable ids: %d of %d clusters kept their previous id", kept,
             new_ids.size)
    return out


def vote_by_neighbours(neighbour_labels: np.ndarray, sims: np.ndarray) -> np.ndarray:
    """Each row's most frequent neighbour cluster, noise (-1) included as a candidate.

    Used to give a newly placed chunk the cluster of the chunks it was placed among. Ties go to
    the candidate with the larger summed (non-negative) similarity, then to the lower id, so noise
    wins an exact tie.

    Args:
        neighbour_labels: (m, k) int cluster ids of each row's neighbours, -1 for noise.
        sims: (m, k) float cosines of those neighbours.

    Returns:
        (m,) int64 cluster ids; -1 where the plurality of neighbours is noise (or k = 0).
    """
    lab = np.asarray(neighbour_labels, dtype=np.int64)
    m = lab.shape[0]
    if m == 0 or lab.ndim != 2 or lab.shape[1] == 0:
        return np.full(m, -1, dtype=np.int64)
    k = lab.shape[1]
    cand, inv = np.unique(lab, return_inverse=True)  # cand sorted: -1 (if present) first
    inv = inv.reshape(lab.shape)
    flat = np.arange(m)[:, None] * cand.size + inv
    counts = np.bincount(flat.ravel(), minlength=m * cand.size).reshape(m, cand.size)
    w = np.clip(np.asarray(sims, dtype=np.float64), 0.0, 1.0)
    wsum = np.bincount(flat.ravel(), weights=w.ravel(), minlength=m * cand.size).reshape(m, cand.size)
    score = counts + wsum / (k + 1)  # the weight term is < 1: it only breaks count ties
    return cand[np.argmax(score, axis=1)].astype(np.int64)
