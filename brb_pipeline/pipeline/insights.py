"""Unpartitioned analyzing stages: projection -> clusters -> cluster labels -> insights map.

Two modes. A *refit* runs PCA -> UMAP (2-D and 3-D) -> HDBSCAN over every chunk. After a small
change the layout is *placed* instead: chunks already laid out keep their coordinates and cluster
ids, removed chunks drop out, and each new (or re-embedded) chunk goes to the similarity-weighted
mean position of its k most similar laid-out chunks (cosine in embedding space) and takes their
majority cluster. Placing needs a previous layout made from the same embedding model and layout
settings, and the placed chunks, now and in total since the last refit, within
``Settings.insights_refit_share`` of the store; otherwise (or with ``refit=True``) the layout is
refitted. What a file was made from is kept in its Parquet key-value metadata under
:data:`META_KEY`, written atomically with the file.

Labels are kept for a cluster whose membership still overlaps the one its label was made from
by :data:`LABEL_KEEP_OVERLAP` (Jaccard), so a few placed chunks do not send every touched cluster
back to the labeler (an LLM call each with mlx-lm).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from brb_pipeline.core import faults, metadata
from brb_pipeline.core.store import duck
from brb_pipeline.core.insights.clustering import cluster, stable_cluster_ids, vote_by_neighbours
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.insights.map import cluster_summary, summary_markdown, write_map
from brb_pipeline.core.insights.labeling import (
    ClusterDocs,
    ClusterLabel,
    LabelCache,
    label_clusters,
    labeler_kind,
    representatives,
)
from brb_pipeline.core.insights.projection import embedding_fingerprints, nearest_neighbours, neighbour_mean, project
from brb_pipeline.pipeline.store import GENERATION
from brb_pipeline.settings import Settings

log = logging.getLogger("brb")

SNIPPET_CHARS = 140
META_KEY = "brb.insights"  # Parquet key-value metadata: what the file was made from (JSON)
FORMAT = 1
LABEL_KEEP_OVERLAP = 0.9
_COORDS = ("x", "y", "x3", "y3", "z3")
PROJECTION_SCHEMA = {"chunk_id": pl.Utf8, **{c: pl.Float32 for c in _COORDS}, "emb_fp": pl.UInt64,
                     "placed": pl.Boolean}


def _dir(s: Settings) -> Path:
    d = s.staging_dir / "insights"
    d.mkdir(parents=True, exist_ok=True)
    return d


def load_store(s: Settings, columns: tuple[str, ...] = ("chunk_id",),
               vectors: bool = True) -> tuple[pl.DataFrame, np.ndarray, int]:
    """(chunk rows, (n, dim) float32 embeddings, store generation) from brb.duckdb, in chunk_id
    order. Only the asked ``columns`` (and the vectors when asked) are read: at 64K chunks the
    texts and the vectors are ~100 MB each, and most stages need one of them or neither."""
    rows, emb, gen, _ = _load(s, columns, vectors)
    return rows, emb, gen


def _load(s: Settings, columns: tuple[str, ...] = ("chunk_id",),
          vectors: bool = True) -> tuple[pl.DataFrame, np.ndarray, int, str | None]:
    """:func:`load_store` plus the store's embedding model id (None for an empty store)."""
    if not s.duckdb_path.exists():
        raise StoreError(f"no search store at {s.duckdb_path}: run `brb ingest` first")
    cols = list(dict.fromkeys(("chunk_id", *columns)))
    con = duck.connect(s.duckdb_path, read_only=True, memory_limit=s.duckdb_load_memory_limit)
    try:
        if not duck.table_exists(con, "chunks"):
            return pl.DataFrame(), np.zeros((0, 0), np.float32), 0, None
        tbl = con.execute(f"SELECT rowid AS _rowid, {', '.join(cols)} FROM chunks ORDER BY chunk_id").fetch_arrow_table()
        emb = _read_vectors(con, tbl.column("_rowid").to_numpy()) if vectors else np.zeros((0, 0), np.float32)
        gen = int(duck.get_meta(con, GENERATION, 0) or 0)
        model = duck.get_meta(con, "embedding_model")
    finally:
        con.close()
    frame = pl.from_arrow(tbl.drop_columns(["_rowid"]))
    return frame, emb, gen, None if model is None else str(model)


def _read_vectors(con: Any, rowids: np.ndarray, block: int = 8192) -> np.ndarray:
    """The embeddings as one (n, dim) float32 array whose row i belongs to ``rowids[i]``.

    Streamed in table order in blocks and copied into place, so the peak is the array plus one
    block: fetching the column whole and converting it held ~3.5 copies (64K chunks: +321 MB
    for 90 MB of vectors), and sorting it by chunk_id in SQL would make DuckDB hold another.
    """
    n = rowids.size
    if n == 0:
        return np.zeros((0, 0), np.float32)
    order = np.argsort(rowids, kind="stable")
    sorted_ids = rowids[order]
    emb: np.ndarray | None = None
    reader = con.execute("SELECT rowid, embedding FROM chunks").fetch_record_batch(block)
    for rb in reader:
        k = rb.num_rows
        if k == 0:
            continue
        vec = rb.column(1)
        flat = vec.flatten().to_numpy(zero_copy_only=False)
        if emb is None:
            emb = np.empty((n, flat.size // k), np.float32)
        at = order[np.searchsorted(sorted_ids, rb.column(0).to_numpy())]
        emb[at] = flat.reshape(k, -1)
    assert emb is not None
    return emb


def _layout_settings(s: Settings) -> dict[str, Any]:
    """The settings a layout depends on; a change means the previous layout cannot be extended."""
    return {"pca_dim": int(s.pca_dim), "umap_neighbors": int(s.umap_neighbors),
            "umap_min_dist": float(s.umap_min_dist), "umap_sample": int(s.umap_sample), "seed": int(s.seed)}


def _neighbours(s: Settings) -> int:
    """k of the placement's neighbour search (UMAP's neighbourhood size)."""
    return int(s.umap_neighbors or 10)


def _write(frame: pl.DataFrame, path: Path, info: dict[str, Any]) -> None:
    """Write ``frame`` with ``info`` as its :data:`META_KEY` metadata, via a temp file and rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    frame.write_parquet(tmp, compression="zstd", statistics=True,
                        metadata={META_KEY: json.dumps(info, sort_keys=True)})
    tmp.replace(path)


def _read(path: Path) -> tuple[pl.DataFrame | None, dict[str, Any]]:
    """(frame, its :data:`META_KEY` metadata) of a file written by :func:`_write`; (None, {}) when
    it is missing or unreadable, ({...}, {}) for a file written before the metadata existed."""
    if not path.exists():
        return None, {}
    try:
        frame = pl.read_parquet(path)
        raw = pl.read_parquet_metadata(path).get(META_KEY)
        info = json.loads(raw) if raw else {}
    except (OSError, ValueError, pl.exceptions.PolarsError) as e:
        log.warning("Insights - %s unreadable (%s), recomputing it", path.name, type(e).__name__)
        return None, {}
    return frame, info if isinstance(info, dict) else {}


@dataclass
class _Plan:
    """How :func:`run_projection` lays out the current store.

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


def _plan(s: Settings, ids: pl.Series, fps: np.ndarray, model: str | None, refit: bool) -> _Plan:
    """Decide between placing into the previous layout and refitting it (see the module doc)."""
    n = len(ids)
    if refit:
        return _Plan("refit asked")
    if n == 0:
        return _Plan("empty store")
    prev, info = _read(_dir(s) / "projection.parquet")
    if prev is None or info.get("format") != FORMAT or not set(PROJECTION_SCHEMA) <= set(prev.columns):
        return _Plan("no previous projection")
    if info.get("embedding_model") != model:
        return _Plan(f"embedding model changed ({info.get('embedding_model')} -> {model})")
    if info.get("layout") != _layout_settings(s):
        return _Plan("layout settings changed")
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
    return _Plan(reason, aligned, kept, info, new / n, since)


def run_projection(s: Settings, refit: bool = False) -> dict[str, Any]:
    """Lay out every chunk in 2-D and 3-D: place a few new chunks into the previous layout, or refit.

    Args:
        s: settings (layout parameters, ``insights_refit_share``).
        refit: refit PCA -> UMAP even when placing would do.

    Returns:
        JSON-able metadata: ``method`` ("refit" or "placed"), ``placed`` (chunks placed now),
        ``placed_share`` (of the store), ``placed_since_refit``, ``refit_reason`` and timings.
    """
    t0 = time.perf_counter()
    rows, emb, gen, model = _load(s)
    n = rows.height
    ids = rows["chunk_id"] if n else pl.Series("chunk_id", [], dtype=pl.Utf8)
    fps = embedding_fingerprints(emb) if n else np.zeros(0, np.uint64)
    plan = _plan(s, ids, fps, model, refit)
    base = {"embedding_model": model, "dim": int(emb.shape[1]) if emb.size else 0,
            "layout": _layout_settings(s), "chunks": n, "store_generation": gen, "format": FORMAT}
    if plan.reason is None:
        out, info, meta = _place(s, emb, ids, fps, plan)
    else:
        log.info("Projection - refit: %s", plan.reason)
        out, info, meta = _refit(s, emb, ids, fps)
        meta["refit_reason"] = plan.reason
    faults.point("projection")
    _write(out, _dir(s) / "projection.parquet", {**base, **info})
    return {"chunks": n, "dim": base["dim"], **meta, "store_generation": gen,
            "seconds": round(time.perf_counter() - t0, 3)}


def _frame(ids: pl.Series, xy: np.ndarray, xyz: np.ndarray, fps: np.ndarray, placed: np.ndarray) -> pl.DataFrame:
    """The projection table: one row per chunk, coordinates as float32."""
    cols = dict(zip(_COORDS, (xy[:, 0], xy[:, 1], xyz[:, 0], xyz[:, 1], xyz[:, 2])))
    return pl.DataFrame({"chunk_id": ids, **cols, "emb_fp": fps, "placed": placed}, schema=PROJECTION_SCHEMA)


def _refit(s: Settings, emb: np.ndarray, ids: pl.Series,
           fps: np.ndarray) -> tuple[pl.DataFrame, dict[str, Any], dict[str, Any]]:
    """PCA to ``pca_dim`` then UMAP to 2-D and 3-D, fitted on a sample for large stores."""
    n = len(ids)
    proj = project(emb, pca_dim=s.pca_dim, n_neighbors=s.umap_neighbors, min_dist=s.umap_min_dist,
                   sample=s.umap_sample, seed=s.seed) if n else None
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


def _place(s: Settings, emb: np.ndarray, ids: pl.Series, fps: np.ndarray,
           plan: _Plan) -> tuple[pl.DataFrame, dict[str, Any], dict[str, Any]]:
    """Keep the coordinates of ``plan.kept`` chunks, place the others among their neighbours."""
    t0 = time.perf_counter()
    prev, kept, info = plan.previous, plan.kept, plan.info or {}
    assert prev is not None and kept is not None
    xy = np.array(prev.select("x", "y").to_numpy(), dtype=np.float32)
    xyz = np.array(prev.select("x3", "y3", "z3").to_numpy(), dtype=np.float32)
    placed = prev["placed"].fill_null(True).to_numpy().copy()
    new = np.flatnonzero(~kept)
    k = _neighbours(s)
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


def run_clusters(s: Settings, refit: bool = False) -> dict[str, Any]:
    """Cluster ids for every chunk: placed chunks take their neighbours' majority, or HDBSCAN.

    After a placed projection, chunks that kept their place keep their cluster id and each
    placed chunk takes the majority cluster of its k most similar kept chunks (noise when most
    of them are noise). After a refit (or with ``refit=True``): HDBSCAN on the 2-D layout, near-
    duplicate clusters merged, close noise reassigned, ids kept stable across runs.

    Args:
        s: settings.
        refit: recluster with HDBSCAN even after a placed projection.

    Returns:
        JSON-able metadata: ``method`` ("placed" or "hdbscan"), cluster count, noise shares.
    """
    t0 = time.perf_counter()
    rows, emb, _ = load_store(s)
    proj, pinfo = _read(_dir(s) / "projection.parquet")
    if proj is None:
        raise StoreError("no projection yet: materialize `projection` first")
    if proj.height != rows.height or (rows.height and proj["chunk_id"].to_list() != rows["chunk_id"].to_list()):
        raise StoreError("the projection is older than the store: materialize `projection` again")
    fps = embedding_fingerprints(emb) if rows.height else np.zeros(0, np.uint64)
    if "emb_fp" in proj.columns and not np.array_equal(proj["emb_fp"].to_numpy(), fps):
        raise StoreError("the projection is older than the store: materialize `projection` again")
    prev_path = _dir(s) / "clusters.parquet"
    prev_frame, cinfo = _read(prev_path)
    prev = dict(zip(prev_frame["chunk_id"].to_list(), prev_frame["cluster_id"].to_list())) \
        if prev_frame is not None else {}
    known = None
    if (not refit and rows.height and pinfo.get("method") == "placed" and prev_frame is not None
            and cinfo.get("fit_id") == pinfo.get("fit_id") and "emb_fp" in prev_frame.columns):
        aligned = (pl.DataFrame({"chunk_id": rows["chunk_id"], "emb_fp": pl.Series(fps, dtype=pl.UInt64)})
                   .join(prev_frame.select("chunk_id", "cluster_id", pl.col("emb_fp").alias("prev_fp")),
                         on="chunk_id", how="left", maintain_order="left"))
        known = (aligned["prev_fp"] == aligned["emb_fp"]).fill_null(False).to_numpy()
        if not known.any():
            known = None
    if rows.height == 0:
        res_labels = np.zeros(0, dtype=np.int64)
        info: dict[str, Any] = {"method": "hdbscan", "n_clusters": 0, "noise_before": 0.0, "noise_after": 0.0,
                                "merged": 0}
    elif known is not None:
        res_labels, info = _place_clusters(s, emb, aligned["cluster_id"].fill_null(-1).to_numpy(), known)
    else:
        xy = proj.select("x", "y").to_numpy()
        res = cluster(xy, emb, min_cluster_size=s.hdbscan_min_cluster_size, min_samples=s.hdbscan_min_samples,
                      merge_threshold=s.merge_threshold, noise_threshold=s.noise_reassign_threshold, seed=s.seed)
        res_labels = stable_cluster_ids(prev, rows["chunk_id"].to_list(), res.labels)
        info = {"method": "hdbscan", "n_clusters": int(res.n_clusters),
                "noise_before": round(float(res.noise_before), 4),
                "noise_after": round(float(res.noise_after), 4), "merged": len(res.merged)}
    kept = len({int(c) for c in res_labels if c >= 0} & {int(c) for c in prev.values() if c >= 0})
    out = pl.DataFrame({"chunk_id": rows["chunk_id"] if rows.height else [], "cluster_id": res_labels.astype(np.int64),
                        "emb_fp": fps}, schema={"chunk_id": pl.Utf8, "cluster_id": pl.Int64, "emb_fp": pl.UInt64})
    _write(out, prev_path, {"format": FORMAT, "fit_id": pinfo.get("fit_id"), "method": info["method"]})
    return {**info, "chunks": rows.height, "ids_kept_from_previous_run": kept,
            "seconds": round(time.perf_counter() - t0, 3)}


def _place_clusters(s: Settings, emb: np.ndarray, labels: np.ndarray,
                    known: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """Keep the ``known`` chunks' cluster ids; give the others their neighbours' majority cluster.

    Args:
        s: settings (k is the placement's, so the neighbours are the ones the projection used).
        emb: (n, dim) float32 embeddings of the store.
        labels: (n,) int64 previous cluster ids, meaningful where ``known``.
        known: (n,) bool chunks that kept their place and cluster.

    Returns:
        ((n,) int64 cluster ids, metadata).
    """
    labels = labels.astype(np.int64, copy=True)
    new = np.flatnonzero(~known)
    noise_before = float(np.mean(labels[known] < 0))
    if new.size:
        idx, sims = nearest_neighbours(emb, emb[new], _neighbours(s), allowed=known)
        labels[new] = vote_by_neighbours(labels[idx], sims)
    clusters = {int(c) for c in labels if c >= 0}
    info = {"method": "placed", "placed": int(new.size), "n_clusters": len(clusters),
            "noise_before": round(noise_before, 4), "noise_after": round(float(np.mean(labels < 0)), 4),
            "merged": 0}
    log.info("Clustering - %d placed chunks took their neighbours' clusters (%d noise)", new.size,
             int(np.count_nonzero(labels[new] < 0)))
    return labels, info

def make_labeler(s: Settings, embedder: Any | None = None) -> Any:
    """The labeler chain: c-TF-IDF re-ranked by the store's embedding model (``embedder``, loaded
    from the settings when None), then mlx-lm when a local model path is configured. Contacts'
    names from brb.db are never used in labels. Without a loadable embedding model the labels are
    plain c-TF-IDF (logged)."""
    from brb_pipeline.core.errors import BrbError
    from brb_pipeline.core.insights.labeling import make_labeler as chain

    names: list[str] = []
    if s.brb_db.exists():
        contacts = metadata.read_contacts(s.brb_db)
        if "kind" in contacts.columns:  # group chats are named after topics ("Book club"), not people
            contacts = contacts.filter(pl.col("kind") == "direct")
        names = [n for n in contacts["display_name"].to_list() if n]
    if embedder is None:
        try:
            from brb_pipeline.core.embedding.models import load_embedder

            embedder = load_embedder(s)
        except BrbError as e:
            log.warning("Labels - no embedding model for label re-ranking (%s): c-TF-IDF labels only",
                        type(e).__name__)
    return chain(s, embedder=embedder, names=names)


def run_labels(s: Settings, labeler: Any | None = None, embedder: Any | None = None) -> dict[str, Any]:
    """A readable label per cluster, cached by cluster membership and labeler kind.

    A cluster keeps its previous label while its membership overlaps the one that label was made
    from by at least :data:`LABEL_KEEP_OVERLAP` (Jaccard); exact memberships seen before come from
    the label cache; only the rest are labelled again.

    Args:
        s: settings.
        labeler: the labeler (default: :func:`make_labeler` with ``embedder``).
        embedder: the store's embedding model, for the default labeler's re-rank (loaded from
            the settings when None).
    """
    t0 = time.perf_counter()
    rows, emb, _, store_model = _load(s, ("chunk_id", "content"))
    cl = pl.read_parquet(_dir(s) / "clusters.parquet")
    labels = cl["cluster_id"].to_numpy() if cl.height else np.zeros(0, dtype=np.int64)
    contents = rows["content"].to_list() if rows.height else []
    ids = rows["chunk_id"].to_list() if rows.height else []
    labeler = labeler or make_labeler(s, embedder)
    docs, members = [], {}
    corpus_mean = emb.mean(axis=0) if emb.size else None
    for cid in sorted({int(c) for c in labels if c >= 0}):
        idx = np.flatnonzero(labels == cid)
        members[cid] = [ids[i] for i in idx]
        reps = representatives(emb, labels, cid, 8, s.seed)
        docs.append(ClusterDocs(cid, [contents[i] for i in idx], [contents[i] for i in reps],
                                centroid=emb[idx].mean(axis=0), centroid_model=store_model,
                                corpus_mean=corpus_mean))
    kind = labeler_kind(labeler)
    keep, bases = _keepable_labels(_dir(s), kind, members)
    out, hits = label_clusters(labeler, docs, members, LabelCache(_dir(s) / "label_cache.json"),
                               reuse=keep) if docs else ([], 0)
    table = pl.DataFrame({
        "cluster_id": [lab.cluster_id for lab in out],
        "label": [lab.label for lab in out],
        "terms": [list(lab.terms) for lab in out],
        "label_source": [lab.source for lab in out],
        # the membership each label was made from: kept labels keep theirs
        "made_from": [sorted(bases[lab.cluster_id]) if lab.cluster_id in keep else members[lab.cluster_id]
                      for lab in out],
    }, schema={"cluster_id": pl.Int64, "label": pl.Utf8, "terms": pl.List(pl.Utf8), "label_source": pl.Utf8,
               "made_from": pl.List(pl.Utf8)})
    faults.point("labels")
    _write(table, _dir(s) / "labels.parquet", {"format": FORMAT, "labeler": kind})
    return {
        "clusters": len(out),
        "labelled_now": len(out) - hits - len(keep),
        "from_cache": hits,
        "kept_by_overlap": len(keep),
        "labeler": type(labeler).__name__,
        "labeler_kind": kind,
        "llm_fallbacks": int(getattr(labeler, "fallbacks", 0)),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _keepable_labels(d: Path, kind: str, members: dict[int, list[str]]
                     ) -> tuple[dict[int, ClusterLabel], dict[int, set[str]]]:
    """Previous labels still good for the current clusters, and the memberships they were made from.

    Args:
        d: the insights staging directory (its ``labels.parquet``).
        kind: the labeler's cache namespace; labels of another labeler are never kept.
        members: current cluster id -> its chunk ids.

    Returns:
        (cluster id -> label to keep, cluster id -> chunk ids that label was made from), for the
        clusters whose Jaccard overlap with that membership is >= :data:`LABEL_KEEP_OVERLAP`.
        Fallback labels of a failed model answer are never kept (the model is asked again).
    """
    prev, info = _read(d / "labels.parquet")
    if prev is None or info.get("labeler") != kind or "made_from" not in prev.columns:
        return {}, {}
    keep, bases = {}, {}
    for r in prev.iter_rows(named=True):
        cid, was = int(r["cluster_id"]), set(r["made_from"] or ())
        now = set(members.get(cid, ()))
        if not now or not was or r["label_source"] == "llm-fallback":
            continue
        if len(now & was) >= LABEL_KEEP_OVERLAP * len(now | was):
            keep[cid] = ClusterLabel(cid, r["label"], list(r["terms"] or []), r["label_source"])
            bases[cid] = was
    return keep, bases


def run_map(s: Settings) -> dict[str, Any]:
    """The interactive 2-D/3-D map and a PNG preview, plus the per-cluster summary in brb.db."""
    t0 = time.perf_counter()
    rows, _, _ = load_store(s, ("chunk_id", "contact_id", "start_ts", "content"), vectors=False)
    d = _dir(s)
    proj = pl.read_parquet(d / "projection.parquet")
    cl = pl.read_parquet(d / "clusters.parquet")
    labels = pl.read_parquet(d / "labels.parquet")
    contacts = metadata.read_contacts(s.brb_db).select("contact_id", "display_name")
    points = (
        rows.select("chunk_id", "contact_id", "start_ts", "content")
        .join(proj.select("chunk_id", *_COORDS), on="chunk_id", how="left")
        .join(cl.select("chunk_id", "cluster_id"), on="chunk_id", how="left")
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
    faults.point("map_written")
    return {
        "clusters": int(summary.filter(pl.col("cluster_id") >= 0).height),
        "points": points.height,
        "html": str(files.html),
        "html_3d": str(files.html_3d),
        "png": str(files.png),
        "summary_markdown": summary_markdown(summary),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def run_insights(s: Settings, refit: bool = False, labeler: Any | None = None) -> dict[str, dict[str, Any]]:
    """Every insights stage in order, outside Dagster (``brb insights --refit`` uses it).

    Args:
        s: settings.
        refit: refit the layout and recluster even after a small change.
        labeler: optional labeler (default: :func:`make_labeler`).

    Returns:
        Stage name -> that stage's metadata.
    """
    return {
        "projection": run_projection(s, refit=refit),
        "clusters": run_clusters(s, refit=refit),
        "cluster_labels": run_labels(s, labeler),
        "insights_map": run_map(s),
    }


def _snippet(col: pl.Expr) -> pl.Expr:
    """First message lines of a chunk, cut to SNIPPET_CHARS (for the map's hover only)."""
    return col.str.slice(0, SNIPPET_CHARS).str.replace_all("\n", " · ")
