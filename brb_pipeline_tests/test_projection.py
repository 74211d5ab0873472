"""Projection: shapes, determinism, the sample-then-transform path, tiny inputs."""

from __future__ import annotations

import numpy as np
import pytest

from brb_pipeline.core.insights.projection import project


def _sphere(n: int, dim: int = 64, k: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(n, dim) unit vectors around k random centres, and their (n,) centre labels."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, dim))
    labels = rng.integers(0, k, n)
    x = centres[labels] + rng.normal(size=(n, dim)) * 0.08
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), labels


def test_shapes_and_explained_variance():
    x, _ = _sphere(120)
    p = project(x, pca_dim=10, n_neighbors=8)
    assert p.pca.shape == (120, 10) and p.xy.shape == (120, 2) and p.xyz.shape == (120, 3)
    assert p.xy.dtype == np.float32 and np.isfinite(p.xy).all() and np.isfinite(p.xyz).all()
    # 4 tight clusters: 10 components explain nearly everything, and never more than 1.
    assert 0.5 < p.explained_variance <= 1.0 + 1e-6
    assert p.fitted_on == 120 and p.method == "umap"
    assert set(p.seconds) == {"pca", "umap_2d", "umap_3d"}


def test_same_seed_same_layout_and_clusters_stay_apart():
    x, labels = _sphere(120)
    a = project(x, pca_dim=10, n_neighbors=8, seed=7)
    b = project(x, pca_dim=10, n_neighbors=8, seed=7)
    assert np.array_equal(a.xy, b.xy) and np.array_equal(a.xyz, b.xyz)
    # Layout keeps the known groups apart: each point's nearest 2-D neighbour shares its group.
    d = np.linalg.norm(a.xy[:, None, :] - a.xy[None, :, :], axis=2)
    np.fill_diagonal(d, np.inf)
    assert np.mean(labels[np.argmin(d, axis=1)] == labels) > 0.95


def test_sample_then_transform_path_places_every_row():
    x, labels = _sphere(150)
    # 90 rows to place in blocks of 32: three transform calls.
    p = project(x, pca_dim=10, n_neighbors=8, sample=60, seed=3, transform_block=32)
    assert p.method == "umap-sampled" and p.fitted_on == 60
    assert p.xy.shape == (150, 2) and p.xyz.shape == (150, 3)
    assert np.isfinite(p.xy).all() and np.isfinite(p.xyz).all()
    # Transformed rows land next to fitted rows of their own group.
    d = np.linalg.norm(p.xy[:, None, :] - p.xy[None, :, :], axis=2)
    np.fill_diagonal(d, np.inf)
    assert np.mean(labels[np.argmin(d, axis=1)] == labels) > 0.9
    q = project(x, pca_dim=10, n_neighbors=8, sample=60, seed=3, transform_block=32)
    assert np.array_equal(p.xy, q.xy)


@pytest.mark.parametrize(
    "n, method",
    [
        (0, "pca"),  # empty store: empty arrays
        (1, "pca"),  # one chunk: at the origin
        (3, "pca"),  # below UMAP's minimum: PCA coordinates
        (5, "umap"),  # fewer than n_neighbors + 2: neighbours clamped, random init
        (16, "umap"),  # exactly n_neighbors + 1
    ],
)
def test_tiny_inputs(n, method):
    x, _ = _sphere(n, k=2)
    p = project(x, n_neighbors=15)
    assert p.method == method
    assert p.xy.shape == (n, 2) and p.xyz.shape == (n, 3) and p.pca.shape[0] == n
    assert np.isfinite(p.xy).all() and np.isfinite(p.xyz).all()
    if n == 1:
        assert np.array_equal(p.xy, np.zeros((1, 2), dtype=np.float32))
    if n >= 3:
        assert np.ptp(p.xy[:, 0]) > 0  # distinct points are not all stacked on one spot


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="must be 2-D"):
        project(np.zeros(5, dtype=np.float32))
    x, _ = _sphere(10)
    x[3, 0] = np.nan
    with pytest.raises(ValueError, match="1 of 10 embeddings contain NaN or inf"):
        project(x)


def test_end_to_end_ids_survive_a_small_data_change():
    """project -> cluster -> stable ids, then drop 5% of chunks, add a few, and redo it all."""
    from brb_pipeline.core.insights.clustering import cluster, stable_cluster_ids

    x, _ = _sphere(200, k=4, seed=5)
    ids = [f"c{i}" for i in range(200)]
    first = cluster(project(x, pca_dim=10, n_neighbors=10).xy, x, min_cluster_size=15)
    assert first.n_clusters == 4
    prev = dict(zip(ids, stable_cluster_ids({}, ids, first.labels).tolist()))

    rng = np.random.default_rng(9)
    keep = np.sort(rng.choice(200, 190, replace=False))
    extra = x[:6] + rng.normal(0, 0.01, (6, x.shape[1])).astype(np.float32)
    extra /= np.linalg.norm(extra, axis=1, keepdims=True)
    x2 = np.concatenate([x[keep], extra])
    ids2 = [ids[i] for i in keep] + [f"new{i}" for i in range(6)]
    second = cluster(project(x2, pca_dim=10, n_neighbors=10, seed=1).xy, x2, min_cluster_size=15)
    stable = stable_cluster_ids(prev, ids2, second.labels)
    kept = np.array([prev[c] for c in ids2[:190]])
    assert np.mean(stable[:190] == kept) > 0.95  # survivors keep their cluster id
    assert set(stable.tolist()) <= set(prev.values())  # no spurious new clusters
