"""The map's interactive 2-D page: one self-contained HTML file (template: ``map_page.html``).

Inline JS draws on a canvas, the points inline as compact JSON (integer coordinates, cluster,
contact and date indices, a short snippet). To explore: a person filter, a month histogram to
brush, a search that rings its matches (Enter zooms to them), a cluster list, a shift-drag area
selection, a point's nearest chunks on the map, chips that undo each filter, a hover card, and
labels placed off their points with a second level (sub-topics) when zoomed in. Nothing is
fetched when the page is viewed (its Content-Security-Policy forbids it).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from brb_pipeline.core.insights.map_style import color, map_subtitle

HTML_SNIPPET_CHARS = 100  # hover and list text per point; the page never holds whole chunks


def cut_snippet(text: str, n: int = HTML_SNIPPET_CHARS) -> str:
    """``text`` cut to ``n`` characters (an ellipsis last when cut): what a map page shows of a chunk."""
    return text if len(text) <= n else text[:n - 1].rstrip() + "…"
HTML_GRID = 10_000  # coordinates are integers 0..HTML_GRID (a 1e-4 step is below a pixel)


def map_data(df: pl.DataFrame, summary: pl.DataFrame, title: str, *,
             snippet_chars: int = HTML_SNIPPET_CHARS, sub: list[dict[str, Any]] | None = None
             ) -> dict[str, Any]:
    """The compact JSON the 2-D page draws from.

    Coordinates are scaled to integers 0..``HTML_GRID``; contacts and dates are dictionary
    encoded (an index per point); snippets are cut to ``snippet_chars``.

    Returns:
        ``{"title", "subtitle", "clusters": [{"id", "label", "n", "color"}], "contacts",
        "dates", "x", "y", "c" (index into clusters), "k" (contacts), "d" (dates), "s",
        "sub": [{"c" (index into clusters), "l" (label), "x", "y", "n", "t", "b", "x0", "x1"}]}``: ``sub`` are the
        sub-topic labels (:func:`~brb_pipeline.core.insights.subtopics.subtopics`), drawn when
        zoomed in.
    """
    ids = summary["cluster_id"].to_list() if summary.height else []
    if df.height and set(df["cluster_id"].unique().to_list()) - set(ids):
        ids = ids + sorted(set(df["cluster_id"].unique().to_list()) - set(ids))
    index = {c: i for i, c in enumerate(ids)}
    rows = {r["cluster_id"]: r for r in summary.iter_rows(named=True)} if summary.height else {}
    counts = dict(df.group_by("cluster_id").len().iter_rows()) if df.height else {}
    clusters = [{"id": int(c), "label": "Unclustered" if c < 0 else (rows.get(c, {}).get("label") or f"Cluster {c}"),
                 "n": int(counts.get(c, 0)), "color": color(int(c))} for c in ids]
    contacts, k = _codes(df["contact"].to_list())
    dates, d = _codes(df["date"].str.slice(0, 10).to_list())
    xy = df.select("x", "y").to_numpy() if df.height else np.empty((0, 2))
    if len(xy):
        lo, hi = xy.min(axis=0), xy.max(axis=0)
        scale = HTML_GRID / max(float((hi - lo).max()), 1e-9)
        grid = np.rint((xy - lo) * scale).astype(np.int64)
    else:
        grid = np.empty((0, 2), dtype=np.int64)
    subs = [_sub_row(t, index[t["cluster_id"]], lo, scale)
            for t in (sub or []) if len(xy) and t["cluster_id"] in index]
    snippets = [cut_snippet(s, snippet_chars) for s in df["snippet"].to_list()]
    return {"title": title, "subtitle": map_subtitle(df, summary), "clusters": clusters,
            "contacts": contacts, "dates": dates, "x": grid[:, 0].tolist(),
            "y": grid[:, 1].tolist(), "c": [index[c] for c in df["cluster_id"].to_list()],
            "k": k, "d": d, "s": snippets, "sub": subs}


def _sub_row(t: dict[str, Any], c: int, lo: np.ndarray, scale: float) -> dict[str, Any]:
    """A sub-topic on the page's grid: its label, size, middle and (when known) extent, where a
    label off its own points can go."""
    def gx(v: float) -> int:
        return int(round((v - lo[0]) * scale))

    def gy(v: float) -> int:
        return int(round((v - lo[1]) * scale))

    row = {"c": c, "l": t["label"], "n": t["n"], "x": gx(t["x"]), "y": gy(t["y"])}
    if {"top", "bottom", "left", "right"} <= set(t):
        row.update(t=gy(t["top"]), b=gy(t["bottom"]), x0=gx(t["left"]), x1=gx(t["right"]))
    return row


def _codes(values: list[str]) -> tuple[list[str], list[int]]:
    uniq = sorted(set(values))
    pos = {v: i for i, v in enumerate(uniq)}
    return uniq, [pos[v] for v in values]


def html_2d(df: pl.DataFrame, summary: pl.DataFrame, title: str,
            sub: list[dict[str, Any]] | None = None) -> str:
    """The self-contained 2-D page: inline JS on a canvas, the data inline as JSON, no fetches."""
    payload = json.dumps(map_data(df, summary, title, sub=sub), ensure_ascii=False, separators=(",", ":"))
    # Inside <script>, "</script>" or "<!--" in a message would end the block: "<" never
    # appears raw (a JSON string may spell it \u003c).
    payload = payload.replace("<", "\\u003c")
    return (_PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", payload))


_PAGE = (Path(__file__).with_name("map_page.html")).read_text(encoding="utf-8")
