"""The insights map: an offline interactive 2-D page, a 3-D plotly page, a PNG preview, a summary.

Everything is local-first, nothing is fetched when a page is viewed: the 2-D page
(:mod:`~brb_pipeline.core.insights.map_page`) is one small self-contained HTML file; the 3-D
page (:mod:`~brb_pipeline.core.insights.map_3d_page`) carries plotly.js and its points
gzip-compressed inline (0.8 MB for 1,000 chunks, 4.9 MB at 64K); the PNG preview is
:mod:`~brb_pipeline.core.insights.map_png`. Files are written to a temporary name and renamed
into place, so a failed run keeps the previous map.

Points are one row per chunk with columns ``x, y, z, cluster_id, label, contact, date, snippet``
(``snippet`` is a short text the caller has already truncated; both pages cut it further to
:data:`~brb_pipeline.core.insights.map_page.HTML_SNIPPET_CHARS`). ``x, y`` is the 2-D layout; the
3-D view uses ``x3, y3, z3`` when given (UMAP's separate 3-D layout), else ``x, y, z``. The HTML
hover shows contact, date and snippet: the map is the user's own local file.
:func:`summary_markdown`, which goes to Dagster metadata, carries labels, counts and dates only,
never message text.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from brb_pipeline.core.insights.map_3d_page import html_3d
from brb_pipeline.core.insights.map_page import html_2d
from brb_pipeline.core.insights.map_png import write_png
from brb_pipeline.core.insights.subtopics import subtopics

log = logging.getLogger(__name__)

POINT_COLUMNS = ("x", "y", "z", "cluster_id", "label", "contact", "date", "snippet")


@dataclass
class MapFiles:
    """Paths of the written map files."""

    html: Path
    html_3d: Path
    png: Path


def as_points(points: pl.DataFrame | Mapping[str, Any]) -> pl.DataFrame:
    """Validate and normalize the points table.

    Args:
        points: a polars DataFrame or a dict of equal-length columns with :data:`POINT_COLUMNS`
            (``z`` optional: 0 when absent; ``date`` any type, shown as text), optionally
            ``x3, y3, z3`` (the 3-D layout; with ``x3, y3`` but no ``z3``, ``z`` is taken as
            the 3-D layout's third axis).

    Returns:
        DataFrame with float64 x/y/z/x3/y3/z3, int64 cluster_id, and string
        label/contact/date/snippet.
    """
    df = points if isinstance(points, pl.DataFrame) else pl.DataFrame(dict(points))
    if "z" not in df.columns:
        df = df.with_columns(pl.lit(0.0).alias("z"))
    if {"x3", "y3"} <= set(df.columns) and "z3" not in df.columns:
        df = df.with_columns(pl.col("z").alias("z3"))  # z is then the 3-D layout's third axis
    if not {"x3", "y3", "z3"} <= set(df.columns):
        df = df.with_columns(pl.col("x").alias("x3"), pl.col("y").alias("y3"),
                             pl.col("z").alias("z3"))
    missing = [c for c in POINT_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"Insights map - points lack columns {missing}")
    return df.select(
        *[pl.col(c).cast(pl.Float64) for c in ("x", "y", "z", "x3", "y3", "z3")],
        pl.col("cluster_id").cast(pl.Int64),
        pl.col("label").cast(pl.Utf8).fill_null(""),
        pl.col("contact").cast(pl.Utf8).fill_null(""),
        pl.col("date").cast(pl.Utf8).fill_null(""),
        pl.col("snippet").cast(pl.Utf8).fill_null(""),
    )


def cluster_summary(points: pl.DataFrame | Mapping[str, Any], *, top_contacts: int = 3
                    ) -> pl.DataFrame:
    """One row per cluster (noise last).

    Args:
        points: see :func:`as_points`.
        top_contacts: how many most frequent contacts to list per cluster.

    Returns:
        DataFrame with cluster_id (int64), label, size (int), share (of all points, 0-1),
        top_contacts (", "-joined names, most frequent first), first_date, last_date (text,
        as given in ``date``), and x, y, z, x3, y3, z3 (the cluster's median position in each
        layout, where its label is drawn);
        sorted by size descending, ties by cluster_id, noise (-1) last.
    """
    df = as_points(points)
    total = max(1, df.height)
    if df.height == 0:
        return pl.DataFrame(schema={"cluster_id": pl.Int64, "label": pl.Utf8, "size": pl.UInt32,
                                    "share": pl.Float64, "top_contacts": pl.Utf8,
                                    "first_date": pl.Utf8, "last_date": pl.Utf8,
                                    "x": pl.Float64, "y": pl.Float64, "z": pl.Float64,
                                    "x3": pl.Float64, "y3": pl.Float64, "z3": pl.Float64})
    contacts = (
        df.group_by("cluster_id", "contact").len()
        .sort(["cluster_id", "len", "contact"], descending=[False, True, False])
        .group_by("cluster_id", maintain_order=True)
        .agg(pl.col("contact").head(top_contacts).str.join(", ").alias("top_contacts"))
    )
    dates = df.filter(pl.col("date") != "")
    span = dates.group_by("cluster_id").agg(pl.col("date").min().alias("first_date"),
                                            pl.col("date").max().alias("last_date"))
    summ = (
        df.group_by("cluster_id")
        .agg(pl.col("label").mode().sort().first().alias("label"), pl.len().alias("size"),
             *[pl.col(c).median() for c in ("x", "y", "z", "x3", "y3", "z3")])
        .with_columns((pl.col("size") / total).alias("share"))
        .join(contacts, on="cluster_id", how="left")
        .join(span, on="cluster_id", how="left")
        .with_columns((pl.col("cluster_id") < 0).alias("_noise"))
        .sort(["_noise", "size", "cluster_id"], descending=[False, True, False])
        .drop("_noise")
    )
    return summ.select("cluster_id", "label", "size", "share", "top_contacts", "first_date",
                       "last_date", "x", "y", "z", "x3", "y3", "z3")


def summary_markdown(df: pl.DataFrame, *, max_rows: int = 40, include_contacts: bool = False
                     ) -> str:
    """Markdown table of a :func:`cluster_summary` for Dagster metadata.

    Contains cluster ids, labels, sizes, shares and date spans; never message text. Contact
    names are left out unless ``include_contacts`` (Dagster's event log outlives a delete).

    Args:
        df: output of :func:`cluster_summary`.
        max_rows: rows shown; the rest are summarized in one line.
        include_contacts: add the top-contacts column.
    """
    head = ["Cluster", "Label", "Chunks", "Share", "First", "Last"]
    if include_contacts:
        head.append("Top contacts")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in df.head(max_rows).iter_rows(named=True):
        cells = [str(row["cluster_id"]), _md(row["label"]), str(row["size"]),
                 f"{100 * row['share']:.1f}%", _md(_day(row["first_date"])),
                 _md(_day(row["last_date"]))]
        if include_contacts:
            cells.append(_md(row["top_contacts"] or ""))
        lines.append("| " + " | ".join(cells) + " |")
    if df.height > max_rows:
        rest = df.slice(max_rows)
        lines.append(f"\n{rest.height} more clusters, {int(rest['size'].sum())} chunks.")
    return "\n".join(lines)


def _md(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def _day(text: str | None) -> str:
    return (text or "")[:10]


def write_map(out_dir: Path, points: pl.DataFrame | Mapping[str, Any],
              clusters: pl.DataFrame | None = None, *, title: str = "Conversation map",
              stem: str = "map", subtopic_rerank: Any | None = None,
              embeddings: np.ndarray | None = None, embedding_model: str | None = None) -> MapFiles:
    """Write ``<stem>.html`` (2-D), ``<stem>_3d.html`` and ``<stem>.png`` into ``out_dir``.

    Each file is written to a temporary name in ``out_dir`` and renamed into place only when
    all three rendered, so an exception leaves the previous map intact.

    Args:
        out_dir: destination directory (created).
        points: see :func:`as_points`; a ``content`` column (a polars DataFrame's) adds the
            sub-topic labels of big clusters (:func:`~brb_pipeline.core.insights.subtopics.subtopics`)
            to the 2-D page; the text itself is not written.
        clusters: a :func:`cluster_summary` (computed from ``points`` when omitted).
        title: figure title.
        stem: file name stem.
        subtopic_rerank: re-ranks the sub-topic labels (an ``EmbeddingLabeler``; see
            :func:`~brb_pipeline.core.insights.subtopics.subtopics`), or None.
        embeddings: the stored embeddings in ``points``' row order, for that re-rank, or None.
        embedding_model: their model id.

    Returns:
        :class:`MapFiles` with the three paths.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    df = as_points(points)
    # A ``content`` column (the chunk text, never written out) gives the big clusters sub-topics.
    sub = subtopics(points, names=df["contact"].unique().to_list(), rerank=subtopic_rerank,
                    embeddings=embeddings, embedding_model=embedding_model) \
        if isinstance(points, pl.DataFrame) and "content" in points.columns else None
    summary = clusters if clusters is not None else cluster_summary(df)
    centre_cols = ["x", "y", "z", "x3", "y3", "z3"]
    if summary.height and not set(centre_cols) <= set(summary.columns):
        # A caller's summary without label positions: add them from the points.
        summary = summary.drop([c for c in centre_cols if c in summary.columns]).join(
            cluster_summary(df).select("cluster_id", *centre_cols), on="cluster_id", how="left")
    files = MapFiles(out_dir / f"{stem}.html", out_dir / f"{stem}_3d.html",
                     out_dir / f"{stem}.png")
    tmps: list[tuple[Path, Path]] = []
    try:
        for target, render in (
            (files.html, lambda p: p.write_text(html_2d(df, summary, title, sub), encoding="utf-8")),
            (files.html_3d, lambda p: p.write_text(html_3d(df, summary, title), encoding="utf-8")),
            (files.png, lambda p: write_png(p, df, summary, title)),
        ):
            fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{target.name}.", suffix=".tmp")
            os.close(fd)
            tmps.append((Path(tmp), target))
            render(Path(tmp))
        for tmp, target in tmps:
            os.replace(tmp, target)
    finally:
        for tmp, _ in tmps:
            tmp.unlink(missing_ok=True)
    log.info("Insights map - %d points, %d clusters written to %s", df.height,
             int((summary["cluster_id"] >= 0).sum()) if summary.height else 0, out_dir)
    return files


def cluster_centres(xy: np.ndarray, labels: np.ndarray) -> dict[int, tuple[float, float]]:
    """Median (x, y) per cluster id >= 0 of a (n, 2) layout (where its label is drawn)."""
    out: dict[int, tuple[float, float]] = {}
    for c in np.unique(labels[labels >= 0]).tolist():
        pts = xy[labels == c]
        out[int(c)] = (float(np.median(pts[:, 0])), float(np.median(pts[:, 1])))
    return out
