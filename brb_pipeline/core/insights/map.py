"""The insights map: an offline interactive 2-D page, a 3-D plotly page, a PNG preview, a summary.

Everything is local-first, nothing is fetched when a page is viewed: the 2-D page is one small
self-contained HTML file (inline JS drawing on a canvas, the points inline as compact JSON:
integer coordinates, cluster and contact indices, a short snippet), with a search box, a cluster
list that opens a cluster's conversations, and a hover card; the 3-D page embeds plotly.js
inline (~4.6 MB). The PNG is drawn with matplotlib's Agg backend, its labels placed by
adjustText (https://github.com/Phlya/adjustText) and any label still overlapping a larger
cluster's label left out. Files are written to a
temporary name and renamed into place, so a failed run keeps the previous map.

Points are one row per chunk with columns ``x, y, z, cluster_id, label, contact, date, snippet``
(``snippet`` is a short text the caller has already truncated; the 2-D page cuts it further to
:data:`HTML_SNIPPET_CHARS`). ``x, y`` is the 2-D layout; the
3-D view uses ``x3, y3, z3`` when given (UMAP's separate 3-D layout), else ``x, y, z``. The HTML
hover shows contact, date and snippet: the map is the user's own local file.
:func:`summary_markdown`, which goes to Dagster metadata, carries labels, counts and dates only,
never message text.
"""

from __future__ import annotations

import html
import json
import logging
import os
import tempfile
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

log = logging.getLogger(__name__)

POINT_COLUMNS = ("x", "y", "z", "cluster_id", "label", "contact", "date", "snippet")
NOISE_COLOR = "#c8c8c8"
# Tableau-20-like palette, cycled; noise is always light grey.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
    "#f7b6d2", "#dbdb8d", "#9edae5", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
)


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


def _color(cluster_id: int) -> str:
    return NOISE_COLOR if cluster_id < 0 else PALETTE[cluster_id % len(PALETTE)]


def _trace_name(cluster_id: int, label: str, size: int) -> str:
    return f"{html.escape(label)} ({size})" if cluster_id >= 0 else f"Unclustered ({size})"


def _hover(df: pl.DataFrame) -> list[str]:
    # Plotly renders a subset of HTML in hover text: escape user text so "<b>" stays literal.
    out = []
    for label, contact, date, snippet in zip(df["label"], df["contact"], df["date"],
                                             df["snippet"]):
        out.append(f"<b>{html.escape(label)}</b><br>{html.escape(contact)} · "
                   f"{html.escape(date)}<br>{html.escape(snippet)}")
    return out


def map_subtitle(df: pl.DataFrame, summary: pl.DataFrame) -> str:
    """One line of counts and dates: ``"1,461 chunks · 24 clusters · 21% unclustered · 2019-01-03 – 2024-05-01"``."""
    clusters = int((summary["cluster_id"] >= 0).sum()) if summary.height else 0
    noise = int((df["cluster_id"] < 0).sum())
    parts = [f"{df.height:,} chunks", f"{clusters} clusters"]
    if df.height:
        parts.append(f"{100 * noise / df.height:.0f}% unclustered")
    days = df.filter(pl.col("date") != "")["date"].str.slice(0, 10)
    if days.len():
        parts.append(f"{days.min()} – {days.max()}")
    return " · ".join(parts)


def figure_3d(df: pl.DataFrame, summary: pl.DataFrame, title: str) -> Any:
    """Plotly 3-D figure: one trace per cluster, label text at each cluster's median point."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for row in summary.iter_rows(named=True):
        part = df.filter(pl.col("cluster_id") == row["cluster_id"])
        fig.add_trace(go.Scatter3d(
            x=part["x3"].to_numpy(), y=part["y3"].to_numpy(), z=part["z3"].to_numpy(),
            mode="markers", name=_trace_name(row["cluster_id"], row["label"], row["size"]),
            marker={"size": 2 if df.height > 5000 else 3, "color": _color(row["cluster_id"]),
                    "opacity": 0.7},
            text=_hover(part), hovertemplate="%{text}<extra></extra>",
        ))
    named = summary.filter(pl.col("cluster_id") >= 0)
    if named.height:
        fig.add_trace(go.Scatter3d(
            x=named["x3"].to_numpy(), y=named["y3"].to_numpy(), z=named["z3"].to_numpy(),
            mode="text", text=[html.escape(s) for s in named["label"]], name="Labels",
            hoverinfo="skip", textfont={"size": 11, "color": "#111"}))
    fig.update_layout(title=f"{title} (3-D)", template="plotly_white", height=800,
                      legend={"itemsizing": "constant"},
                      scene={"xaxis": {"visible": False}, "yaxis": {"visible": False},
                             "zaxis": {"visible": False}})
    return fig


# ---------------------------------------------------------------- the PNG

PNG_SIZE = (12.0, 9.0)  # inches, at PNG_DPI: 1,440 x 1,080 pixels
PNG_DPI = 120
PNG_MAX_LABELS = 30
PNG_STATIC_POINTS = 250  # labels are repelled from at most this many occupied grid cells
PNG_LABEL_ITERATIONS = 200  # adjustText steps (a fixed count: the same picture every run)
LABEL_PAD = 1.08  # labels keep this factor of their own box clear of each other


def point_density(xy: np.ndarray, k: int = 10) -> np.ndarray:
    """Local density rank of each point of a (n, 2) layout, 0 (sparsest) to 1 (densest).

    The distance to the k-th nearest neighbour (scipy's KD-tree), ranked: a rank is robust to
    UMAP's uneven scales, and the same in a map of 100 or 100,000 points.
    """
    n = len(xy)
    if n < 3:
        return np.ones(n)
    from scipy.spatial import cKDTree

    dist, _ = cKDTree(xy).query(xy, k=min(k, n - 1) + 1)
    order = np.argsort(-dist[:, -1], kind="stable")  # far neighbour = sparse first
    rank = np.empty(n)
    rank[order] = np.arange(n) / (n - 1)
    return rank


def _view_limits(xy: np.ndarray, centres: np.ndarray) -> tuple[tuple[float, float], ...]:
    """Axis limits: 0.5-99.5 percentile of the points (a few far outliers no longer shrink the
    map to a corner), widened to hold every labelled centre, plus a margin for labels."""
    if not len(xy):
        return (0.0, 1.0), (0.0, 1.0)
    lo, hi = np.percentile(xy, 0.5, axis=0), np.percentile(xy, 99.5, axis=0)
    if len(centres):
        lo, hi = np.minimum(lo, centres.min(axis=0)), np.maximum(hi, centres.max(axis=0))
    span = np.maximum(hi - lo, 1e-9)
    lo, hi = lo - 0.08 * span, hi + 0.08 * span
    return (float(lo[0]), float(hi[0])), (float(lo[1]), float(hi[1]))


def _point_area(n: int) -> float:
    """Marker area (points^2): large on a small map, small on a big one so cores stay legible."""
    return float(np.clip(24_000 / max(n, 1), 1.5, 40.0))


def write_png(path: Path, df: pl.DataFrame, summary: pl.DataFrame, title: str) -> None:
    """Static preview (matplotlib Agg), labels placed by adjustText.

    Points are coloured by cluster and shaded by local density (dense cores full colour,
    sparse edges lighter, drawn underneath); unclustered points are small and light grey. The
    ``PNG_MAX_LABELS`` largest clusters get a label sized by cluster size, repelled from each
    other and from the points (adjustText), tied to the cluster centre by a thin line; a label
    still overlapping a larger cluster's label after placement is left out (see
    :func:`drop_overlapping`). Title, counts and date range at the top, a key at the bottom.
    """
    fig, _ = draw_png(df, summary, title)
    fig.savefig(path, format="png")


def draw_png(df: pl.DataFrame, summary: pl.DataFrame, title: str) -> tuple[Any, list]:
    """The PNG's figure and its label text artists (visible ones are the placed labels)."""
    # The object-oriented Agg API: no pyplot global state, no display needed, thread-safe.
    import matplotlib.patheffects as pe
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import to_rgb
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=PNG_SIZE, dpi=PNG_DPI, facecolor="white")
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.01, 0.06, 0.98, 0.86))
    ax.set_axis_off()
    named = summary.filter(pl.col("cluster_id") >= 0) if summary.height else summary
    labelled = named.head(PNG_MAX_LABELS)
    centres = labelled.select("x", "y").to_numpy() if labelled.height else np.empty((0, 2))
    xy = df.select("x", "y").to_numpy() if df.height else np.empty((0, 2))
    (x0, x1), (y0, y1) = _view_limits(xy, centres)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    area = _point_area(df.height)

    noise = df.filter(pl.col("cluster_id") < 0)
    ax.scatter(noise["x"].to_numpy(), noise["y"].to_numpy(), s=area * 0.6, c="#d4d4d4",
               linewidths=0, alpha=0.7, zorder=1, rasterized=True)
    clustered = df.filter(pl.col("cluster_id") >= 0)
    if clustered.height:
        cxy = clustered.select("x", "y").to_numpy()
        dens = point_density(cxy)
        base = np.array([to_rgb(_color(c)) for c in clustered["cluster_id"].to_list()])
        light = 0.55 * (1 - dens)[:, None]  # sparse points blend towards white
        rgb = base * (1 - light) + light
        order = np.argsort(dens, kind="stable")  # dense cores drawn last, on top
        ax.scatter(cxy[order, 0], cxy[order, 1], s=area, c=rgb[order], linewidths=0,
                   alpha=0.9, zorder=2, rasterized=True)

    texts = []
    if labelled.height:
        total = max(1, df.height)
        for row in labelled.iter_rows(named=True):
            size = 8 + 5 * min(1.0, (row["size"] / total / 0.08) ** 0.5)  # 8-13 pt
            # "$" would start matplotlib mathtext ("$50 rent" fails to render): escape it.
            label = textwrap.fill(row["label"], 24).replace("$", r"\$")
            texts.append(ax.text(row["x"], row["y"], label, fontsize=size, ha="center",
                                 va="center", zorder=4, color="#1a1a1a", fontweight="bold",
                                 linespacing=1.0,
                                 path_effects=[pe.withStroke(linewidth=3, foreground="white")]))
        _place_labels(ax, texts, xy, centres)

    fig.text(0.015, 0.965, title, fontsize=16, fontweight="bold", va="center", color="#111")
    fig.text(0.015, 0.93, map_subtitle(df, summary), fontsize=11, va="center", color="#555")
    handles = [Line2D([], [], marker="o", ls="", color=PALETTE[0], markersize=6,
                      label="one point = one chunk (a few consecutive messages), "
                            "colour = cluster, darker = denser"),
               Line2D([], [], marker="o", ls="", color="#d4d4d4", markersize=6,
                      label=f"unclustered ({int((df['cluster_id'] < 0).sum()):,})")]
    fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.01, 0.005), ncol=2,
               frameon=False, fontsize=9, handletextpad=0.3, columnspacing=1.5)
    return fig, texts


def _place_labels(ax: Any, texts: list, xy: np.ndarray, centres: np.ndarray) -> None:
    """adjustText: labels pushed off each other and off the occupied parts of the map."""
    from adjustText import adjust_text

    static = occupied_cells(xy, ax.get_xlim(), ax.get_ylim())
    _, patches = adjust_text(
        texts, x=static[:, 0], y=static[:, 1], ax=ax, target_x=centres[:, 0],
        target_y=centres[:, 1], expand=(1.15, 1.35), force_text=(0.3, 0.5),
        force_static=(0.05, 0.1), ensure_inside_axes=True, iter_lim=PNG_LABEL_ITERATIONS,
        min_arrow_len=12, arrowprops={"arrowstyle": "-", "color": "#666", "lw": 0.6,
                                      "alpha": 0.8})
    drop_overlapping(ax.figure, texts)
    for patch in patches or []:
        # adjustText ties each leader line to its text (patchA): a hidden label loses its line.
        text = getattr(patch, "patchA", None) or getattr(getattr(patch, "arrow_patch", None),
                                                        "patchA", None)
        if text is not None and not text.get_visible():
            patch.set_visible(False)


def occupied_cells(xy: np.ndarray, xlim: tuple[float, float], ylim: tuple[float, float], *,
                   grid: tuple[int, int] = (48, 36), limit: int = PNG_STATIC_POINTS) -> np.ndarray:
    """Centres (data units) of the grid cells holding points, the fullest ``limit`` of them.

    adjustText's cost per step is texts x static points; a few hundred cell centres stand for
    the points as well as all of them do (a label is larger than a cell) at a fixed cost.

    Returns:
        (m, 2) array, m <= limit.
    """
    if not len(xy):
        return np.empty((0, 2))
    gx, gy = grid
    fx = (xy[:, 0] - xlim[0]) / max(xlim[1] - xlim[0], 1e-12)
    fy = (xy[:, 1] - ylim[0]) / max(ylim[1] - ylim[0], 1e-12)
    inside = (fx >= 0) & (fx < 1) & (fy >= 0) & (fy < 1)
    cells = (np.floor(fy[inside] * gy) * gx + np.floor(fx[inside] * gx)).astype(np.int64)
    ids, counts = np.unique(cells, return_counts=True)
    ids = ids[np.argsort(-counts, kind="stable")[:limit]]
    cx = xlim[0] + (ids % gx + 0.5) / gx * (xlim[1] - xlim[0])
    cy = ylim[0] + (ids // gx + 0.5) / gy * (ylim[1] - ylim[0])
    return np.column_stack([cx, cy])


def drop_overlapping(fig: Any, texts: list, pad: float = LABEL_PAD) -> int:
    """Hide every label whose box (grown by ``pad``) meets a kept label's box.

    ``texts`` are in priority order (largest cluster first), so a small cluster's label gives
    way. Boxes are the text artists' own window extents after a draw (the rendered glyphs).

    Returns:
        how many labels were hidden.
    """
    renderer = fig.canvas.get_renderer()
    kept: list = []
    hidden = 0
    for t in texts:
        box = t.get_window_extent(renderer).expanded(pad, pad)
        if any(box.overlaps(k) for k in kept):
            t.set_visible(False)
            hidden += 1
        else:
            kept.append(box)
    return hidden


# ---------------------------------------------------------------- the interactive 2-D map

HTML_SNIPPET_CHARS = 100  # hover and list text per point; the page never holds whole chunks
HTML_GRID = 10_000  # coordinates are integers 0..HTML_GRID (a 1e-4 step is below a pixel)


def map_data(df: pl.DataFrame, summary: pl.DataFrame, title: str, *,
             snippet_chars: int = HTML_SNIPPET_CHARS) -> dict[str, Any]:
    """The compact JSON the 2-D page draws from.

    Coordinates are scaled to integers 0..``HTML_GRID``; contacts and dates are dictionary
    encoded (an index per point); snippets are cut to ``snippet_chars``.

    Returns:
        ``{"title", "subtitle", "clusters": [{"id", "label", "n", "color"}], "contacts",
        "dates", "x", "y", "c" (index into clusters), "k" (contacts), "d" (dates), "s"}``.
    """
    ids = summary["cluster_id"].to_list() if summary.height else []
    if df.height and set(df["cluster_id"].unique().to_list()) - set(ids):
        ids = ids + sorted(set(df["cluster_id"].unique().to_list()) - set(ids))
    index = {c: i for i, c in enumerate(ids)}
    rows = {r["cluster_id"]: r for r in summary.iter_rows(named=True)} if summary.height else {}
    counts = dict(df.group_by("cluster_id").len().iter_rows()) if df.height else {}
    clusters = [{"id": int(c), "label": "Unclustered" if c < 0 else (rows.get(c, {}).get("label") or f"Cluster {c}"),
                 "n": int(counts.get(c, 0)), "color": _color(int(c))} for c in ids]
    contacts, k = _codes(df["contact"].to_list())
    dates, d = _codes(df["date"].str.slice(0, 10).to_list())
    xy = df.select("x", "y").to_numpy() if df.height else np.empty((0, 2))
    if len(xy):
        lo, hi = xy.min(axis=0), xy.max(axis=0)
        scale = HTML_GRID / max(float((hi - lo).max()), 1e-9)
        grid = np.rint((xy - lo) * scale).astype(np.int64)
    else:
        grid = np.empty((0, 2), dtype=np.int64)
    snippets = [s if len(s) <= snippet_chars else s[:snippet_chars - 1].rstrip() + "…"
                for s in df["snippet"].to_list()]
    return {"title": title, "subtitle": map_subtitle(df, summary), "clusters": clusters,
            "contacts": contacts, "dates": dates, "x": grid[:, 0].tolist(),
            "y": grid[:, 1].tolist(), "c": [index[c] for c in df["cluster_id"].to_list()],
            "k": k, "d": d, "s": snippets}


def _codes(values: list[str]) -> tuple[list[str], list[int]]:
    uniq = sorted(set(values))
    pos = {v: i for i, v in enumerate(uniq)}
    return uniq, [pos[v] for v in values]


def html_2d(df: pl.DataFrame, summary: pl.DataFrame, title: str) -> str:
    """The self-contained 2-D page: inline JS on a canvas, the data inline as JSON, no fetches."""
    payload = json.dumps(map_data(df, summary, title), ensure_ascii=False, separators=(",", ":"))
    # Inside <script>, "</script>" or "<!--" in a message would end the block: "<" never
    # appears raw (a JSON string may spell it \u003c).
    payload = payload.replace("<", "\\u003c")
    return (_PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", payload))


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<title>__TITLE__</title>
<style>
*{box-sizing:border-box}body{margin:0;font:13px system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#222;display:flex;height:100vh;overflow:hidden}
#map{flex:1;position:relative;background:#fff}canvas{display:block;width:100%;height:100%;cursor:grab}
#side{width:340px;border-left:1px solid #ddd;display:flex;flex-direction:column;background:#fafafa}
#head{padding:10px 12px;border-bottom:1px solid #ddd}h1{font-size:16px;margin:0 0 2px}#sub{color:#666;font-size:12px}
#q{width:100%;margin-top:8px;padding:6px 8px;border:1px solid #bbb;border-radius:4px;font-size:13px}
#count{color:#666;font-size:12px;margin-top:4px}
#clusters{flex:0 0 38%;overflow:auto;border-bottom:1px solid #ddd}#list{flex:1;overflow:auto}
.cl{padding:4px 12px;cursor:pointer;display:flex;gap:6px;align-items:center}.cl:hover{background:#eee}.cl.sel{background:#e3ecf7}
.sw{width:10px;height:10px;border-radius:50%;flex:none}.cl .n{margin-left:auto;color:#777;font-variant-numeric:tabular-nums}
.it{padding:6px 12px;border-bottom:1px solid #eee}.it .m{color:#666;font-size:12px}
#tip{position:absolute;pointer-events:none;background:rgba(255,255,255,.96);border:1px solid #bbb;border-radius:4px;padding:6px 8px;max-width:320px;display:none;box-shadow:0 1px 4px rgba(0,0,0,.15)}
#tip .m{color:#666;font-size:12px}#hint{position:absolute;left:10px;bottom:8px;color:#888;font-size:12px}
</style></head><body>
<div id="map"><canvas id="cv"></canvas><div id="tip"></div><div id="hint">scroll to zoom · drag to pan · double-click to reset · click a point to open its cluster</div></div>
<div id="side"><div id="head"><h1 id="title"></h1><div id="sub"></div>
<input id="q" type="search" placeholder="Search snippets, contacts, clusters…" autocomplete="off">
<div id="count"></div></div><div id="clusters"></div><div id="list"></div></div>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const D=JSON.parse(document.getElementById("data").textContent);
const N=D.x.length,C=D.clusters,cv=document.getElementById("cv"),ctx=cv.getContext("2d");
const tip=document.getElementById("tip"),q=document.getElementById("q");
document.getElementById("title").textContent=D.title;document.getElementById("sub").textContent=D.subtitle;
const low=new Array(N);for(let i=0;i<N;i++)low[i]=(D.s[i]+" "+D.contacts[D.k[i]]+" "+C[D.c[i]].label).toLowerCase();
let match=null,sel=-1,view={s:1,tx:0,ty:0},W=0,H=0,dpr=1;
const cx=new Float64Array(C.length),cy=new Float64Array(C.length),cn=new Float64Array(C.length);
for(let i=0;i<N;i++){const c=D.c[i];cx[c]+=D.x[i];cy[c]+=D.y[i];cn[c]++}
for(let c=0;c<C.length;c++){if(cn[c]){cx[c]/=cn[c];cy[c]/=cn[c]}}
let X0=1e9,X1=-1e9,Y0=1e9,Y1=-1e9;for(let i=0;i<N;i++){X0=Math.min(X0,D.x[i]);X1=Math.max(X1,D.x[i]);Y0=Math.min(Y0,D.y[i]);Y1=Math.max(Y1,D.y[i])}if(!N){X0=Y0=0;X1=Y1=1}
function fit(){const m=50,s=Math.min((W-2*m)/Math.max(X1-X0,1),(H-2*m)/Math.max(Y1-Y0,1));view={s:s,tx:(W-(X1+X0)*s)/2,ty:(H-(Y1+Y0)*s)/2}}
function sx(x){return x*view.s+view.tx}function sy(y){return H-(y*view.s+view.ty)}
function resize(){dpr=window.devicePixelRatio||1;W=cv.clientWidth;H=cv.clientHeight;cv.width=W*dpr;cv.height=H*dpr;ctx.setTransform(dpr,0,0,dpr,0,0)}
const R=Math.max(1.5,Math.min(6,Math.sqrt(200000/Math.max(N,1))/4));
function on(i){return (match===null||match[i])&&(sel<0||D.c[i]===sel)}
let S0=1;function draw(){ctx.clearRect(0,0,W,H);const r=R*Math.min(3,Math.sqrt(Math.max(1,view.s/S0)));
for(let pass=0;pass<2;pass++)for(let i=0;i<N;i++){const a=on(i);if((pass===1)!==a)continue;
const c=C[D.c[i]];ctx.globalAlpha=a?(c.id<0?0.45:0.85):0.12;ctx.fillStyle=c.id<0?"#bdbdbd":c.color;
ctx.beginPath();ctx.arc(sx(D.x[i]),sy(D.y[i]),c.id<0?r*0.7:r,0,6.2832);ctx.fill()}
ctx.globalAlpha=1;ctx.textAlign="center";ctx.textBaseline="middle";ctx.lineJoin="round";const boxes=[];
const order=C.map((c,i)=>i).filter(i=>C[i].id>=0&&cn[i]).sort((a,b)=>cn[b]-cn[a]);
for(const c of order){if(sel>=0&&c!==sel)continue;const fs=Math.round(11+5*Math.min(1,Math.sqrt(cn[c]/N/0.08)));
ctx.font="600 "+fs+"px system-ui,sans-serif";const t=C[c].label,w=ctx.measureText(t).width,x=sx(cx[c]),y=sy(cy[c]);
const b=[x-w/2-3,y-fs/2-2,x+w/2+3,y+fs/2+2];if(boxes.some(o=>b[0]<o[2]&&o[0]<b[2]&&b[1]<o[3]&&o[1]<b[3]))continue;boxes.push(b);
ctx.lineWidth=4;ctx.strokeStyle="rgba(255,255,255,.9)";ctx.strokeText(t,x,y);ctx.fillStyle="#111";ctx.fillText(t,x,y)}}
function nearest(mx,my){let best=-1,bd=100;for(let i=0;i<N;i++){if(!on(i))continue;const dx=sx(D.x[i])-mx,dy=sy(D.y[i])-my,d=dx*dx+dy*dy;if(d<bd){bd=d;best=i}}return best}
function el(tag,cls,text){const e=document.createElement(tag);if(cls)e.className=cls;if(text!==undefined)e.textContent=text;return e}
function clusters(){const box=document.getElementById("clusters");box.replaceChildren();const m=new Array(C.length).fill(0);
for(let i=0;i<N;i++)if(match===null||match[i])m[D.c[i]]++;
const order=C.map((c,i)=>i).sort((a,b)=>(C[a].id<0)-(C[b].id<0)||m[b]-m[a]);
for(const c of order){if(!m[c])continue;const row=el("div","cl"+(c===sel?" sel":""));row.dataset.c=c;const sw=el("span","sw");
sw.style.background=C[c].id<0?"#bdbdbd":C[c].color;row.append(sw,el("span",null,C[c].label),el("span","n",match===null?String(m[c]):m[c]+" / "+C[c].n));
row.onclick=()=>select(c===sel?-1:c);box.append(row)}
let t=0;for(let i=0;i<N;i++)if(match===null||match[i])t++;
document.getElementById("count").textContent=match===null?N.toLocaleString()+" chunks":t.toLocaleString()+" of "+N.toLocaleString()+" chunks match"}
function list(){const box=document.getElementById("list");box.replaceChildren();if(sel<0){box.append(el("div","it m","Click a cluster or a point to list its conversations."));return}
const ids=[];for(let i=0;i<N;i++)if(on(i))ids.push(i);ids.sort((a,b)=>D.dates[D.d[b]]<D.dates[D.d[a]]?-1:1);
box.append(el("div","it m",C[sel].label+": "+ids.length+" chunks, newest first"));
for(const i of ids.slice(0,400)){const it=el("div","it");it.append(el("div","m",D.contacts[D.k[i]]+" · "+D.dates[D.d[i]]),el("div",null,D.s[i]));box.append(it)}
if(ids.length>400)box.append(el("div","it m",(ids.length-400)+" more; refine the search to see them"))}
function select(c){sel=c;clusters();list();draw()}
q.addEventListener("input",()=>{const t=q.value.trim().toLowerCase();if(!t){match=null}else{match=new Uint8Array(N);for(let i=0;i<N;i++)match[i]=low[i].includes(t)?1:0}clusters();list();draw()});
let drag=null;cv.addEventListener("mousedown",e=>{drag={x:e.clientX,y:e.clientY,tx:view.tx,ty:view.ty,moved:false}});
window.addEventListener("mouseup",e=>{if(drag&&!drag.moved){const r=cv.getBoundingClientRect(),i=nearest(e.clientX-r.left,e.clientY-r.top);if(i>=0)select(D.c[i]);else if(e.target===cv)select(-1)}drag=null});
cv.addEventListener("mousemove",e=>{const r=cv.getBoundingClientRect(),mx=e.clientX-r.left,my=e.clientY-r.top;
if(drag){const dx=e.clientX-drag.x,dy=e.clientY-drag.y;if(Math.abs(dx)+Math.abs(dy)>3)drag.moved=true;view.tx=drag.tx+dx;view.ty=drag.ty-dy;tip.style.display="none";draw();return}
const i=nearest(mx,my);if(i<0){tip.style.display="none";return}tip.replaceChildren(el("div","m",D.contacts[D.k[i]]+" · "+D.dates[D.d[i]]+" · "+C[D.c[i]].label),el("div",null,D.s[i]));
tip.style.display="block";tip.style.left=Math.min(mx+14,W-330)+"px";tip.style.top=Math.min(my+14,H-90)+"px"});
cv.addEventListener("mouseleave",()=>{tip.style.display="none"});
cv.addEventListener("wheel",e=>{e.preventDefault();const r=cv.getBoundingClientRect(),mx=e.clientX-r.left,my=H-(e.clientY-r.top),f=Math.exp(-e.deltaY*0.0015);
view.tx=mx-(mx-view.tx)*f;view.ty=my-(my-view.ty)*f;view.s*=f;draw()},{passive:false});
cv.addEventListener("dblclick",()=>{fit();draw()});
window.addEventListener("resize",()=>{resize();fit();S0=view.s;draw()});
resize();fit();S0=view.s;clusters();list();draw();
</script></body></html>
"""


def write_map(out_dir: Path, points: pl.DataFrame | Mapping[str, Any],
              clusters: pl.DataFrame | None = None, *, title: str = "Conversation map",
              stem: str = "map") -> MapFiles:
    """Write ``<stem>.html`` (2-D), ``<stem>_3d.html`` and ``<stem>.png`` into ``out_dir``.

    Each file is written to a temporary name in ``out_dir`` and renamed into place only when
    all three rendered, so an exception leaves the previous map intact.

    Args:
        out_dir: destination directory (created).
        points: see :func:`as_points`.
        clusters: a :func:`cluster_summary` (computed from ``points`` when omitted).
        title: figure title.
        stem: file name stem.

    Returns:
        :class:`MapFiles` with the three paths.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    df = as_points(points)
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
            (files.html, lambda p: p.write_text(html_2d(df, summary, title), encoding="utf-8")),
            (files.html_3d, lambda p: _write_html(p, figure_3d(df, summary, title))),
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


def _write_html(path: Path, fig: Any) -> None:
    # include_plotlyjs=True inlines plotly.js (~4.6 MB): the page works offline, no CDN.
    fig.write_html(str(path), include_plotlyjs=True, full_html=True,
                   config={"displaylogo": False, "responsive": True})


def cluster_centres(xy: np.ndarray, labels: np.ndarray) -> dict[int, tuple[float, float]]:
    """Median (x, y) per cluster id >= 0 of a (n, 2) layout (where its label is drawn)."""
    out: dict[int, tuple[float, float]] = {}
    for c in np.unique(labels[labels >= 0]).tolist():
        pts = xy[labels == c]
        out[int(c)] = (float(np.median(pts[:, 0])), float(np.median(pts[:, 1])))
    return out
