"""The 3-D map page: plotly's scatter3d, small enough to open at 64K chunks.

Written as plotly's own ``write_html`` would, a 64K-chunk page was ~20-25 MB: plotly.js inline
(4.8 MB) and, per point, float64 coordinates and a hover string repeating the cluster label with
escaped markup. Here the page carries:

- plotly.js gzip-compressed and base64-encoded, unpacked in the browser by its own
  ``DecompressionStream``: plotly's gl3d bundle (:data:`GL3D_BUNDLE`, 1.75 MB, 0.74 MB packed:
  scatter3d and the core, none of the 2-D trace types), which the browser compiles in about half
  the time of the full bundle; the full bundle of the installed ``plotly`` package (4.8 MB, 2 MB
  packed) when the gl3d file is absent or of another plotly.js version;
- one gzip-compressed JSON of the points: coordinates as integers 0..:data:`GRID` per axis
  (a step of 1/65,535 of the layout's span), contacts and dates as an index into a list of
  each, snippets cut to :data:`~brb_pipeline.core.insights.map_page.HTML_SNIPPET_CHARS` (the 2-D
  page's rule: never a whole chunk), labels once per cluster;
- a small script that rebuilds the traces (one per cluster, so the legend hides and shows
  clusters) and the hover texts, draws them, then runs the label layout of
  :mod:`~brb_pipeline.core.insights.map_3d`.

A Content-Security-Policy forbids every load (no connection, no script or image from anywhere
but the page itself).
"""

from __future__ import annotations

import base64
import functools
import gzip
import html
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from brb_pipeline.core.insights.map_3d import label_layout
from brb_pipeline.core.insights.map_page import cut_snippet
from brb_pipeline.core.insights.map_style import color

#: plotly.js's gl3d partial bundle, as published on npm (``plotly.js-gl3d-dist-min`` 4.1.1, MIT:
#: ``vendor/plotly-LICENSE.txt``), the same plotly.js version as the ``plotly`` package pins.
GL3D_BUNDLE = Path(__file__).with_name("vendor") / "plotly-gl3d.min.js"
GRID = 65_535  # coordinates are integers 0..GRID per axis: 1/65,535 of the span, below a pixel
PLOT_ID = "map3d"


def _codes(values: list[str]) -> tuple[list[str], list[int]]:
    uniq = sorted(set(values))
    pos = {v: i for i, v in enumerate(uniq)}
    return uniq, [pos[v] for v in values]


def trace_name(cluster_id: int, label: str, size: int) -> str:
    """A cluster's legend entry (escaped for plotly's HTML subset)."""
    return f"{html.escape(label)} ({size})" if cluster_id >= 0 else f"Unclustered ({size})"


def data_3d(df: pl.DataFrame, summary: pl.DataFrame) -> dict[str, Any]:
    """The compact points of the 3-D page, grouped by cluster in ``summary``'s order.

    Returns:
        ``{"traces": [{"name", "label", "color", "n"}], "lo": [x, y, z], "step": [x, y, z],
        "q": [xs, ys, zs] (integers 0..GRID, a point's coordinate is lo + q * step),
        "contacts", "dates", "k", "d" (indices into them), "s" (snippets)}``; every text is
        escaped for plotly's hover, which renders a subset of HTML.
    """
    ids = summary["cluster_id"].to_list() if summary.height else []
    extra = sorted(set(df["cluster_id"].unique().to_list()) - set(ids)) if df.height else []
    order = {c: i for i, c in enumerate(ids + extra)}
    rows = {r["cluster_id"]: r for r in summary.iter_rows(named=True)} if summary.height else {}
    df = df.with_columns(pl.col("cluster_id").replace_strict(order, default=None).alias("_o")) \
        .with_row_index("_i").sort("_o", "_i")
    counts = dict(df.group_by("cluster_id").len().iter_rows()) if df.height else {}
    traces = []
    for c in ids + extra:
        label = "Unclustered" if c < 0 else (rows.get(c, {}).get("label") or f"Cluster {c}")
        n = int(counts.get(c, 0))
        if n:
            traces.append({"name": trace_name(c, label, n), "label": html.escape(label),
                           "color": color(int(c)), "n": n})
    xyz = df.select("x3", "y3", "z3").to_numpy() if df.height else np.zeros((0, 3))
    lo = xyz.min(axis=0) if len(xyz) else np.zeros(3)
    step = np.maximum((xyz.max(axis=0) - lo) / GRID, 1e-12) if len(xyz) else np.ones(3)
    q = np.rint((xyz - lo) / step).astype(np.int64) if len(xyz) else np.zeros((0, 3), np.int64)
    contacts, k = _codes([html.escape(v) for v in df["contact"].to_list()])
    dates, d = _codes([html.escape(v) for v in df["date"].to_list()])
    return {"traces": traces, "lo": lo.tolist(), "step": step.tolist(),
            "q": [q[:, i].tolist() for i in range(3)], "contacts": contacts, "dates": dates,
            "k": k, "d": d, "s": [html.escape(cut_snippet(v)) for v in df["snippet"].to_list()]}


def plotly_js_version(code: str) -> str | None:
    """The version in a plotly.js bundle's header comment (``plotly.js ... v4.1.1``)."""
    m = re.search(r"plotly\.js[^\n]*? v(\d+\.\d+\.\d+)", code[:500])
    return m.group(1) if m else None


def plotly_js() -> str:
    """The plotly.js the page carries: the gl3d bundle when it matches the installed plotly's
    version, else the installed full bundle."""
    from plotly.offline import get_plotlyjs

    full = get_plotlyjs()
    if GL3D_BUNDLE.is_file():
        gl3d = GL3D_BUNDLE.read_text(encoding="utf-8")
        if plotly_js_version(gl3d) == plotly_js_version(full):
            return gl3d
    return full


@functools.lru_cache(maxsize=1)
def plotly_js_packed() -> str:
    """:func:`plotly_js`, gzip-compressed and base64-encoded (computed once)."""
    return _pack(plotly_js())


def _pack(text: str) -> str:
    return base64.b64encode(gzip.compress(text.encode("utf-8"), 9, mtime=0)).decode("ascii")


def layout_3d(df: pl.DataFrame, summary: pl.DataFrame, title: str) -> tuple[dict[str, Any], str]:
    """(plotly layout as JSON-ready dict, the label declutter script for this page's plot)."""
    import plotly.graph_objects as go

    scene, script = label_layout(df, summary)  # labels projected, sized, decluttered: map_3d
    layout = go.Layout(title=f"{title} (3-D)", template="plotly_white", height=800,
                       legend={"itemsizing": "constant"}, scene=scene)
    return json.loads(layout.to_json()), script.replace("{plot_id}", PLOT_ID)


# Unpacks plotly.js and the points, rebuilds one trace per cluster, draws, then lays out labels.
LOADER_JS = r"""
(async function () {
  const unpack = async id => {
    const b64 = document.getElementById(id).textContent.trim(), bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    return await new Response(stream).text();
  };
  const gd = document.getElementById('__PLOT__');
  try {
    const code = document.createElement('script');
    code.textContent = await unpack('plotlyjs');
    document.head.appendChild(code);
    performance.mark('brb-plotly');  // phases, for benchmarks/bench_map.py --3d
    const D = JSON.parse(await unpack('points'));
    const M = JSON.parse(document.getElementById('meta').textContent);
    const traces = [];
    let at = 0;
    for (const t of D.traces) {
      const axis = a => { const out = new Float32Array(t.n), q = D.q[a], lo = D.lo[a], st = D.step[a];
                          for (let i = 0; i < t.n; i++) out[i] = lo + q[at + i] * st; return out; };
      const text = new Array(t.n);
      for (let i = 0, j = at; i < t.n; i++, j++)
        text[i] = '<b>' + t.label + '</b><br>' + D.contacts[D.k[j]] + ' · ' + D.dates[D.d[j]] + '<br>' + D.s[j];
      traces.push({type: 'scatter3d', mode: 'markers', name: t.name, x: axis(0), y: axis(1), z: axis(2),
                   marker: {size: M.size, color: t.color, opacity: 0.7}, text: text,
                   hovertemplate: '%{text}<extra></extra>'});
      at += t.n;
    }
    performance.mark('brb-traces');
    await Plotly.newPlot(gd, traces, M.layout, M.config);
    performance.mark('brb-drawn');
    __DECLUTTER__
  } catch (err) {
    gd.textContent = 'The 3-D map could not be drawn in this browser (it needs WebGL and ' +
                     'DecompressionStream): ' + err;
  }
})();
"""

CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; "
       "style-src 'unsafe-inline'; img-src data: blob:; font-src data:")


def html_3d(df: pl.DataFrame, summary: pl.DataFrame, title: str) -> str:
    """The self-contained 3-D page (see the module's docstring); nothing in it loads anything."""
    layout, declutter = layout_3d(df, summary, title)
    meta = {"layout": layout, "size": 2 if df.height > 5000 else 3,
            "config": {"displaylogo": False, "responsive": True}}
    points = _pack(json.dumps(data_3d(df, summary), ensure_ascii=False, separators=(",", ":")))
    script = LOADER_JS.replace("__PLOT__", PLOT_ID).replace("__DECLUTTER__", declutter)
    # "<" escaped: a label holding "</script>" cannot end the JSON block.
    meta_json = json.dumps(meta, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n"
        f"<title>{html.escape(title)} (3-D)</title>\n</head>\n<body style=\"margin:0\">\n"
        f"<div id=\"{PLOT_ID}\" class=\"plotly-graph-div\" style=\"height:800px;width:100%\"></div>\n"
        f"<script id=\"plotlyjs\" type=\"application/octet-stream\">{plotly_js_packed()}</script>\n"
        f"<script id=\"points\" type=\"application/octet-stream\">{points}</script>\n"
        f"<script id=\"meta\" type=\"application/json\">{meta_json}</script>\n"
        f"<script>{script}</script>\n</body>\n</html>\n"
    )
