"""Clustering: HDBSCAN + merge + noise reassignment, and stable ids across runs."""

from __future__ import annotations

import numpy as np
import pytest

from brb_pipeline.core.insights.clustering import (
    centroids,
    cluster,
    merge_similar,
    order_by_size,
    reassign_noise,
    stable_cluster_ids,
)


def _unit(*rows: list[float]) -> np.ndarray:
    x = np.asarray(rows, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# Four directions in 3-D: A and A' are nearly the same topic (cos ~0.995), B and C differ.
A, A2, B, C = [1, 0, 0], [1, 0.1, 0], [0, 1, 0], [0, 0, 1]


@pytest.mark.parametrize(
    "labels, vectors, threshold, expected, merged",
    [
        # A and A' merge at 0.9; B stays apart; noise untouched.
        ([0, 0, 1, 1, 2, -1], [A, A, A2, A2, B, C], 0.9, [0, 0, 0, 0, 2, -1], [(0, 1)]),
        # Threshold above their cosine: nothing merges.
        ([0, 0, 1, 1, 2, -1], [A, A, A2, A2, B, C], 0.999, [0, 0, 1, 1, 2, -1], []),
        # Transitive chain 5~3 and 3~9 (all near A): one group, smallest id wins.
        ([5, 3, 9, 1], [A, A2, [1, 0.2, 0], B], 0.97, [3, 3, 3, 1], [(3, 5), (3, 9)]),
        # A single cluster: nothing to merge.
        ([0, 0, -1], [A, A, B], 0.5, [0, 0, -1], []),
        # Everything noise.
        ([-1, -1], [A, B], 0.5, [-1, -1], []),
    ],
)
def test_merge_similar(labels, vectors, threshold, expected, merged):
    out, pairs = merge_similar(np.array(labels), _unit(*vectors), threshold)
    assert out.tolist() == expected
    assert pairs == merged


@pytest.mark.parametrize(
    "labels, vectors, threshold, expected",
    [
        # Noise near A joins 0; noise near B joins 1.
        ([0, 0, 1, -1, -1], [A, A, B, A2, [0.1, 1, 0]], 0.5, [0, 0, 1, 0, 1]),
        # Noise orthogonal to every centroid (C) stays noise.
        ([0, 1, -1], [A, B, C], 0.5, [0, 1, -1]),
        # Threshold > 1 disables reassignment.
        ([0, -1], [A, A], 1.01, [0, -1]),
        # No clusters at all: noise stays noise.
        ([-1, -1], [A, B], 0.0, [-1, -1]),
        # Equidistant between 0 and 1: the lower id wins (deterministic tie).
        ([0, 1, -1], [A, B, [1, 1, 0]], 0.5, [0, 1, 0]),
    ],
)
def test_reassign_noise(labels, vectors, threshold, expected):
    assert reassign_noise(np.array(labels), _unit(*vectors), threshold).tolist() == expected


def test_centroids_are_unit_and_sorted():
    ids, cents = centroids(np.array([4, -1, 2, 4]), _unit(A, B, B, A2))
    assert ids.tolist() == [2, 4]
    assert np.allclose(np.linalg.norm(cents, axis=1), 1.0)
    assert np.allclose(cents[0], _unit(B)[0])


def test_order_by_size_largest_first_noise_kept():
    assert order_by_size(np.array([7, 3, 3, -1, 7, 3, 9])).tolist() == [1, 0, 0, -1, 1, 0, 2]


def _blobs(seed: int = 0):
    """Three 2-D blobs, a stray noise point, and embeddings where blobs 0 and 1 share a topic."""
    rng = np.random.default_rng(seed)
    xy = np.concatenate([rng.normal((0, 0), 0.3, (40, 2)), rng.normal((10, 0), 0.3, (40, 2)),
                         rng.normal((0, 10), 0.3, (40, 2)), [[30.0, 30.0]]])
    topic = np.array([0] * 80 + [1] * 40 + [0])  # blobs 0+1 talk about topic 0; blob 2 topic 1
    dirs = _unit([1, 0, 0, 0], [0, 1, 0, 0])
    emb = dirs[topic] + rng.normal(0, 0.05, (121, 4))
    emb = (emb / np.linalg.norm(emb, axis=1, keepdims=True)).astype(np.float32)
    return xy, emb


def test_cluster_merges_topic_islands_and_reassigns_noise():
    xy, emb = _blobs()
    r = cluster(xy, emb, min_cluster_size=10, min_samples=3, merge_threshold=0.9,
                noise_threshold=0.5)
    assert r.hdbscan_clusters == 3 and r.n_clusters == 2
    assert len(r.merged) == 1
    # The stray point is noise to HDBSCAN but talks about topic 0: reassigned to the merged one.
    assert r.noise_before > 0 and r.noise_after == 0
    assert r.labels[120] == r.labels[0] == r.labels[40] == 0  # largest cluster is id 0
    assert set(r.labels[80:120].tolist()) == {1}
    again = cluster(xy, emb, min_cluster_size=10, min_samples=3, merge_threshold=0.9)
    assert np.array_equal(r.labels, again.labels)


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_cluster_tiny_inputs_are_noise(n):
    xy = np.arange(2 * n, dtype=float).reshape(n, 2)
    emb = _unit(*([A] * n)) if n else np.zeros((0, 3), np.float32)
    r = cluster(xy, emb, min_cluster_size=25)
    assert r.labels.shape == (n,) and (r.labels == -1).all() and r.n_clusters == 0


def test_cluster_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="embeddings have 2"):
        cluster(np.zeros((3, 2)), np.zeros((2, 4), np.float32))


def test_stable_ids_survive_a_small_data_change():
    rng = np.random.default_rng(1)
    ids = [f"chunk-{i}" for i in range(400)]
    old = rng.integers(0, 5, 400)
    old[:20] = -1
    old_ids = old + np.where(old >= 0, 10, 0)  # previous run used ids 10..14
    prev = dict(zip(ids, old_ids.tolist()))
    # New run: drop 5% of chunks, add 12 new ones forming a new cluster, new labels permuted
    # (clustering numbers them by size, so the raw ids mean nothing across runs).
    keep = np.sort(rng.choice(400, 380, replace=False))
    new_ids = [ids[i] for i in keep] + [f"new-{i}" for i in range(12)]
    perm = np.array([3, 0, 4, 1, 2])
    new_labels = np.concatenate([np.where(old[keep] >= 0, perm[np.maximum(old[keep], 0)], -1),
                                 np.full(12, 5)])
    out = stable_cluster_ids(prev, new_ids, new_labels)
    # Every surviving chunk keeps its old id; noise stays noise; the new cluster gets 15.
    assert out[:380].tolist() == old_ids[keep].tolist()
    assert set(out[380:].tolist()) == {15}


@pytest.mark.parametrize(
    "prev, labels, expected",
    [
        # No previous run: fresh ids from 0 in label order.
        ({}, [1, 1, 0, -1], [1, 1, 0, -1]),
        # Old cluster 7 split in two halves: at most one half keeps 7 (Jaccard 0.5), the other
        # gets a fresh id.
        ({"a": 7, "b": 7, "c": 7, "d": 7}, [0, 0, 1, 1], [7, 7, 8, 8]),
        # Overlap below min_overlap: fresh id above the old maximum.
        ({"a": 3, "b": 3, "c": 3, "d": 3}, [0, -1, -1, -1], [4, -1, -1, -1]),
    ],
)
def test_stable_ids_table(prev, labels, expected):
    out = stable_cluster_ids(prev, ["a", "b", "c", "d"], np.array(labels))
    assert out.tolist() == expected


def test_settings_map_to_keyword_arguments(tmp_path):
    import dataclasses

    from brb_pipeline.config.settings import Settings

    s = Settings(home=tmp_path, umap_sample=500, merge_threshold=0.8, seed=3)
    assert dataclasses.asdict(s.projection) == {"pca_dim": 50, "n_neighbors": 15, "min_dist": 0.05,
                                    "sample": 500, "seed": 3}
    assert dataclasses.asdict(s.clustering) == {"min_cluster_size": 25, "min_samples": 5,
                                 "merge_threshold": 0.8, "noise_threshold": 0.5, "seed": 3}
