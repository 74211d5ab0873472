"""Unpartitioned analyzing stages: projection -> clusters -> cluster labels -> insights map."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from brb_pipeline.core import duck, metadata
from brb_pipeline.core.clustering import cluster, stable_cluster_ids
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.insights_map import cluster_summary, summary_markdown, write_map
from brb_pipeline.core.labeling import ClusterDocs, LabelCache, TfidfLabeler, label_clusters, representatives
from brb_pipeline.core.projection import project
from brb_pipeline.pipeline.paths import atomic_write_parquet
from brb_pipeline.pipeline.store import GENERATION
from brb_pipeline.settings import Settings

log = logging.getLogger("brb")

SNIPPET_CHARS = 140


def _dir(s: Settings) -> Path:
    d = s.staging_dir / "insights"
    d.mkdir(parents=True, exist_ok=True)
    return d


def load_store(s: Settings) -> tuple[pl.DataFrame, np.ndarray, int]:
    """(chunk rows without vectors, (n, dim) float32 embeddings, store generation) from brb.duckdb."""
    if not s.duckdb_path.exists():
        raise StoreError(f"no search store at {s.duckdb_path}: run `brb ingest` first")
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        if not duck.table_exists(con, "chunks"):
            return pl.DataFrame(), np.zeros((0, 0), np.float32), 0
        tbl = con.execute(
            "SELECT chunk_id, contact_id, start_ts, content, embedding FROM chunks ORDER BY chunk_id"
        ).fetch_arrow_table()  # materialize before the next query on this connection
        gen = int(duck.get_meta(con, GENERATION, 0) or 0)
    finally:
        con.close()
    emb_col = tbl.column("embedding").combine_chunks()
    n = tbl.num_rows
    flat = emb_col.values.to_numpy(zero_copy_only=False) if n else np.zeros(0, np.float32)
    emb = flat.reshape(n, -1).astype(np.float32, copy=False) if n else np.zeros((0, 0), np.float32)
    frame = pl.from_arrow(tbl.drop_columns(["embedding"]))
    return frame, emb, gen


def run_projection(s: Settings) -> dict[str, Any]:
    """PCA to ``pca_dim`` then UMAP to 2-D and 3-D, fitted on a sample for large stores."""
    t0 = time.perf_counter()
    rows, emb, gen = load_store(s)
    proj = project(emb, pca_dim=s.pca_dim, n_neighbors=s.umap_neighbors, min_dist=s.umap_min_dist,
                   sample=s.umap_sample, seed=s.seed) if rows.height else None
    out = pl.DataFrame({
        "chunk_id": rows["chunk_id"] if rows.height else pl.Series([], dtype=pl.Utf8),
        "x": proj.xy[:, 0] if proj else [], "y": proj.xy[:, 1] if proj else [],
        "x3": proj.xyz[:, 0] if proj else [], "y3": proj.xyz[:, 1] if proj else [],
        "z3": proj.xyz[:, 2] if proj else [],
    }, schema={"chunk_id": pl.Utf8, "x": pl.Float32, "y": pl.Float32, "x3": pl.Float32, "y3": pl.Float32,
               "z3": pl.Float32})
    atomic_write_parquet(out, _dir(s) / "projection.parquet")
    return {
        "chunks": rows.height,
        "dim": int(emb.shape[1]) if emb.size else 0,
        "pca_dim": int(proj.pca.shape[1]) if proj else 0,
        "explained_variance": round(float(proj.explained_variance), 4) if proj else 0.0,
        "umap_fitted_on": int(proj.fitted_on) if proj else 0,
        "method": proj.method if proj else "empty",
        "store_generation": gen,
        **({f"seconds_{k}": round(v, 2) for k, v in proj.seconds.items()} if proj else {}),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def run_clusters(s: Settings) -> dict[str, Any]:
    """HDBSCAN on the 2-D layout, merge near-duplicate clusters, reassign close noise, keep ids stable."""
    t0 = time.perf_counter()
    rows, emb, _ = load_store(s)
    proj = pl.read_parquet(_dir(s) / "projection.parquet")
    if proj.height != rows.height or (rows.height and proj["chunk_id"].to_list() != rows["chunk_id"].to_list()):
        raise StoreError("the projection is older than the store: materialize `projection` again")
    prev_path = _dir(s) / "clusters.parquet"
    prev = {}
    if prev_path.exists():
        p = pl.read_parquet(prev_path)
        prev = dict(zip(p["chunk_id"].to_list(), p["cluster_id"].to_list()))
    if rows.height == 0:
        res_labels = np.zeros(0, dtype=np.int64)
        info: dict[str, Any] = {"n_clusters": 0, "noise_before": 0.0, "noise_after": 0.0, "merged": 0}
    else:
        xy = proj.select("x", "y").to_numpy()
        res = cluster(xy, emb, min_cluster_size=s.hdbscan_min_cluster_size, min_samples=s.hdbscan_min_samples,
                      merge_threshold=s.merge_threshold, noise_threshold=s.noise_reassign_threshold, seed=s.seed)
        res_labels = stable_cluster_ids(prev, rows["chunk_id"].to_list(), res.labels)
        info = {"n_clusters": int(res.n_clusters), "noise_before": round(float(res.noise_before), 4),
                "noise_after": round(float(res.noise_after), 4), "merged": len(res.merged)}
    kept = len({int(c) for c in res_labels if c >= 0} & {int(c) for c in prev.values() if c >= 0})
    atomic_write_parquet(pl.DataFrame({"chunk_id": rows["chunk_id"] if rows.height else [],
                                       "cluster_id": res_labels.astype(np.int64)},
                                      schema={"chunk_id": pl.Utf8, "cluster_id": pl.Int64}), prev_path)
    return {**info, "chunks": rows.height, "ids_kept_from_previous_run": kept,
            "seconds": round(time.perf_counter() - t0, 3)}


def make_labeler(s: Settings) -> Any:
    """The offline c-TF-IDF labeler, or the mlx-lm one when a local model path is configured."""
    offline = TfidfLabeler()
    if s.labeler_model_path:
        from brb_pipeline.core.labeling import MLXLMLabeler

        return MLXLMLabeler(Path(s.labeler_model_path), fallback=offline, seed=s.seed)
    return offline


def run_labels(s: Settings, labeler: Any | None = None) -> dict[str, Any]:
    """A readable label per cluster, cached by cluster membership."""
    t0 = time.perf_counter()
    rows, emb, _ = load_store(s)
    cl = pl.read_parquet(_dir(s) / "clusters.parquet")
    labels = cl["cluster_id"].to_numpy() if cl.height else np.zeros(0, dtype=np.int64)
    contents = rows["content"].to_list() if rows.height else []
    ids = rows["chunk_id"].to_list() if rows.height else []
    labeler = labeler or make_labeler(s)
    docs, members = [], {}
    for cid in sorted({int(c) for c in labels if c >= 0}):
        idx = np.flatnonzero(labels == cid)
        members[cid] = [ids[i] for i in idx]
        reps = representatives(emb, labels, cid, 8, s.seed)
        docs.append(ClusterDocs(cid, [contents[i] for i in idx], [contents[i] for i in reps]))
    out, hits = label_clusters(labeler, docs, members, LabelCache(_dir(s) / "label_cache.json")) if docs else ([], 0)
    table = pl.DataFrame({
        "cluster_id": [lab.cluster_id for lab in out],
        "label": [lab.label for lab in out],
        "terms": [list(lab.terms) for lab in out],
        "label_source": [lab.source for lab in out],
    }, schema={"cluster_id": pl.Int64, "label": pl.Utf8, "terms": pl.List(pl.Utf8), "label_source": pl.Utf8})
    atomic_write_parquet(table, _dir(s) / "labels.parquet")
    return {
        "clusters": len(out),
        "labelled_now": len(out) - hits,
        "from_cache": hits,
        "labeler": type(labeler).__name__,
        "llm_fallbacks": int(getattr(labeler, "fallbacks", 0)),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def run_map(s: Settings) -> dict[str, Any]:
    """The interactive 2-D/3-D map and a PNG preview, plus the per-cluster summary in brb.db."""
    t0 = time.perf_counter()
    rows, _, _ = load_store(s)
    d = _dir(s)
    proj = pl.read_parquet(d / "projection.parquet")
    cl = pl.read_parquet(d / "clusters.parquet")
    labels = pl.read_parquet(d / "labels.parquet")
    contacts = metadata.read_contacts(s.brb_db).select("contact_id", "display_name")
    points = (
        rows.select("chunk_id", "contact_id", "start_ts", "content")
        .join(proj, on="chunk_id", how="left")
        .join(cl, on="chunk_id", how="left")
        .join(labels.select("cluster_id", "label"), on="cluster_id", how="left")
        .join(contacts, on="contact_id", how="left")
        .with_columns(
            pl.col("label").fill_null("unclustered"),
            pl.col("display_name").fill_null(pl.col("contact_id")).alias("contact"),
            pl.col("start_ts").dt.strftime("%Y-%m-%d").alias("date"),
            _snippet(pl.col("content")).alias("snippet"),
        )
        .select("chunk_id", "x", "y", pl.col("x3"), pl.col("y3"), pl.col("z3").alias("z"), "cluster_id", "label",
                "contact", "date", "start_ts", "snippet")
    )
    summary = cluster_summary(points)
    summary = summary.join(labels.select("cluster_id", "terms", "label_source"), on="cluster_id", how="left") \
        if "terms" not in summary.columns else summary
    metadata.replace_clusters(s.brb_db, summary)
    files = write_map(s.insights_dir, points, summary, title="brb — conversation map")
    return {
        "clusters": int(summary.filter(pl.col("cluster_id") >= 0).height),
        "points": points.height,
        "html": str(files.html),
        "html_3d": str(files.html_3d),
        "png": str(files.png),
        "summary_markdown": summary_markdown(summary),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _snippet(col: pl.Expr) -> pl.Expr:
    """First message lines of a chunk, cut to SNIPPET_CHARS (for the map's hover only)."""
    return col.str.slice(0, SNIPPET_CHARS).str.replace_all("\n", " · ")
