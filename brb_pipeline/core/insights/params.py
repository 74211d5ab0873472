"""The layout's and the clustering's parameters, apart from :mod:`.projection` and
:mod:`.clustering` so that reading settings imports no numpy, UMAP or HDBSCAN."""

from __future__ import annotations

from dataclasses import dataclass

from brb_pipeline.core import SEED


@dataclass(frozen=True)
class ProjectionParams:
    """The layout's parameters (the ``pca_dim``, ``umap_neighbors``, ``umap_min_dist``,
    ``umap_sample`` and ``seed`` settings), named as :func:`project` takes them."""

    pca_dim: int = 50
    n_neighbors: int = 15
    min_dist: float = 0.05
    sample: int = 20000
    seed: int = SEED


@dataclass(frozen=True)
class ClusterParams:
    """The clustering's parameters (the ``hdbscan_min_cluster_size``, ``hdbscan_min_samples``,
    ``merge_threshold``, ``noise_reassign_threshold`` and ``seed`` settings), as :func:`cluster`
    takes them."""

    min_cluster_size: int = 25
    min_samples: int = 5
    merge_threshold: float = 0.92
    noise_threshold: float = 0.5
    seed: int = SEED
