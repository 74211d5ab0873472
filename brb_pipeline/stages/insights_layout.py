"""Place or refit: how the analyzing stages lay out and cluster the current store.

A *refit* runs PCA -> UMAP (2-D and 3-D) -> HDBSCAN over every chunk. After a small change the
layout is *placed* instead: chunks already laid out keep their coordinates and cluster ids,
removed chunks drop out, and each new (or re-embedded) chunk goes to the similarity-weighted
mean position of its k most similar laid-out chunks (cosine in embedding space) and takes their
majority cluster. Placing needs a previous layout made from the same embedding model and layout
settings, and the placed chunks, now and in total since the last refit, within
``Settings.insights_refit_share`` of the store; otherwise (or when asked) the layout is refitted.
"""

from __future__ import annotations

import dataclasses

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from brb_pipeline.core.insights.clustering import cluster, stable_cluster_ids, vote_by_neighbours
from brb_pipeline.core.insights.projection import nearest_neighbours, neighbour_mean, project
from brb_pipeline.stages.insights_io import FORMAT, read_with_info
from brb_pipeline.config.settings import Settings

log = logging.getLogger("brb")

COORDS = ("x", "y", "x3", "y3", "z3")
PROJECTION_SCHEMA = {"chunk_id": pl.Utf8, **{c: pl.Float32 for c in COORDS}, "emb_fp": pl.UInt64,
                     "placed": pl.Boolean}


def layout_settings(s: Settings) -> dict[str, Any]:
    """The settings a layout depends on; a change means the previous layout cannot be extended."""
    return {"pca_dim": int(s.pca_dim), "umap_neighbors": int(s.umap_neighbors),
            "umap_min_dist": float(s.umap_min_dist), "umap_sample": int(s.umap_sample), "seed": int(s.seed)}


def neighbours(s: Settings) -> int:
    """k of the placement's neighbour search (UMAP's neighbourhood size)."""
    return int(s.umap_neighbors or 10)


@dataclass
class Plan:
    """How the projection lays out the current store.

    Attributes:
        reason: why the layout is refitted; None to place.
        previous: the previous projection's rows aligned with the store (nulls for new chunks).
        kept: (n,) bool, chunks whose previous coordinates stay (same id, same embedding).
        info: the previous projection's metadata.
        placed_share: share of the store placed now.
        since_refit: chunks placed since the last refit, this run included.
    """

    reason: str | None
    previous: pl.DataFrame | None = None
    kept: np.ndarray | None = None
    info: dict[str, Any] | None = None
    placed_share: float = 0.0
    since_refit: int = 0


def plan_layout(s: Settings, ids: pl.Series, fps: np.ndarray, model: str | None, refit: bool) -> Plan:
    """Decide between placing into the previous layout and refitting it (see the module doc)."""
    n = len(ids)
    if refit:
        return Plan("refit asked")
    if n == 0:
        return Plan("empty store")
    prev, info = read_with_info(s.paths.projection)
    if prev is None or info.get("format") != FORMAT or not set(PROJECTION_SCHEMA) <= set(prev.columns):
        return Plan("no previous projection")
    if info.get("embedding_model") != model:
        return Plan(f"embedding model changed ({info.get('embedding_model')} -> {model})")
    if info.get("layout") != layout_settings(s):
        return Plan("layout settings changed")
    aligned = (pl.DataFrame({"chunk_id": ids, "emb_fp": pl.Series(fps, dtype=pl.UInt64)})
               .join(prev.rename({"emb_fp": "prev_fp"}), on="chunk_id", how="left", maintain_order="left"))
    kept = (aligned["prev_fp"] == aligned["emb_fp"]).fill_null(False).to_numpy()
    new = n - int(kept.sum())
    since = new + int(aligned.filter(pl.Series(kept))["placed"].sum())
    limit = float(s.insights_refit_share)
    reason = None
    if not kept.any():
        reason = "no chunk of the previous projection is left"
    elif new > limit * n:
        reason = f"{new} new chunks are {new / n:.1%} of the store (limit {limit:.1%})"
    elif since > limit * n:
        reason = f"{since} chunks placed since the last refit are {since / n:.1%} of the store (limit {limit:.1%})"
    return Plan(reason, aligned, kept, info, new / n, since)


def _frame(ids: pl.Series, xy: np.ndarray, xyz: np.ndarray, fps: np.ndarray, placed: np.ndarray) -> pl.DataFrame:
    """The projection table: one row per chunk, coordinates as float32."""
    cols = dict(zip(COORDS, (xy[:, 0], xy[:, 1], xyz[:, 0], xyz[:, 1], xyz[:, 2])))
    return pl.DataFrame({"chunk_id": ids, **cols, "emb_fp": fps, "placed": placed}, schema=PROJECTION_SCHEMA)


def refit_layout(s: Settings, emb: np.ndarray, ids: pl.Series,
           fps: np.ndarray) -> tuple[pl.DataFrame, dict[str, Any], dict[str, Any]]:
    """PCA to ``pca_dim`` then UMAP to 2-D and 3-D, fitted on a sample for large stores."""
    n = len(ids)
    proj = project(emb, **dataclasses.asdict(s.projection)) if n else None
    xy = proj.xy if proj else np.zeros((0, 2), np.float32)
    xyz = proj.xyz if proj else np.zeros((0, 3), np.float32)
    out = _frame(ids, xy, xyz, fps, np.zeros(n, dtype=bool))
    info = {"method": "refit", "fit_id": uuid.uuid4().hex, "refit_chunks": n, "placed_now": 0,
            "placed_since_refit": 0}
    meta = {
        "method": "refit",
        "layout_method": proj.method if proj else "empty",
        "placed": 0,
        "placed_share": 0.0,
        "pca_dim": int(proj.pca.shape[1]) if proj else 0,
        "explained_variance": round(float(proj.explained_variance), 4) if proj else 0.0,
        "umap_fitted_on": int(proj.fitted_on) if proj else 0,
        **({f"seconds_{k}": round(v, 2) for k, v in proj.seconds.items()} if proj else {}),
    }
    return out, info, meta


def place_layout(s: Settings, emb: np.ndarray, ids: pl.Series, fps: np.ndarray,
           plan: Plan) -> tuple[pl.DataFrame, dict[str, Any], dict[str, Any]]:
    """Keep the coordinates of ``plan.kept`` chunks, place the others among their neighbours."""
    t0 = time.perf_counter()
    prev, kept, info = plan.previous, plan.kept, plan.info or {}
    assert prev is not None and kept is not None
    xy = np.array(prev.select("x", "y").to_numpy(), dtype=np.float32)
    xyz = np.array(prev.select("x3", "y3", "z3").to_numpy(), dtype=np.float32)
    placed = prev["placed"].fill_null(True).to_numpy().copy()
    new = np.flatnonzero(~kept)
    k = neighbours(s)
    if new.size:
        idx, sims = nearest_neighbours(emb, emb[new], k, allowed=kept)
        xy[new] = neighbour_mean(xy, idx, sims)
        xyz[new] = neighbour_mean(xyz, idx, sims)
        placed[new] = True
    n = len(ids)
    removed = int(info.get("chunks", 0)) - int(kept.sum())
    log.info("Projection - placed %d new chunks (%.2f%% of %d) among %d neighbours each, %d removed, in %.2f s",
             new.size, 100 * plan.placed_share, n, k, removed, time.perf_counter() - t0)
    out_info = {"method": "placed", "fit_id": info.get("fit_id"), "refit_chunks": info.get("refit_chunks"),
                "placed_now": int(new.size), "placed_since_refit": plan.since_refit}
    meta = {
        "method": "placed",
        "placed": int(new.size),
        "placed_share": round(plan.placed_share, 4),
        "placed_since_refit": plan.since_refit,
        "placed_since_refit_share": round(plan.since_refit / n, 4),
        "refit_share_limit": float(s.insights_refit_share),
        "removed": max(0, removed),
        "neighbours": k,
        "seconds_place": round(time.perf_counter() - t0, 3),
    }
    return _frame(ids, xy, xyz, fps, placed), out_info, meta


@dataclass
class ClusterAlignment:
    """The previous clusters lined up with the current store, when they can be extended.

    Attributes:
        previous: (n,) int64 previous cluster id per chunk of the store (-1 where it had none).
        known: (n,) bool chunks that kept their place (same id, same embedding) and so their
            cluster; at least one is.
    """

    previous: np.ndarray
    known: np.ndarray


def align_clusters(ids: pl.Series, fps: np.ndarray, previous: pl.DataFrame | None,
                   pinfo: dict[str, Any], cinfo: dict[str, Any]) -> ClusterAlignment | None:
    """The previous clusters aligned with the store, or None when the store must be clustered
    again: the projection was refitted, the clusters belong to another fit, or no chunk is left.

    Args:
        ids: the store's chunk ids, in order.
        fps: (n,) uint64 embedding fingerprints of those chunks.
        previous: the previous clusters file (``chunk_id``, ``cluster_id``, ``emb_fp``), or None.
        pinfo: the current projection's metadata.
        cinfo: the previous clusters' metadata.
    """
    if (not len(ids) or pinfo.get("method") != "placed" or previous is None
            or cinfo.get("fit_id") != pinfo.get("fit_id") or "emb_fp" not in previous.columns):
        return None
    aligned = (pl.DataFrame({"chunk_id": ids, "emb_fp": pl.Series(fps, dtype=pl.UInt64)})
               .join(previous.select("chunk_id", "cluster_id", pl.col("emb_fp").alias("prev_fp")),
                     on="chunk_id", how="left", maintain_order="left"))
    known = (aligned["prev_fp"] == aligned["emb_fp"]).fill_null(False).to_numpy()
    if not known.any():
        return None
    return ClusterAlignment(aligned["cluster_id"].fill_null(-1).to_numpy(), known)


def hdbscan_clusters(s: Settings, xy: np.ndarray, emb: np.ndarray, ids: list[str],
                     previous: dict[str, int]) -> tuple[np.ndarray, dict[str, Any]]:
    """HDBSCAN on the 2-D layout, near-duplicate clusters merged, close noise reassigned, and
    ids kept stable against ``previous`` (chunk id -> its previous cluster id)."""
    res = cluster(xy, emb, **dataclasses.asdict(s.clustering))
    labels = stable_cluster_ids(previous, ids, res.labels)
    info = {"method": "hdbscan", "n_clusters": int(res.n_clusters),
            "noise_before": round(float(res.noise_before), 4),
            "noise_after": round(float(res.noise_after), 4), "merged": len(res.merged)}
    return labels, info


def place_clusters(s: Settings, emb: np.ndarray,
                   alignment: ClusterAlignment) -> tuple[np.ndarray, dict[str, Any]]:
    """Keep the ``known`` chunks' cluster ids; give the others their neighbours' majority cluster.

    Args:
        s: settings (k is the placement's, so the neighbours are the ones the projection used).
        emb: (n, dim) float32 embeddings of the store.
        alignment: the previous cluster ids and which chunks kept theirs.

    Returns:
        ((n,) int64 cluster ids, metadata).
    """
    labels, known = alignment.previous.astype(np.int64, copy=True), alignment.known
    new = np.flatnonzero(~known)
    noise_before = float(np.mean(labels[known] < 0))
    if new.size:
        idx, sims = nearest_neighbours(emb, emb[new], neighbours(s), allowed=known)
        labels[new] = vote_by_neighbours(labels[idx], sims)
    clusters = {int(c) for c in labels if c >= 0}
    info = {"method": "placed", "placed": int(new.size), "n_clusters": len(clusters),
            "noise_before": round(noise_before, 4), "noise_after": round(float(np.mean(labels < 0)), 4),
            "merged": 0}
    log.info("Clustering - %d placed chunks took their neighbours' clusters (%d noise)", new.size,
             int(np.count_nonzero(labels[new] < 0)))
    return labels, info
