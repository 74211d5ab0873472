"""Unpartitioned analyzing stages: projection -> clusters -> cluster labels -> insights map.

Each stage reports the "analyzing" progress of its part. The layout is placed after a small change
and refitted otherwise (see :mod:`brb_pipeline.stages.insights_layout`). What a file was made
from is kept in its Parquet key-value metadata (:mod:`brb_pipeline.stages.insights_io`), written
atomically with the file.

Labels are kept for a cluster whose membership still overlaps the one its label was made from
by :data:`~brb_pipeline.core.insights.labels.LABEL_KEEP_OVERLAP` (Jaccard), so a few placed
chunks do not send every touched cluster back to the labeler (an LLM call each with mlx-lm).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from brb_pipeline.core import faults, metadata
from brb_pipeline.core.crypto import files
from brb_pipeline.core.errors import BrbError, StoreError
from brb_pipeline.core.insights.labels import (
    ClusterDocs,
    ClusterLabel,
    EmbeddingLabeler,
    LabelCache,
    LabelChain,
    keep_by_overlap,
    label_clusters,
    make_labeler,
    representatives,
)
from brb_pipeline.core.insights.map import MapFiles, cluster_summary, summary_markdown, write_map
from brb_pipeline.core.insights.projection import embedding_fingerprints
from brb_pipeline.core.insights.subtopics import LABEL_TERMS as SUBTOPIC_TERMS
from brb_pipeline.core.progress import Progress
from brb_pipeline.keys import provider as keys
from brb_pipeline.stages.insights_io import (
    FORMAT,
    load_store,
    load_store_with_model,
    read_with_info,
    write_with_info,
)
from brb_pipeline.stages.insights_layout import (
    COORDS,
    align_clusters,
    hdbscan_clusters,
    layout_settings,
    place_clusters,
    place_layout,
    plan_layout,
    refit_layout,
)
from brb_pipeline.config.settings import Settings

log = logging.getLogger("brb")

SNIPPET_CHARS = 140


def _report(progress: Progress | None, percent: float, message: str) -> None:
    """One "analyzing" update (the four stages share the stage's 0-100%)."""
    if progress is not None:
        progress.update("analyzing", percent, message)


def run_projection(s: Settings, refit: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Lay out every chunk in 2-D and 3-D: place a few new chunks into the previous layout, or refit.

    Args:
        s: settings (layout parameters, ``insights_refit_share``).
        refit: refit PCA -> UMAP even when placing would do.
        progress: gets the stage's "analyzing" updates.

    Returns:
        JSON-able metadata: ``method`` ("refit" or "placed"), ``placed`` (chunks placed now),
        ``placed_share`` (of the store), ``placed_since_refit``, ``refit_reason`` and timings.
    """
    t0 = time.perf_counter()
    _report(progress, 5, "layout")
    rows, emb, gen, model = load_store_with_model(s)
    n = rows.height
    ids = rows["chunk_id"] if n else pl.Series("chunk_id", [], dtype=pl.Utf8)
    fps = embedding_fingerprints(emb) if n else np.zeros(0, np.uint64)
    plan = plan_layout(s, ids, fps, model, refit)
    base = {"embedding_model": model, "dim": int(emb.shape[1]) if emb.size else 0,
            "layout": layout_settings(s), "chunks": n, "store_generation": gen, "format": FORMAT}
    if plan.reason is None:
        out, info, meta = place_layout(s, emb, ids, fps, plan)
    else:
        log.info("Projection - refit: %s", plan.reason)
        out, info, meta = refit_layout(s, emb, ids, fps)
        meta["refit_reason"] = plan.reason
    faults.point("projection")
    write_with_info(out, s.paths.projection, {**base, **info})
    _report(progress, 55, f"layout {meta['method']}")
    return {"chunks": n, "dim": base["dim"], **meta, "store_generation": gen,
            "seconds": round(time.perf_counter() - t0, 3)}


def run_clusters(s: Settings, refit: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Cluster ids for every chunk: placed chunks take their neighbours' majority, or HDBSCAN.

    After a placed projection, chunks that kept their place keep their cluster id and each
    placed chunk takes the majority cluster of its k most similar kept chunks (noise when most
    of them are noise). After a refit (or with ``refit=True``): HDBSCAN on the 2-D layout, near-
    duplicate clusters merged, close noise reassigned, ids kept stable across runs.

    Args:
        s: settings.
        refit: recluster with HDBSCAN even after a placed projection.
        progress: gets the stage's "analyzing" update.

    Returns:
        JSON-able metadata: ``method`` ("placed" or "hdbscan"), cluster count, noise shares.
    """
    t0 = time.perf_counter()
    _report(progress, 60, "clustering")
    rows, emb, _ = load_store(s)
    fps = embedding_fingerprints(emb) if rows.height else np.zeros(0, np.uint64)
    proj, pinfo = _current_projection(s, rows, fps)
    prev_frame, cinfo = read_with_info(s.paths.clusters)
    prev = dict(zip(prev_frame["chunk_id"].to_list(), prev_frame["cluster_id"].to_list())) \
        if prev_frame is not None else {}
    ids = rows["chunk_id"] if rows.height else pl.Series("chunk_id", [], dtype=pl.Utf8)
    alignment = None if refit else align_clusters(ids, fps, prev_frame, pinfo, cinfo)
    if rows.height == 0:
        res_labels = np.zeros(0, dtype=np.int64)
        info: dict[str, Any] = {"method": "hdbscan", "n_clusters": 0, "noise_before": 0.0, "noise_after": 0.0,
                                "merged": 0}
    elif alignment is not None:
        res_labels, info = place_clusters(s, emb, alignment)
    else:
        res_labels, info = hdbscan_clusters(s, proj.select("x", "y").to_numpy(), emb, ids.to_list(), prev)
    kept = len({int(c) for c in res_labels if c >= 0} & {int(c) for c in prev.values() if c >= 0})
    out = pl.DataFrame({"chunk_id": ids, "cluster_id": res_labels.astype(np.int64), "emb_fp": fps},
                       schema={"chunk_id": pl.Utf8, "cluster_id": pl.Int64, "emb_fp": pl.UInt64})
    write_with_info(out, s.paths.clusters, {"format": FORMAT, "fit_id": pinfo.get("fit_id"), "method": info["method"]})
    return {**info, "chunks": rows.height, "ids_kept_from_previous_run": kept,
            "seconds": round(time.perf_counter() - t0, 3)}


def _current_projection(s: Settings, rows: pl.DataFrame, fps: np.ndarray) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The projection and its metadata, checked to be of the current store's chunks and embeddings.

    Raises:
        StoreError: no projection yet, or one older than the store.
    """
    proj, pinfo = read_with_info(s.paths.projection)
    if proj is None:
        raise StoreError("no projection yet: materialize `projection` first")
    if proj.height != rows.height or (rows.height and proj["chunk_id"].to_list() != rows["chunk_id"].to_list()):
        raise StoreError("the projection is older than the store: materialize `projection` again")
    if "emb_fp" in proj.columns and not np.array_equal(proj["emb_fp"].to_numpy(), fps):
        raise StoreError("the projection is older than the store: materialize `projection` again")
    return proj, pinfo


def default_labeler(s: Settings, embedder: Any | None = None) -> LabelChain:
    """:func:`~brb_pipeline.core.insights.labels.make_labeler` with what the home provides: the
    store's embedding model (``embedder``, loaded from the settings when None) and the contacts'
    names from brb.db, which are never used in labels. Without a loadable embedding model the
    labels are plain c-TF-IDF (logged)."""
    if embedder is None:
        embedder = _label_embedder(s)
    return make_labeler(s.labeler_model_path, embedder=embedder, names=_label_names(s), seed=s.seed)


def _label_names(s: Settings) -> list[str]:
    """The contacts' display names from brb.db (direct chats only), never label words."""
    if not s.brb_db.exists():
        return []
    contacts = metadata.read_contacts(s.brb_db)
    if "kind" in contacts.columns:  # group chats are named after topics ("Book club"), not people
        contacts = contacts.filter(pl.col("kind") == "direct")
    return [n for n in contacts["display_name"].to_list() if n]


def _label_embedder(s: Settings) -> Any | None:
    """The store's embedding model for label re-ranking, or None (logged) when it cannot load."""
    try:
        from brb_pipeline.core.embedding.models import load_embedder

        return load_embedder(s.embedding)
    except BrbError as e:
        log.warning("Labels - no embedding model for label re-ranking (%s): c-TF-IDF labels only",
                    type(e).__name__)
        return None


def subtopic_rerank(s: Settings, embedder: Any | None = None) -> EmbeddingLabeler | None:
    """The re-rank of the map's sub-topic labels: the cluster labels' (the store's embedding
    model, the contacts' names dropped) with 2-word labels; None without an embedding model."""
    embedder = embedder if embedder is not None else _label_embedder(s)
    if embedder is None:
        return None
    return EmbeddingLabeler(embedder, names=_label_names(s), label_terms=SUBTOPIC_TERMS)


def run_labels(s: Settings, labeler: LabelChain | None = None, embedder: Any | None = None,
               progress: Progress | None = None) -> dict[str, Any]:
    """A readable label per cluster, cached by cluster membership and labeler kind.

    A cluster keeps its previous label while its membership overlaps the one that label was made
    from by at least :data:`~brb_pipeline.core.insights.labels.LABEL_KEEP_OVERLAP` (Jaccard);
    exact memberships seen before come from the label cache; only the rest are labelled again.

    Args:
        s: settings.
        labeler: the labeler chain (default: :func:`default_labeler` with ``embedder``).
        embedder: the store's embedding model, for the default labeler's re-rank (loaded from
            the settings when None).
        progress: gets the stage's "analyzing" update.
    """
    t0 = time.perf_counter()
    _report(progress, 75, "labelling clusters")
    docs, members = _cluster_docs(s)
    labeler = labeler or default_labeler(s, embedder)
    kind = labeler.kind
    keep, bases = _keepable_labels(s, kind, members)
    out, hits = label_clusters(labeler, docs, members, LabelCache(s.paths.label_cache),
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
    write_with_info(table, s.paths.cluster_labels, {"format": FORMAT, "labeler": kind})
    return {
        "clusters": len(out),
        "labelled_now": len(out) - hits - len(keep),
        "from_cache": hits,
        "kept_by_overlap": len(keep),
        "labeler": labeler.name,
        "labeler_kind": kind,
        "llm_fallbacks": sum(lab.source == "llm-fallback" for lab in out),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _cluster_docs(s: Settings) -> tuple[list[ClusterDocs], dict[int, list[str]]]:
    """What the labeler sees of each cluster (ids >= 0, ascending), and each cluster's chunk ids."""
    rows, emb, _, store_model = load_store_with_model(s, ("chunk_id", "content"))
    cl = files.read_parquet(s.paths.clusters)
    labels = cl["cluster_id"].to_numpy() if cl.height else np.zeros(0, dtype=np.int64)
    contents = rows["content"].to_list() if rows.height else []
    ids = rows["chunk_id"].to_list() if rows.height else []
    docs, members = [], {}
    corpus_mean = emb.mean(axis=0) if emb.size else None
    for cid in sorted({int(c) for c in labels if c >= 0}):
        idx = np.flatnonzero(labels == cid)
        members[cid] = [ids[i] for i in idx]
        reps = representatives(emb, labels, cid, 8, s.seed)
        docs.append(ClusterDocs(cid, [contents[i] for i in idx], [contents[i] for i in reps],
                                centroid=emb[idx].mean(axis=0), centroid_model=store_model,
                                corpus_mean=corpus_mean))
    return docs, members


def _keepable_labels(s: Settings, kind: str, members: dict[int, list[str]]
                     ) -> tuple[dict[int, ClusterLabel], dict[int, set[str]]]:
    """The previous run's labels still good for ``members`` (see
    :func:`~brb_pipeline.core.insights.labels.keep_by_overlap`); none when they were made by
    another labeler kind."""
    prev, info = read_with_info(s.paths.cluster_labels)
    if prev is None or info.get("labeler") != kind or "made_from" not in prev.columns:
        return {}, {}
    return keep_by_overlap(prev.iter_rows(named=True), members)


#: ``run_map``'s metadata in an encrypted home, which keeps no map files (they hold snippets and names).
MAP_WHEN_OPENED = "rendered when opened (`brb insights --open`): an encrypted home keeps no map files"
MAP_TITLE = "brb — conversation map"


def map_points(s: Settings) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(points, per-cluster summary) the map draws: the store's chunks (vectors not read) with the
    staged layout, clusters and labels and the contacts' names.

    Raises:
        BrbError: no insights yet.
    """
    points, summary, _, _ = _map_data(s, vectors=False)
    return points, summary


def _map_data(s: Settings, vectors: bool) -> tuple[pl.DataFrame, pl.DataFrame, np.ndarray | None, str | None]:
    """:func:`map_points`, and with ``vectors`` the stored embeddings in the points' order and
    their model id (what the sub-topic labels are re-ranked against)."""
    if not s.paths.cluster_labels.exists():
        raise BrbError(f"no insights map in {s.home}: run `brb ingest` (or `brb demo`) first")
    rows, emb, _, model = load_store_with_model(s, ("chunk_id", "contact_id", "start_ts", "content"), vectors)
    rows = rows.with_row_index("_row")
    proj = files.read_parquet(s.paths.projection)
    cl = files.read_parquet(s.paths.clusters)
    labels = files.read_parquet(s.paths.cluster_labels)
    contacts = metadata.read_contacts(s.brb_db).select("contact_id", "display_name")
    points = (
        rows.select("chunk_id", "contact_id", "start_ts", "content", "_row")
        .join(proj.select("chunk_id", *COORDS), on="chunk_id", how="left")
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
                "contact", "date", "start_ts", "snippet", "content", "_row")  # content: sub-topics, never drawn
    )
    order = points["_row"].to_numpy()
    points = points.drop("_row")
    summary = cluster_summary(points)
    summary = summary.join(labels.select("cluster_id", "terms", "label_source"), on="cluster_id", how="left") \
        if "terms" not in summary.columns else summary
    return points, summary, (emb[order] if vectors and emb.size else None), model


def _write(s: Settings, out_dir: Path, points: pl.DataFrame, summary: pl.DataFrame,
           emb: np.ndarray | None, model: str | None) -> MapFiles:
    """The map files in ``out_dir``, the sub-topic labels re-ranked with the store's embedding
    model (``emb``: the stored embeddings in the points' order)."""
    return write_map(out_dir, points, summary, title=MAP_TITLE, subtopic_rerank=subtopic_rerank(s),
                     embeddings=emb, embedding_model=model)


def run_map(s: Settings, progress: Progress | None = None) -> dict[str, Any]:
    """The per-cluster summary in brb.db, and the interactive 2-D/3-D map and a PNG preview in
    ``<home>/insights`` (in an encrypted home no map file: :func:`private_map` draws it when it
    is opened); ``progress`` gets the stage's "analyzing" updates (the last one at 100%)."""
    t0 = time.perf_counter()
    _report(progress, 85, "drawing the map")
    encrypted = keys.encrypted(s.home)
    points, summary, emb, model = _map_data(s, vectors=not encrypted)
    metadata.replace_clusters(s.brb_db, summary)
    if encrypted:
        written: dict[str, Any] = {"map": MAP_WHEN_OPENED}
    else:
        mf = _write(s, s.insights_dir, points, summary, emb, model)
        written = {"html": str(mf.html), "html_3d": str(mf.html_3d), "png": str(mf.png)}
    faults.point("map_written")
    clusters = int(summary.filter(pl.col("cluster_id") >= 0).height)
    _report(progress, 100, f"{clusters} clusters")
    return {
        "clusters": clusters,
        "points": points.height,
        **written,
        "summary_markdown": summary_markdown(summary),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def render_map(s: Settings, out_dir: Path) -> MapFiles:
    """Draw the map (2-D and 3-D HTML, PNG) into ``out_dir`` from what the home keeps.

    Raises:
        BrbError: no insights yet, or ``out_dir`` inside an encrypted home.
    """
    out_dir = Path(out_dir).resolve()
    if keys.encrypted(s.home) and out_dir.is_relative_to(Path(s.home).resolve()):
        raise BrbError(f"{out_dir} is inside the encrypted home {s.home}: the map holds message snippets "
                       "and names, write it elsewhere")
    return _write(s, out_dir, *_map_data(s, vectors=True))


@contextmanager
def private_map(s: Settings) -> Iterator[MapFiles]:
    """The map drawn into a private temporary folder outside the home (mode 0700), deleted when
    the block ends: how an encrypted home's map is opened.

    Raises:
        BrbError: no insights yet, or the temporary folder would be inside the home (``TMPDIR``).
    """
    d = Path(tempfile.mkdtemp(prefix="brb-map-"))
    try:
        yield render_map(s, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_insights(s: Settings, refit: bool = False, labeler: LabelChain | None = None,
                 progress: Progress | None = None) -> dict[str, dict[str, Any]]:
    """Every insights stage in order, outside Dagster (``brb insights --refit`` uses it).

    Args:
        s: settings.
        refit: refit the layout and recluster even after a small change.
        labeler: optional labeler chain (default: :func:`default_labeler`).
        progress: gets the stages' "analyzing" updates, as the assets pass it.

    Returns:
        Stage name -> that stage's metadata.
    """
    return {
        "projection": run_projection(s, refit=refit, progress=progress),
        "clusters": run_clusters(s, refit=refit, progress=progress),
        "cluster_labels": run_labels(s, labeler, progress=progress),
        "insights_map": run_map(s, progress=progress),
    }


def _snippet(col: pl.Expr) -> pl.Expr:
    """First message lines of a chunk, cut to SNIPPET_CHARS (for the map's hover only)."""
    return col.str.slice(0, SNIPPET_CHARS).str.replace_all("\n", " · ")
