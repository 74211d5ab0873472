"""Insights map: offline HTML (2-D, 3-D), PNG preview, summary table, atomic writes."""

from __future__ import annotations

import json
from datetime import date
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from brb_pipeline.core import insights_map
from brb_pipeline.core.insights_map import (
    MapFiles,
    cluster_centres,
    cluster_summary,
    summary_markdown,
    write_map,
)

LABELS = {0: "Travel · flights · airport", 1: "Tarifi · çorbası · mercimek",
          2: "Match <b>&</b> penalty $5"}
SECRET = "the secret snippet text 42"


def _points(n_per: int = 20) -> pl.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    centres = {0: (0, 0), 1: (8, 0), 2: (0, 8), -1: (4, 4)}
    contacts = {0: ["Ayşe", "Ayşe", "Sam"], 1: ["Mehmet"], 2: ["Sam", "Omar"], -1: ["Omar"]}
    for cid, (cx, cy) in centres.items():
        for i in range(n_per if cid >= 0 else 3):
            rows.append({
                "x": cx + rng.normal(0, 0.5), "y": cy + rng.normal(0, 0.5), "z": rng.normal(),
                "cluster_id": cid, "label": LABELS.get(cid, "Unclustered"),
                "contact": contacts[cid][i % len(contacts[cid])],
                "date": date(2024, 1 + cid % 12 if cid >= 0 else 6, 1 + i),
                "snippet": SECRET if i == 0 else f"Me (10:0{i % 10}): line {i}",
            })
    return pl.DataFrame(rows)


def _js(text: str) -> str:
    """How plotly embeds a string in its JSON: ASCII-escaped, with <, > and / as \\u escapes."""
    return (json.dumps(text)[1:-1].replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("/", "\\u002f"))


class _Checker(HTMLParser):
    """Counts tags and collects external script sources; raises nothing on valid HTML."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        src = dict(attrs).get("src") or ""
        if tag == "script" and src.startswith(("http", "//")):
            self.external.append(src)


def test_write_map_offline_html_png_and_3d(tmp_path):
    files = write_map(tmp_path / "insights", _points(), title="Test map")
    assert isinstance(files, MapFiles)
    for path in (files.html, files.html_3d):
        text = path.read_text(encoding="utf-8")
        checker = _Checker()
        checker.feed(text)
        assert text.lstrip().lower().startswith("<!doctype html>") and "</html>" in text
        assert {"html", "head", "body", "script"} <= set(checker.tags)
        assert checker.external == [] and '<script src="http' not in text  # fully offline
        assert "Plotly.newPlot" in text and len(text) > 1_000_000  # plotly.js inlined
        for label in ("Travel · flights · airport", "Tarifi · çorbası · mercimek"):
            assert _js(label) in text  # every cluster label (legend and centre text)
        # Labels, legend and hover are HTML-escaped: plotly would render "<b>" as markup.
        assert _js("Match &lt;b&gt;&amp;&lt;/b&gt; penalty $5 (20)") in text
        assert _js("Match <b>&</b> penalty $5") not in text
        assert _js("Ayşe") in text  # hover carries the contact
    assert "Scatter3d" in files.html_3d.read_text() or '"scatter3d"' in files.html_3d.read_text()
    png = files.png.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    # No temporary files are left behind.
    assert sorted(p.name for p in files.html.parent.iterdir()) == ["map.html", "map.png",
                                                                   "map_3d.html"]


def test_png_has_many_colours(tmp_path):
    from matplotlib.image import imread

    files = write_map(tmp_path, _points(), title="t")
    img = imread(files.png)
    assert img.ndim == 3 and img.shape[0] > 500
    colours = np.unique((img[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 20  # points, labels and title were drawn on the white canvas


def test_failed_render_keeps_previous_map(tmp_path, monkeypatch):
    files = write_map(tmp_path, _points(), title="first")
    before = {p: p.read_bytes() for p in (files.html, files.html_3d, files.png)}

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(insights_map, "write_png", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        write_map(tmp_path, _points(), title="second")
    assert {p: p.read_bytes() for p in before} == before  # nothing replaced
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_cluster_summary_and_markdown():
    pts = _points()
    df = cluster_summary(pts)
    assert df["cluster_id"].to_list() == [0, 1, 2, -1]  # by size, ties by id, noise last
    row0 = df.row(0, named=True)
    assert row0["label"] == LABELS[0] and row0["size"] == 20
    assert row0["top_contacts"].startswith("Ayşe, Sam")  # most frequent first
    assert row0["first_date"] == "2024-01-01" and row0["last_date"] == "2024-01-20"
    assert abs(df["share"].sum() - 1.0) < 1e-9
    assert abs(row0["x"]) < 1 and abs(row0["y"]) < 1  # centre of the blob at (0, 0)
    md = summary_markdown(df)
    assert md.startswith("| Cluster | Label | Chunks |")
    for label in LABELS.values():
        assert label in md
    assert "| 20 |" in md and "Unclustered" in md
    assert SECRET not in md and "line 3" not in md  # never message text
    assert "Ayşe" not in md and "Ayşe" in summary_markdown(df, include_contacts=True)
    assert "2 more clusters, 23 chunks." in summary_markdown(df, max_rows=2)


def test_points_as_dict_and_missing_columns(tmp_path):
    pts = _points().to_dict(as_series=False)
    del pts["z"]  # 2-D only: z defaults to 0
    df = cluster_summary(pts)
    assert df.height == 4
    with pytest.raises(ValueError, match=r"lack columns \['snippet'\]"):
        cluster_summary({k: v for k, v in pts.items() if k != "snippet"})


def test_empty_map_still_writes_files(tmp_path):
    empty = {c: [] for c in ("x", "y", "z", "cluster_id", "label", "contact", "date", "snippet")}
    files = write_map(tmp_path, empty, title="empty")
    assert files.html.stat().st_size > 0 and files.png.read_bytes()[:4] == b"\x89PNG"


def test_cluster_centres_median():
    xy = np.array([[0, 0], [2, 2], [100, 100], [5, 5]], dtype=float)
    assert cluster_centres(xy, np.array([0, 0, 0, -1])) == {0: (2.0, 2.0)}


def test_3d_view_uses_its_own_layout_and_partial_summary_is_completed(tmp_path):
    from brb_pipeline.core.insights_map import as_points, figure_2d, figure_3d

    pts = _points().with_columns((pl.col("x") + 1000).alias("x3"), (pl.col("y") - 1000)
                                 .alias("y3"), (pl.col("z") * 2).alias("z3"))
    df = as_points(pts)
    summ = cluster_summary(df)
    fig3 = figure_3d(df, summ, "t")
    first = df.filter(pl.col("cluster_id") == summ["cluster_id"][0])
    assert np.allclose(fig3.data[0].x, first["x3"].to_numpy())  # 3-D layout, not the 2-D one
    assert np.allclose(fig3.data[-1].x, summ.filter(pl.col("cluster_id") >= 0)["x3"].to_numpy())
    assert np.allclose(figure_2d(df, summ, "t").data[0].x, first["x"].to_numpy())
    # x3, y3 given with z (no z3): z is the 3-D layout's third axis.
    df2 = as_points(pts.drop("z3"))
    assert np.allclose(df2["z3"].to_numpy(), df2["z"].to_numpy())
    assert np.allclose(df2["x3"].to_numpy(), df["x3"].to_numpy())
    # A summary without positions (e.g. joined from elsewhere) still places labels.
    files = write_map(tmp_path, pts, summ.select("cluster_id", "label", "size"), title="t")
    assert files.png.stat().st_size > 10_000


def test_png_labels_do_not_overlap():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from brb_pipeline.core.insights_map import _declutter

    fig = Figure(figsize=(4, 3), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    texts = [ax.text(5, 5, f"Cluster label number {i}", ha="center") for i in range(4)]
    _declutter(fig, texts)  # four labels at the same spot
    r = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(r) for t in texts]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert texts[0].get_position() == (5, 5)  # the first (largest cluster) stays put
