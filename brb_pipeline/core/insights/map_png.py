"""The map's static PNG preview, drawn with matplotlib's Agg backend.

Points are coloured by cluster and shaded by local density; the largest clusters' labels are
placed by adjustText (https://github.com/Phlya/adjustText), and any label still overlapping a
larger cluster's label is left out.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from brb_pipeline.core.insights.map_style import PALETTE, color, map_subtitle

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
        base = np.array([to_rgb(color(c)) for c in clustered["cluster_id"].to_list()])
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
