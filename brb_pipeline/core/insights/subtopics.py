"""Sub-topics of big clusters: the map's second label level, shown when you zoom in.

Each of the ``max_clusters`` biggest clusters with at least ``min_size`` chunks is split on the 2-D layout (k-means, 2-5 parts, about
one per ``per_part`` chunks), and each part gets a short c-TF-IDF label contrasted with its
siblings only, so it says what sets that corner of the cluster apart ("flights", "visa").
Deterministic (seeded); no model needed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import polars as pl

from brb_pipeline.core import SEED
from brb_pipeline.core.insights.labels.base import ClusterDocs
from brb_pipeline.core.insights.labels.ctfidf import TfidfLabeler


def subtopics(points: pl.DataFrame, *, min_size: int = 120, per_part: int = 150, max_parts: int = 5,
              max_clusters: int = 12, docs_per_part: int = 200, names: Iterable[str] = (),
              seed: int = SEED) -> list[dict[str, Any]]:
    """Sub-topic labels of the big clusters of ``points``.

    Args:
        points: one row per chunk with ``x``, ``y``, ``cluster_id`` and ``content`` (the chunk
            text; only read here, never returned).
        min_size: smallest cluster that is split.
        per_part: chunks per part, roughly (2 parts at least, ``max_parts`` at most).
        max_clusters: only the biggest clusters are split (the ones a zoom makes room for).
        docs_per_part: chunks read per part at most (a seeded sample): bounds the time at 64K
            chunks.
        names: people's names, never label words (each chunk's senders are dropped anyway).

    Returns:
        ``[{"cluster_id", "label", "x", "y", "n"}]``: one per part that got a label, ``x, y``
        the part's median position in the layout, ``n`` its chunks; biggest clusters first.
    """
    from sklearn.cluster import KMeans

    out: list[dict[str, Any]] = []
    if not {"x", "y", "cluster_id", "content"} <= set(points.columns) or points.height == 0:
        return out
    names = list(names)
    sizes = points.filter(pl.col("cluster_id") >= 0).group_by("cluster_id").len().sort(
        ["len", "cluster_id"], descending=[True, False])
    for cid, size in sizes.head(max_clusters).iter_rows():
        if size < min_size:
            break
        part = points.filter(pl.col("cluster_id") == cid)
        xy = part.select("x", "y").to_numpy()
        k = int(min(max_parts, max(2, round(size / per_part))))
        assign = KMeans(n_clusters=k, n_init=4, random_state=seed).fit_predict(xy)
        texts = part["content"].to_list()
        docs = [ClusterDocs(j, [texts[i] for i in np.flatnonzero(assign == j)]) for j in range(k)]
        labels = TfidfLabeler(label_terms=2, names=names, seed=seed, max_docs=docs_per_part).label(docs)
        for j, lab in enumerate(labels):
            members = np.flatnonzero(assign == j)
            if not lab.terms or members.size == 0:
                continue
            out.append({"cluster_id": int(cid), "label": lab.label, "n": int(members.size),
                        "x": float(np.median(xy[members, 0])), "y": float(np.median(xy[members, 1]))})
    return out
