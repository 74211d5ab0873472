"""Labels of the 3-D map that stay readable as the view turns.

Plotly draws a text trace's labels where their 3-D points land, all of them, so the clusters
near the middle of the layout pile their labels on each other. Here each cluster's label is a
scene annotation instead (plotly projects it to the screen on every frame and drops one that
leaves the view):

- anchored on a real member of the cluster (the one nearest its median, not the empty middle of
  a bent cluster), drawn above it on a short leader line, so no label covers its own points;
- sized by the cluster (10 to 16 px: the biggest read first);
- decluttered on every redraw by a small script (:data:`DECLUTTER_JS`): in order of priority
  (the nearer half of the scene first, then size), a label that would overlap one already shown
  goes below its cluster instead (its leader line flipped), or is hidden when that is taken too;
  the farther half is drawn fainter.

The view is fitted to the 1st-99th percentile of the points on each axis (every label anchor
included), so a few outliers no longer shrink the clusters to the middle of the canvas.
"""

from __future__ import annotations

import html
import json
from typing import Any

import numpy as np
import polars as pl

from brb_pipeline.core.insights.map_style import color

CAMERA_EYE = {"x": 0.95, "y": 0.95, "z": 0.7}

# Runs in the page after plotly drew it; ``{plot_id}`` is the plot's div id (map_3d_page fills it in).
DECLUTTER_JS = r"""
(function () {
  const gd = document.getElementById('{plot_id}');
  const anchors = __ANCHORS__;  // [x, y, z] in the scene's unit cube, in priority order
  let queued = false;
  function depthRank() {
    const cam = (gd._fullLayout && gd._fullLayout.scene && gd._fullLayout.scene.camera) || {};
    const e = cam.eye || {x: 1.25, y: 1.25, z: 1.25}, c = cam.center || {x: 0, y: 0, z: 0};
    const d = anchors.map(a => Math.hypot(a[0] - e.x + c.x, a[1] - e.y + c.y, a[2] - e.z + c.z));
    const sorted = d.slice().sort((p, q) => p - q);
    return d.map(v => v > sorted[Math.floor(sorted.length / 2)]);  // true: the farther half
  }
  function declutter() {
    queued = false;
    const groups = Array.from(gd.querySelectorAll('.infolayer g.annotation-scene, .infolayer g.annotation'));
    if (!groups.length) return;
    const far = depthRank();
    const order = groups.map(g => +g.getAttribute('data-index')).map((i, k) => [i, k])
      .sort((p, q) => (far[p[0]] - far[q[0]]) || (p[0] - q[0]));
    const shown = [];
    const free = r => r.width > 0 && !shown.some(s => r.left < s.right + 2 && r.right > s.left - 2
                                                   && r.top < s.bottom + 1 && r.bottom > s.top - 1);
    for (const [i, k] of order) {
      const g = groups[k];
      g.style.visibility = 'visible';
      const box = g.querySelector('.annotation-text-g') || g;  // the text, not its leader line
      let r = box.getBoundingClientRect();
      if (!free(r)) {  // above its cluster is taken: try below, the leader line flipped
        const path = g.querySelector('.annotation-arrow-g path');
        const m = path && /M([\d.e+-]+),([\d.e+-]+)L([\d.e+-]+),([\d.e+-]+)/.exec(path.getAttribute('d'));
        const lead = m ? Math.abs(+m[4] - +m[2]) : 0;
        const dy = 2 * lead + r.height;
        const below = {left: r.left, right: r.right, top: r.top + dy, bottom: r.bottom + dy, width: r.width};
        if (!m || !free(below)) { g.style.visibility = 'hidden'; continue; }
        box.setAttribute('transform', (box.getAttribute('transform') || '') + ` translate(0,${dy})`);
        path.setAttribute('d', `M${m[3]},${m[4]}L${m[3]},${+m[4] + lead}`);
        r = below;
      }
      g.style.opacity = far[i] ? '0.55' : '1';
      shown.push(r);
    }
    gd.dataset.labelsShown = String(shown.length);
  }
  function later() { if (!queued) { queued = true; requestAnimationFrame(declutter); } }
  gd.on('plotly_afterplot', later);
  gd.on('plotly_relayout', later);
  new MutationObserver(later).observe(gd, {childList: true, subtree: true});
  later();
})();
"""


def label_anchors(df: pl.DataFrame, summary: pl.DataFrame) -> pl.DataFrame:
    """Per named cluster of ``summary`` (in its order, biggest first): the member nearest the
    cluster's median in the 3-D layout. Columns cluster_id, label, size, x3, y3, z3."""
    rows = []
    for row in summary.filter(pl.col("cluster_id") >= 0).iter_rows(named=True):
        part = df.filter(pl.col("cluster_id") == row["cluster_id"]).select("x3", "y3", "z3").to_numpy()
        if part.shape[0] == 0:
            continue
        med = np.median(part, axis=0)
        best = part[int(np.argmin(((part - med) ** 2).sum(axis=1)))]
        rows.append({"cluster_id": row["cluster_id"], "label": row["label"], "size": int(row["size"]),
                     "x3": float(best[0]), "y3": float(best[1]), "z3": float(best[2])})
    schema = {"cluster_id": pl.Int64, "label": pl.Utf8, "size": pl.Int64,
              "x3": pl.Float64, "y3": pl.Float64, "z3": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


def view_ranges(df: pl.DataFrame, anchors: pl.DataFrame, pad: float = 0.06) -> dict[str, list[float]]:
    """Axis ranges: the 1st-99th percentile of the points on each axis, widened to hold every
    label anchor, plus ``pad`` of the span on each side."""
    out = {}
    for col in ("x3", "y3", "z3"):
        v = df[col].to_numpy()
        if v.size == 0:
            out[col] = [-1.0, 1.0]
            continue
        lo, hi = np.percentile(v, [1, 99])
        if anchors.height:
            lo, hi = min(lo, anchors[col].min()), max(hi, anchors[col].max())
        span = max(hi - lo, 1e-9)
        out[col] = [float(lo - pad * span), float(hi + pad * span)]
    return out


def label_layout(df: pl.DataFrame, summary: pl.DataFrame) -> tuple[dict[str, Any], str]:
    """(plotly ``scene`` layout with the axis ranges and one annotation per named cluster,
    the declutter script to run once the plot is drawn)."""
    anchors = label_anchors(df, summary)
    ranges = view_ranges(df, anchors)
    biggest = max(1, int(anchors["size"].max())) if anchors.height else 1
    notes = []
    unit = []
    for a in anchors.iter_rows(named=True):
        notes.append({
            "x": a["x3"], "y": a["y3"], "z": a["z3"], "text": html.escape(a["label"]),
            "showarrow": True, "arrowhead": 0, "arrowwidth": 1, "arrowcolor": color(a["cluster_id"]),
            "ax": 0, "ay": -22, "xanchor": "center", "yanchor": "bottom",
            "font": {"size": round(10 + 6 * (a["size"] / biggest) ** 0.5), "color": "#111"},
            "bgcolor": "rgba(255,255,255,0.8)", "borderpad": 1,
        })
        # where the anchor sits in plotly's scene cube ([-1, 1] per axis with aspectmode "cube")
        unit.append([round(2 * (a[c] - ranges[c][0]) / (ranges[c][1] - ranges[c][0]) - 1, 4)
                     for c in ("x3", "y3", "z3")])
    # a camera nearer than plotly's default (eye 1.25, 1.25, 1.25): the clusters fill the canvas
    scene = {"aspectmode": "cube", "annotations": notes, "camera": {"eye": CAMERA_EYE}}
    for axis, col in zip("xyz", ("x3", "y3", "z3")):
        scene[f"{axis}axis"] = {"visible": False, "range": ranges[col]}
    return scene, DECLUTTER_JS.replace("__ANCHORS__", json.dumps(unit))
