"""Projection of chunk embeddings for the insights map: PCA to ~50 dims, then UMAP to 2-D and 3-D.

PCA first removes most of the noise dimensions cheaply (and is what UMAP's neighbour search runs
on, so it is ~8x less work than on 384/768 dims). UMAP then gives the 2-D layout the user sees
and clusters on, and a 3-D layout for the 3-D view.

Memory: a full corpus (~65K chunks) fits comfortably, but UMAP's fit cost grows with n. Above
``sample`` rows UMAP is fitted on a seeded random sample and the remaining rows are placed with
``UMAP.transform`` in blocks, so peak memory is bounded by the sample and one block.

Determinism: with a fixed ``seed`` the same input gives bit-identical output in the same
environment (checked in the tests and by the benchmark). umap-learn only guarantees that when
``random_state`` is set, which forces its numba code onto one thread (``n_jobs=1``).
``deterministic=False`` drops ``random_state`` and uses every core instead; layouts then differ
run to run, so cluster ids and label caches would churn on every re-materialization. On the
2-core dev machine (shared, load 10-40) the seeded run was not slower: at 65K synthetic chunks
(fit on 20K, transform 45K) UMAP 2-D + 3-D took 172 s seeded vs 223 s with ``n_jobs=-1``
(ratio 0.77), with the same clustering quality (ARI 0.945 vs 0.946). So seeded is the default.
umap-learn does not cache its numba kernels, so each new process compiled them again (8 s of a
700-message ingest's 19 s here); :mod:`.umap_cache` imports umap with numba's on-disk cache on,
so only the first process on a machine (or after an upgrade of umap) pays that.

Placement (:func:`nearest_neighbours`, :func:`neighbour_mean`) is the cheap path for a small
change: a new chunk goes to the similarity-weighted mean position of its k most similar already
projected chunks (cosine in embedding space). It is plain numpy (blocked matmul, bounded memory)
and never imports umap or numba.
"""

from __future__ import annotations


from brb_pipeline.core import SEED
from brb_pipeline.core.insights.params import ProjectionParams

import hashlib
import logging
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

# Rows placed per UMAP.transform call when n > sample (bounds the kNN query's memory).
TRANSFORM_BLOCK = 8192
# Bytes of one (query block, reference) float32 similarity matrix in :func:`nearest_neighbours`.
NEIGHBOUR_BLOCK_BYTES = 64 * 2**20
# Below this many rows UMAP is not meaningful (spectral init and the kNN graph degenerate):
# the layout is the leading PCA coordinates instead.
MIN_UMAP_ROWS = 4


@dataclass
class Projection:
    """Result of :func:`project`.

    Attributes:
        pca: (n, k) float32 PCA coordinates, k = min(pca_dim, n, dim).
        xy: (n, 2) float32 UMAP 2-D layout (arbitrary units).
        xyz: (n, 3) float32 UMAP 3-D layout (arbitrary units).
        explained_variance: sum of the kept components' explained variance ratios, in [0, 1].
        fitted_on: number of rows UMAP was fitted on (n, or the sample size when n > sample).
        seconds: wall-clock seconds per step: "pca", "umap_2d", "umap_3d".
        method: "umap", "umap-sampled" (fit on a sample, transform the rest), or "pca" (tiny n).
    """

    pca: np.ndarray
    xy: np.ndarray
    xyz: np.ndarray
    explained_variance: float
    fitted_on: int
    seconds: dict[str, float] = field(default_factory=dict)
    method: str = "umap"

    @property
    def n(self) -> int:
        return int(self.xy.shape[0])


def project(
    embeddings: np.ndarray,
    *,
    pca_dim: int = ProjectionParams.pca_dim,
    n_neighbors: int = ProjectionParams.n_neighbors,
    min_dist: float = ProjectionParams.min_dist,
    sample: int = ProjectionParams.sample,
    seed: int = SEED,
    deterministic: bool = True,
    transform_block: int = TRANSFORM_BLOCK,
) -> Projection:
    """Project embeddings to PCA space and to 2-D / 3-D UMAP layouts.

    Args:
        embeddings: (n, dim) float32, L2-normalized rows (dim 384 or 768).
        pca_dim: PCA components kept; clamped to min(n, dim).
        n_neighbors: UMAP neighbourhood size; clamped to n - 1 for small inputs.
        min_dist: UMAP minimum distance between embedded points.
        sample: largest number of rows UMAP is fitted on; beyond it a seeded sample is fitted
            and the other rows are placed with ``transform`` in blocks of ``transform_block``.
        seed: seeds PCA's randomized solver, the sample and UMAP.
        deterministic: pass ``random_state`` to UMAP (single-threaded, reproducible). False
            uses all cores and gives run-to-run different layouts.
        transform_block: rows per ``UMAP.transform`` call.

    Returns:
        A :class:`Projection`; n = 0 gives empty (0, k) arrays, n <= 3 a PCA-based layout.
    """
    x = np.asarray(embeddings, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"Projection - embeddings must be 2-D (n, dim), got shape {x.shape}")
    n, dim = x.shape
    bad = int(np.count_nonzero(~np.isfinite(x).all(axis=1))) if n else 0
    if bad:
        raise ValueError(f"Projection - {bad} of {n} embeddings contain NaN or inf; "
                         "re-run the embedding stage")
    seconds: dict[str, float] = {}

    t0 = time.perf_counter()
    pca, explained = _pca(x, pca_dim, seed)
    seconds["pca"] = time.perf_counter() - t0
    log.info("Projection - PCA %d -> %d dims on %d chunks, explained variance %.3f",
             dim, pca.shape[1], n, explained)

    if n < MIN_UMAP_ROWS:
        xy = _pad(pca, 2)
        xyz = _pad(pca, 3)
        seconds["umap_2d"] = seconds["umap_3d"] = 0.0
        return Projection(pca, xy, xyz, explained, n, seconds, method="pca")

    fit_idx = None
    if n > sample:
        rng = np.random.default_rng(seed)
        fit_idx = np.sort(rng.choice(n, size=sample, replace=False))
    fitted_on = n if fit_idx is None else int(fit_idx.size)

    layouts = {}
    for dims in (2, 3):
        t0 = time.perf_counter()
        layouts[dims] = _umap(pca, dims, n_neighbors, min_dist, seed, deterministic, fit_idx,
                              transform_block)
        seconds[f"umap_{dims}d"] = time.perf_counter() - t0
        log.info("Projection - UMAP %d -> %d on %d chunks (fitted on %d) in %.1f s",
                 pca.shape[1], dims, n, fitted_on, seconds[f"umap_{dims}d"])
    method = "umap" if fit_idx is None else "umap-sampled"
    return Projection(pca, layouts[2], layouts[3], explained, fitted_on, seconds, method=method)


def _pca(x: np.ndarray, pca_dim: int, seed: int) -> tuple[np.ndarray, float]:
    """PCA with the component count clamped for tiny inputs. Returns ((n, k) float32, ratio sum)."""
    n, dim = x.shape
    k = max(1, min(pca_dim, n, dim))
    if n < 2:
        # No variance to explain: centre the point (so it sits at the origin) and pad.
        return np.zeros((n, k), dtype=np.float32), 0.0
    from sklearn.decomposition import PCA

    model = PCA(n_components=k, random_state=seed)
    out = model.fit_transform(x).astype(np.float32, copy=False)
    explained = float(np.nansum(model.explained_variance_ratio_))
    return np.ascontiguousarray(out), explained


def _pad(a: np.ndarray, dims: int) -> np.ndarray:
    """First ``dims`` columns of ``a``, zero-padded when it has fewer. Returns (n, dims) float32."""
    out = np.zeros((a.shape[0], dims), dtype=np.float32)
    k = min(dims, a.shape[1])
    out[:, :k] = a[:, :k]
    return out


def _umap(pca: np.ndarray, dims: int, n_neighbors: int, min_dist: float, seed: int,
          deterministic: bool, fit_idx: np.ndarray | None, block: int) -> np.ndarray:
    """Fit UMAP (on ``pca[fit_idx]`` when given) and return the (n, dims) float32 layout."""
    from brb_pipeline.core.insights.umap_cache import import_umap

    umap = import_umap()  # lazily, and with its numba kernels cached across processes

    n = pca.shape[0]
    n_fit = n if fit_idx is None else fit_idx.size
    k = max(2, min(n_neighbors, n_fit - 1))
    kwargs = dict(
        n_components=dims,
        n_neighbors=k,
        min_dist=min_dist,
        metric="euclidean",  # PCA of unit vectors: euclidean ~ cosine, and faster
        # Spectral init needs a well-connected graph; tiny inputs fall back to random init.
        init="spectral" if n_fit >= 3 * k else "random",
        transform_seed=seed,
        low_memory=True,
    )
    if deterministic:
        kwargs["random_state"] = seed
    else:
        kwargs["n_jobs"] = -1
    reducer = umap.UMAP(**kwargs)
    with warnings.catch_warnings():
        # "n_jobs value 1 overridden to 1 by setting random_state" and small-graph warnings.
        warnings.simplefilter("ignore", UserWarning)
        if fit_idx is None:
            return np.asarray(reducer.fit_transform(pca), dtype=np.float32)
        out = np.empty((n, dims), dtype=np.float32)
        fitted = reducer.fit_transform(pca[fit_idx])
        out[fit_idx] = fitted
        rest = np.setdiff1d(np.arange(n), fit_idx, assume_unique=True)
        for start in range(0, rest.size, block):
            idx = rest[start:start + block]
            out[idx] = reducer.transform(pca[idx])
    return out


def embedding_fingerprints(embeddings: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each embedding row's bytes, to tell a re-embedded chunk from an unchanged one.

    Args:
        embeddings: (n, dim) float32.

    Returns:
        (n,) uint64; equal rows give equal values in every process.
    """
    x = np.ascontiguousarray(embeddings, dtype=np.float32)
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(row.tobytes(), digest_size=8).digest(), "little") for row in x),
        dtype=np.uint64, count=x.shape[0])


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (all-zero rows stay zero); ``x`` itself when already unit.

    Args:
        x: (n, dim) float array.

    Returns:
        (n, dim) float32.
    """
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True) if x.size else np.ones((x.shape[0], 1), np.float32)
    if np.allclose(norms, 1.0, atol=1e-4):
        return x
    return x / np.where(norms > 0, norms, 1.0)


def nearest_neighbours(
    reference: np.ndarray,
    queries: np.ndarray,
    k: int,
    *,
    allowed: np.ndarray | None = None,
    block_bytes: int = NEIGHBOUR_BLOCK_BYTES,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most cosine-similar reference rows of each query row, by blocked matmul.

    Queries are processed in blocks so one (block, n_ref) float32 similarity matrix stays under
    ``block_bytes``; nothing of size (n_queries, n_ref) is ever held.

    Args:
        reference: (n_ref, dim) float embeddings (normalized here if they are not unit rows).
        queries: (m, dim) float embeddings.
        k: neighbours per query; clamped to the number of allowed reference rows.
        allowed: optional (n_ref,) bool mask; only these reference rows can be neighbours.
        block_bytes: memory bound of one block's similarity matrix.

    Returns:
        (idx, sims): idx (m, k') int64 reference row numbers, most similar first; sims (m, k')
        float32 cosines; k' = min(k, allowed rows). k' = 0 when no reference row is allowed.
    """
    ref = unit_rows(reference)
    q = unit_rows(queries)
    n_ref = ref.shape[0]
    n_allowed = n_ref if allowed is None else int(np.count_nonzero(allowed))
    kk = max(0, min(int(k), n_allowed))
    m = q.shape[0]
    idx = np.zeros((m, kk), dtype=np.int64)
    sims = np.zeros((m, kk), dtype=np.float32)
    if m == 0 or kk == 0:
        return idx, sims
    blocked = None if allowed is None else ~np.asarray(allowed, dtype=bool)
    rows = max(1, int(block_bytes) // (4 * n_ref))
    for start in range(0, m, rows):
        s = q[start:start + rows] @ ref.T  # (b, n_ref)
        if blocked is not None:
            s[:, blocked] = -np.inf
        part = np.argpartition(-s, kk - 1, axis=1)[:, :kk]
        top = np.take_along_axis(s, part, axis=1)
        order = np.argsort(-top, axis=1, kind="stable")
        idx[start:start + rows] = np.take_along_axis(part, order, axis=1)
        sims[start:start + rows] = np.take_along_axis(top, order, axis=1)
    return idx, sims


def neighbour_mean(coords: np.ndarray, idx: np.ndarray, sims: np.ndarray) -> np.ndarray:
    """Similarity-weighted mean of the neighbours' coordinates (negative cosines weigh 0).

    Args:
        coords: (n_ref, d) float layout of the reference rows.
        idx: (m, k) int reference rows from :func:`nearest_neighbours`, k >= 1.
        sims: (m, k) float cosines of those rows.

    Returns:
        (m, d) float32; a plain mean where every weight is 0.
    """
    w = np.clip(np.asarray(sims, dtype=np.float64), 0.0, None)
    total = w.sum(axis=1, keepdims=True)
    w = np.where(total > 0, w / np.where(total > 0, total, 1.0), 1.0 / max(1, w.shape[1]))
    pts = np.asarray(coords, dtype=np.float64)[idx]  # (m, k, d)
    return np.einsum("mk,mkd->md", w, pts).astype(np.float32)
