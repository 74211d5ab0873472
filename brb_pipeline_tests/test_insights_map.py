"""Insights map: offline HTML (2-D, 3-D), PNG preview, summary table, atomic writes."""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import json
from datetime import date
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from brb_pipeline.core.insights import map as insights_map
from brb_pipeline.core.insights.map import (
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


def _block(page: str, block_id: str) -> str:
    return page.split(f'<script id="{block_id}" type=')[1].split(">", 1)[1].split("</script>")[0]


def _page_3d(page: str) -> tuple[dict, dict, str]:
    """The 3-D page's parts, unpacked as its loader does: (meta with the plotly layout, the
    points' JSON, that JSON as text)."""
    text = gzip.decompress(base64.b64decode(_block(page, "points"))).decode("utf-8")
    return json.loads(_block(page, "meta")), json.loads(text), text


def _raw(text: str) -> str:
    """How the 2-D page embeds a string: JSON without ASCII escapes, "<" as \\u003c."""
    return json.dumps(text, ensure_ascii=False)[1:-1].replace("<", "\\u003c")


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
    # 3-D: plotly.js inlined (packed), labels and hover escaped for plotly's HTML subset.
    text3 = files.html_3d.read_text(encoding="utf-8")
    assert "Plotly.newPlot" in text3 and "'scatter3d'" in text3 and len(text3) > 500_000
    assert "default-src 'none'" in text3  # CSP: nothing may load
    from brb_pipeline.core.insights.map_3d_page import plotly_js
    assert gzip.decompress(base64.b64decode(_block(text3, "plotlyjs"))).decode() == plotly_js()
    meta, pts3, raw3 = _page_3d(text3)
    assert [t["name"] for t in pts3["traces"]] == [
        "Travel · flights · airport (20)", "Tarifi · çorbası · mercimek (20)",
        "Match &lt;b&gt;&amp;&lt;/b&gt; penalty $5 (20)", "Unclustered (3)"]
    assert [n["text"] for n in meta["layout"]["scene"]["annotations"]] == [
        html.escape(LABELS[0]), html.escape(LABELS[1]), html.escape(LABELS[2])]
    assert "<b>&</b>" not in raw3 and "<b>&</b>" not in text3  # no raw markup from a label
    assert "Ayşe" in pts3["contacts"] and SECRET in pts3["s"]  # hover: contact and snippet
    assert sum(t["n"] for t in pts3["traces"]) == len(pts3["s"]) == len(pts3["q"][2]) == 63
    # 2-D: a small page of its own, no plotly, no URL fetched, the data inline as JSON.
    text2 = files.html.read_text(encoding="utf-8")
    assert "Plotly" not in text2 and len(text2) < 100_000
    assert "http://" not in text2 and "https://" not in text2 and "fetch(" not in text2
    assert "default-src 'none'" in text2  # CSP: the browser itself refuses any network load
    data = json.loads(text2.split('<script id="data" type="application/json">')[1]
                      .split("</script>")[0])
    assert [c["label"] for c in data["clusters"]] == [LABELS[0], LABELS[1], LABELS[2], "Unclustered"]
    assert len(data["x"]) == len(data["s"]) == 63 and max(data["x"] + data["y"]) <= 10_000
    assert "Ayşe" in data["contacts"] and SECRET in data["s"]
    assert _raw("Match <b>&</b> penalty $5") in text2 and "<b>&</b>" not in text2  # no raw markup
    assert data["subtitle"].startswith("63 chunks · 3 clusters · 5% unclustered · 2024-01-01")
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
    from brb_pipeline.core.insights.map import as_points
    from brb_pipeline.core.insights.map_3d_page import data_3d, layout_3d
    from brb_pipeline.core.insights.map_page import map_data

    pts = _points().with_columns((pl.col("x") + 1000).alias("x3"), (pl.col("y") - 1000)
                                 .alias("y3"), (pl.col("z") * 2).alias("z3"))
    df = as_points(pts)
    summ = cluster_summary(df)
    d3 = data_3d(df, summ)
    first = df.filter(pl.col("cluster_id") == summ["cluster_id"][0])
    n0 = d3["traces"][0]["n"]
    assert n0 == first.height
    for a, col in enumerate(("x3", "y3", "z3")):  # 3-D layout, not the 2-D one, to half a step
        got = d3["lo"][a] + np.array(d3["q"][a][:n0]) * d3["step"][a]
        assert np.allclose(got, first[col].to_numpy(), rtol=0, atol=d3["step"][a] / 2 + 1e-9)
        assert max(max(q) for q in d3["q"]) == 65_535 and min(min(q) for q in d3["q"]) == 0
    # labels: scene annotations, each on a member of its cluster in the 3-D layout, biggest first
    layout, declutter = layout_3d(df, summ, "t")
    notes = layout["scene"]["annotations"]
    named = summ.filter(pl.col("cluster_id") >= 0)
    assert [n["text"] for n in notes] == [html.escape(x) for x in named["label"]]
    for note, cid in zip(notes, named["cluster_id"]):
        members = df.filter(pl.col("cluster_id") == cid)
        assert ((members["x3"] == note["x"]) & (members["y3"] == note["y"])
                & (members["z3"] == note["z"])).any()
    assert [n["font"]["size"] for n in notes] == sorted((n["font"]["size"] for n in notes), reverse=True)
    assert "getElementById('map3d')" in declutter
    data = map_data(df, summ, "t")  # the 2-D page: x, y scaled to the grid, not x3
    assert data["x"][0] == round((df["x"][0] - df["x"].min()) * 10_000
                                 / max(np.ptp(df["x"].to_numpy()), np.ptp(df["y"].to_numpy())))
    # x3, y3 given with z (no z3): z is the 3-D layout's third axis.
    df2 = as_points(pts.drop("z3"))
    assert np.allclose(df2["z3"].to_numpy(), df2["z"].to_numpy())
    assert np.allclose(df2["x3"].to_numpy(), df["x3"].to_numpy())
    # A summary without positions (e.g. joined from elsewhere) still places labels.
    files = write_map(tmp_path, pts, summ.select("cluster_id", "label", "size"), title="t")
    assert files.png.stat().st_size > 10_000


def _crowded(n_clusters: int = 24, per: int = 60, seed: int = 1) -> pl.DataFrame:
    """A demo-like map: clusters of unequal size, most crowded near the centre, long labels."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(-1, n_clusters):
        n = per // 3 if c < 0 else int(per * (1 + 3 * rng.random()))
        centre = rng.normal(0, 1.5 if c % 3 else 6, 2)  # two thirds packed in the middle
        xy = centre + rng.normal(0, 0.4, (n, 2))
        for i in range(n):
            rows.append({"x": xy[i, 0], "y": xy[i, 1], "cluster_id": c,
                         "label": f"Topic {c} · word{c} · longer label here",
                         "contact": f"Contact {i % 7}", "date": f"2024-{1 + i % 12:02d}-01",
                         "snippet": f"Me (10:{i % 60:02d}): message {i} " + "text " * 24})
    return pl.DataFrame(rows)


def _boxes(fig, texts):
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in texts if t.get_visible()]


def test_png_labels_do_not_overlap_and_most_are_kept():
    from brb_pipeline.core.insights.map import as_points
    from brb_pipeline.core.insights.map_png import draw_png

    df = as_points(_crowded())
    summ = cluster_summary(df)
    fig, texts = draw_png(df, summ, "t")
    fig.canvas.draw()  # the boxes of the final, rendered figure
    boxes = _boxes(fig, texts)
    assert len(texts) == 24
    assert len(boxes) >= 20  # adjustText made room: few labels had to be dropped
    assert texts[0].get_visible()  # the largest cluster always keeps its label
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    ax_box = fig.axes[0].get_window_extent(fig.canvas.get_renderer())
    assert all(ax_box.x0 - 1 <= b.x0 and b.x1 <= ax_box.x1 + 1 for b in boxes)  # on the canvas


def test_drop_overlapping_keeps_the_first_of_labels_on_one_spot():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from brb_pipeline.core.insights.map_png import drop_overlapping

    fig = Figure(figsize=(4, 3), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    texts = [ax.text(5, 5, f"Cluster label number {i}", ha="center") for i in range(4)]
    texts.append(ax.text(5, 1, "far away", ha="center"))
    assert drop_overlapping(fig, texts) == 3
    assert [t.get_visible() for t in texts] == [True, False, False, False, True]


def test_png_title_counts_and_muted_noise(tmp_path):
    from matplotlib.image import imread

    from brb_pipeline.core.insights.map import as_points
    from brb_pipeline.core.insights.map_png import draw_png

    df = as_points(_points())
    fig, _ = draw_png(df, cluster_summary(df), "My map")
    shown = [t.get_text() for t in fig.texts]
    assert shown[0] == "My map"
    assert shown[1] == "63 chunks · 3 clusters · 5% unclustered · 2024-01-01 – 2024-06-03"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[1] == "unclustered (3)" and "one chunk" in legend[0]
    files = write_map(tmp_path, df, title="t")
    img = (imread(files.png)[..., :3] * 255).astype(int)
    assert img.shape[:2] == (1080, 1440)
    grey = np.all(np.abs(img - 0xd4) <= 8, axis=-1) & (np.ptp(img, axis=-1) <= 4)
    assert grey.sum() > 20  # unclustered points drawn in light grey


def test_html_size_bound_at_demo_size(tmp_path):
    df = _crowded(24, 40)  # ~2,300 points, 140-character snippets (the demo: 1,461)
    files = write_map(tmp_path, df, title="t")
    size = files.html.stat().st_size
    assert df.height > 1_461 and size < 2_000_000
    assert size / df.height < 200  # bytes per point: the page grows ~linearly with chunks
    # Snippets are cut to HTML_SNIPPET_CHARS in the page.
    assert ("text " * 24)[:120] not in files.html.read_text(encoding="utf-8")


def _random_text(rng, n: int, chars: int = 140) -> list[str]:
    """Words of random letters: text that compresses worse than any chat (real chat text gzips
    ~3x, this ~1.7x), so a size bound on it holds for real snippets."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    out = []
    for _ in range(n):
        words = ["".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(30)]
        out.append(" ".join(words)[:chars])
    return out


def test_3d_page_carries_plotlys_gl3d_bundle_of_the_installed_version(monkeypatch, tmp_path):
    """The vendored gl3d bundle is the published file, of the plotly.js version the installed
    plotly pins (an upgrade of plotly fails here until the bundle is replaced too); without it
    the page falls back to plotly's full bundle."""
    from plotly.offline import get_plotlyjs

    from brb_pipeline.core.insights import map_3d_page as page3d

    data = page3d.GL3D_BUNDLE.read_bytes()  # plotly.js-gl3d-dist-min 4.1.1 from npm, unchanged
    assert hashlib.sha256(data).hexdigest() == \
        "aab04dcd9c103a92b18723f8c837712fe820f325d0bcd2421e415e8124a75b9f"
    assert page3d.plotly_js_version(data.decode()) == page3d.plotly_js_version(get_plotlyjs())
    assert page3d.plotly_js() == data.decode()
    monkeypatch.setattr(page3d, "GL3D_BUNDLE", tmp_path / "absent.js")
    assert page3d.plotly_js() == get_plotlyjs()
    (tmp_path / "old.js").write_text("/** plotly.js (gl3d - minified) v3.0.0 */", encoding="utf-8")
    monkeypatch.setattr(page3d, "GL3D_BUNDLE", tmp_path / "old.js")
    assert page3d.plotly_js() == get_plotlyjs()


def test_3d_page_bytes_per_point_bounded_and_no_whole_chunk(tmp_path):
    """The 3-D page at 3,000 points with 140-character snippets of hard-to-compress text: beyond
    plotly.js, under 120 bytes a point (so 64,000 points fit in 10 MB with plotly.js; the page
    plotly's write_html made took 230-300), snippets cut to 100 characters."""
    from brb_pipeline.core.insights.map_3d_page import plotly_js_packed

    rng = np.random.default_rng(5)
    n = 3_000
    cid = rng.integers(-1, 30, n)
    df = pl.DataFrame({"x": rng.normal(size=n) + cid, "y": rng.normal(size=n), "z": rng.normal(size=n),
                       "cluster_id": cid, "label": [f"topic {c} · words" for c in cid],
                       "contact": [f"Person {i:03d}" for i in rng.integers(0, 300, n)],
                       "date": [f"2023-{m:02d}-{d:02d}" for m, d in zip(rng.integers(1, 13, n),
                                                                      rng.integers(1, 29, n))],
                       "snippet": _random_text(rng, n)})
    files = write_map(tmp_path, df, title="t")
    page = files.html_3d.read_text(encoding="utf-8")
    plotly_bytes = len(plotly_js_packed())
    per_point = (len(page.encode("utf-8")) - plotly_bytes) / n
    print(f"3-D page: {per_point:.1f} bytes a point beyond plotly.js ({plotly_bytes:,})")
    assert per_point < 120, per_point  # 109.6 here
    assert plotly_bytes + 64_000 * per_point < 10_000_000
    _, pts3, raw3 = _page_3d(page)
    assert max(len(html.unescape(t)) for t in pts3["s"]) == 100  # HTML_SNIPPET_CHARS
    cuts = {src[:99].rstrip() for src in df["snippet"]}  # points are grouped by cluster
    assert all(html.unescape(t).rstrip("…") in cuts for t in pts3["s"])
    assert not any(src[:101] in raw3 or src[:101] in page for src in df["snippet"])


def _home_with_map_inputs(home, n: int = 40):
    """A real store (DuckDB from a real partition) and the insights parquet files run_map reads."""
    from brb_pipeline.core.store import duck
    from brb_pipeline.core.store import chunks as store
    from brb_pipeline.config.settings import Settings
    from brb_pipeline_tests.helpers.store import make_chunks, make_vectors

    s = Settings(home=home)
    texts = [f"Me (10:{i:02d}): whole chunk {i} " + " ".join(f"word{i}x{j}" for j in range(60))
             for i in range(n)]
    chunks = make_chunks("batch-001", "alice", n, texts=texts)
    path = store.write_partition(s.staging_dir, "batch-001", chunks, make_vectors(n, 0), "test@1")
    con = duck.connect(s.duckdb_path)
    try:
        store.load_partitions(con, {"batch-001": path})
    finally:
        con.close()
    d = s.staging_dir / "insights"
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    ids = chunks["chunk_id"].to_list()
    cid = [i % 3 - 1 for i in range(n)]  # clusters 0, 1 and noise
    pl.DataFrame({"chunk_id": ids, **{c: rng.normal(size=n) + np.array(cid) * 5
                                      for c in ("x", "y", "x3", "y3", "z3")}}
                 ).write_parquet(d / "projection.parquet")
    pl.DataFrame({"chunk_id": ids, "cluster_id": cid}).write_parquet(d / "clusters.parquet")
    pl.DataFrame({"cluster_id": [0, 1], "label": ["Words · chunk", "Other · words"],
                  "terms": [["words"], ["other"]], "label_source": ["tfidf", "tfidf"]}
                 ).write_parquet(d / "labels.parquet")
    return s, texts


def test_run_map_pages_hold_snippets_never_whole_chunks(tmp_path):
    from brb_pipeline.stages.insights import SNIPPET_CHARS, run_map

    s, texts = _home_with_map_inputs(tmp_path)
    meta = run_map(s)
    assert meta["points"] == 40 and meta["clusters"] == 2
    page3 = Path(meta["html_3d"]).read_text(encoding="utf-8")
    for page in (Path(meta["html"]).read_text(encoding="utf-8"), page3, _page_3d(page3)[2]):
        assert not any(t in page for t in texts)  # no chunk whole
        assert not any(t[:SNIPPET_CHARS + 20] in page for t in texts)
    for page in (Path(meta["html"]).read_text(encoding="utf-8"), _page_3d(page3)[2]):
        assert all(t[:60] in page for t in texts)  # every chunk is there as its snippet
    assert Path(meta["png"]).stat().st_size > 10_000


def _browser():
    """A headless Chromium through selenium, or a skip when either is not installed."""
    webdriver = pytest.importorskip("selenium.webdriver")
    import shutil

    binary = next((b for b in ("chromium", "chromium-browser", "google-chrome")
                   if shutil.which(b)), None)
    if binary is None or not shutil.which("chromedriver"):
        pytest.skip("Chromium and chromedriver are not installed")
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900"):
        opts.add_argument(arg)
    opts.binary_location = shutil.which(binary)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    from selenium.webdriver.chrome.service import Service

    return webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))


@pytest.mark.slow
def test_html_in_headless_browser_search_filters_and_click_lists(tmp_path):
    driver = _browser()
    try:
        from selenium.webdriver.common.by import By

        files = write_map(tmp_path, _points(), title="Browser map")
        driver.get(files.html.resolve().as_uri())
        count = driver.find_element(By.ID, "count")
        assert driver.find_element(By.ID, "title").text == "Browser map"
        assert count.text == "63 chunks"
        rows = driver.find_elements(By.CSS_SELECTOR, "#clusters .cl")
        assert len(rows) == 4
        driver.find_element(By.ID, "q").send_keys("secret snippet")
        assert count.text == "4 of 63 chunks match"  # SECRET is the first snippet per cluster
        assert len(driver.find_elements(By.CSS_SELECTOR, "#clusters .cl")) == 4
        driver.find_element(By.ID, "q").clear()
        driver.find_element(By.ID, "q").send_keys("mehmet")
        assert count.text == "20 of 63 chunks match"
        driver.find_elements(By.CSS_SELECTOR, "#clusters .cl")[0].click()  # Mehmet's cluster
        items = driver.find_elements(By.CSS_SELECTOR, "#list .it")
        assert items[0].text.startswith(LABELS[1] + ": 20 chunks")
        assert len(items) == 21 and "Mehmet · 2024-02-" in items[1].text
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
    finally:
        driver.quit()


def _points_on_canvas(driver, contact: str) -> list[tuple[float, float]]:
    """Screen positions (canvas pixels) of a contact's points, read from the page's own state."""
    return driver.execute_script(
        "const o=[];for(let i=0;i<D.x.length;i++)if(D.contacts[D.k[i]]===arguments[0])"
        "o.push([sx(D.x[i]),sy(D.y[i])]);return o", contact)


def _click_at(driver, element, x: float, y: float, *, shift_drag_to=None):
    """A real pointer click (or shift-drag) at pixel (x, y) of ``element`` (selenium offsets
    are from the element's centre)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    w, h = element.size["width"], element.size["height"]
    chain = ActionChains(driver).move_to_element_with_offset(element, int(x - w / 2), int(y - h / 2))
    if shift_drag_to is None:
        chain.click().perform()
        return
    (chain.key_down(Keys.SHIFT).click_and_hold()
     .move_by_offset(int(shift_drag_to[0] - x), int(shift_drag_to[1] - y))
     .release().key_up(Keys.SHIFT).perform())


@pytest.mark.slow
def test_html_in_browser_person_time_area_neighbours_and_search_zoom(tmp_path):
    """The explorer's flow: person + month in two gestures, an area's samples, a point's
    neighbours, search that zooms to its matches, chips that undo; nothing is requested."""
    driver = _browser()
    try:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        files = write_map(tmp_path, _points(), title="Explorer")
        driver.get(files.html.resolve().as_uri())
        count = driver.find_element(By.ID, "count")
        listed = lambda: driver.find_elements(By.CSS_SELECTOR, "#list .it")  # noqa: E731
        # Sam: cluster 0 (January, every third chunk) and cluster 2 (March, every other one).
        Select(driver.find_element(By.ID, "who")).select_by_visible_text("Sam (16)")
        assert count.text == "16 of 63 chunks match"
        hist = driver.find_element(By.ID, "hist")
        bw = (hist.size["width"] - 20) / 6  # six months, Jan..Jun 2024, 10 px margins
        _click_at(driver, hist, 10 + 2.5 * bw, 30)  # March
        assert count.text == "10 of 63 chunks match"
        assert driver.find_element(By.ID, "range").text.startswith("Mar 2024")
        items = listed()
        assert items[0].text == "10 matching chunks, newest first" and len(items) == 11
        assert all(i.text.startswith("Sam · 2024-03-") for i in items[1:])
        assert [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#clusters .cl")] == [
            LABELS[2] + "\n10 / 20"]
        # The chips undo one filter each.
        chips = driver.find_elements(By.CSS_SELECTOR, "#chips .chip")
        assert [c.text for c in chips] == ["person: Sam ×", "time: Mar 2024 ×"]
        chips[1].click()
        chips = driver.find_elements(By.CSS_SELECTOR, "#chips .chip")
        chips[0].click()
        assert count.text == "63 chunks" and driver.find_elements(By.CSS_SELECTOR, "#chips .chip") == []
        # Shift-drag a box around Mehmet's cluster: its 20 chunks are the samples.
        canvas = driver.find_element(By.ID, "cv")
        pts = _points_on_canvas(driver, "Mehmet")
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        _click_at(driver, canvas, min(xs) - 6, min(ys) - 6, shift_drag_to=(max(xs) + 6, max(ys) + 6))
        assert count.text == "20 of 63 chunks match"
        assert all("Mehmet · 2024-02-" in i.text for i in listed()[1:]) and len(listed()) == 21
        driver.find_element(By.CSS_SELECTOR, "#chips .chip").click()  # "area: 20 chunks ×"
        # Click one of Mehmet's points: it and its 10 nearest chunks, all in that cluster.
        _click_at(driver, canvas, *pts[3])
        items = listed()
        assert items[0].text.startswith("Nearest on the map") and len(items) == 12
        assert all(LABELS[1] in i.text for i in items[1:])
        # Search + Enter: the matches are listed and the view zooms onto them.
        scale = driver.execute_script("return view.s")
        box = driver.find_element(By.ID, "q")
        box.send_keys("mehmet")
        box.send_keys("\n")
        assert count.text == "20 of 63 chunks match"
        assert listed()[0].text == "20 matching chunks, newest first"
        assert driver.execute_script("return view.s") > 1.5 * scale
        perf = [json.loads(e["message"])["message"] for e in driver.get_log("performance")]
        urls = {m["params"]["request"]["url"] for m in perf if m.get("method") == "Network.requestWillBeSent"}
        assert urls == {files.html.resolve().as_uri()}  # the page itself, nothing else
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
    finally:
        driver.quit()


def _two_topic_cluster() -> pl.DataFrame:
    """Cluster 0: 150 chunks, flights on the left and soup on the right; cluster 1: 30 others."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(180):
        cid, side = (0, i % 2) if i < 150 else (1, 2)
        x, words = [(0.0, "the flight to lisbon needs a visa at the airport"),
                    (3.0, "the lentil soup recipe wants a hot oven"),
                    (9.0, "the guitar concert tickets sold out")][side]
        who = ["Ana", "Ben", "Cem"][i % 3]
        rows.append({"x": x + rng.normal(0, 0.3), "y": rng.normal(0, 0.3), "cluster_id": cid,
                     "label": "Big" if cid == 0 else "Music", "contact": who, "date": date(2024, 1 + i % 12, 1),
                     "snippet": words[:30],
                     "content": f"Conversation with {who}, 2024-01-01\n{who} (10:00): {words} {i}\nMe (10:01): ok {words}"})
    return pl.DataFrame(rows)


def test_big_clusters_get_subtopic_labels_where_their_parts_lie():
    from brb_pipeline.core.insights.subtopics import subtopics

    subs = subtopics(_two_topic_cluster(), names=["Ana", "Ben", "Cem"])
    assert {t["cluster_id"] for t in subs} == {0}  # 30 chunks are too few to split
    assert sorted(t["n"] for t in subs) == [75, 75]
    left, right = sorted(subs, key=lambda t: t["x"])
    assert left["x"] < 1 < 2 < right["x"]
    words = lambda t: set(t["label"].lower().replace("·", " ").split())  # noqa: E731
    assert words(left) & {"flight", "lisbon", "visa", "airport"} and not words(left) & {"soup", "oven", "lentil"}
    assert words(right) & {"soup", "oven", "lentil", "recipe"} and not words(right) & {"flight", "visa"}
    assert not any(words(t) & {"ana", "ben", "cem"} for t in subs)


def _travel_and_food(n: int = 200, seed: int = 5) -> pl.DataFrame:
    """Cluster 0 "Travel · trip" (``n`` chunks): flights on the left, soup on the right, both saying
    "travel" and "trip", a friend's name (Dora, no sender) and filler, and 2 stragglers far out;
    cluster 1 "Guitar": 60 chunks of concerts; cluster -1: 20 unclustered."""
    rng = np.random.default_rng(seed)
    sides = ["travel trip flight lisbon visa airport passport with dora lol",
             "travel trip lentil soup recipe oven dinner with dora lol"]
    rows = []
    for i in range(n + 2 + 60 + 20):
        if i < n + 2:
            cid, side = 0, i % 2
            x = (0.0 if side == 0 else 4.0) + (40.0 if i >= n else 0.0)  # the last 2: far out
            words, label = sides[side], "Travel · trip"
        else:
            cid, x = (1, 12.0) if i < n + 62 else (-1, 20.0)
            words, label = "guitar concert tickets band stage", "Guitar" if cid == 1 else "unclustered"
        who = ["Ana", "Ben"][i % 2]
        rows.append({"x": x + rng.normal(0, 0.4), "y": rng.normal(0, 0.4), "cluster_id": cid, "label": label,
                     "contact": who, "date": date(2024, 1 + i % 12, 1), "snippet": words[:30],
                     "content": f"{who} (10:00): {words} {i}\nMe (10:01): {words.split()[2 + i % 3]} ok"})
    return pl.DataFrame(rows)


def _words(t: dict) -> set[str]:
    return set(t["label"].lower().replace("·", " ").split())


class _CountingEmbedder:
    """The hash embedder, counting its ``embed`` calls."""

    def __init__(self) -> None:
        from brb_pipeline.core.embedding.hashing import HashEmbedder

        self.inner = HashEmbedder(64)
        self.model_id, self.document_prefix, self.calls = self.inner.model_id, "", 0

    def embed(self, texts):
        self.calls += 1
        return self.inner.embed(texts)


@pytest.mark.parametrize("reranked", [False, True], ids=["c-tf-idf", "embedding-re-rank"])
def test_subtopic_labels_say_what_sets_a_part_apart(reranked):
    """No word of the parent's label ("travel", "trip"), no name, no filler; every part of every
    split cluster labelled (stragglers join a part, never one of their own); the same twice."""
    from brb_pipeline.core.insights.labels import EmbeddingLabeler
    from brb_pipeline.core.insights.subtopics import subtopics

    pts = _travel_and_food()
    kw: dict = {}
    if reranked:
        emb = _CountingEmbedder()
        vecs = emb.inner.embed(pts["content"].to_list())
        kw = {"rerank": EmbeddingLabeler(emb, names=["Dora Quinn"], label_terms=2), "embeddings": vecs,
              "embedding_model": emb.model_id}
    subs = subtopics(pts, names=["Dora Quinn", "Ana", "Ben"], **kw)
    assert subs == subtopics(pts, names=["Dora Quinn", "Ana", "Ben"], **kw)  # deterministic
    if reranked:
        assert emb.calls == 2  # the two runs: one batch of candidate terms each (stored centroids)
    by = {c: [t for t in subs if t["cluster_id"] == c] for c in (0, 1)}
    assert [sum(t["n"] for t in by[0]), sum(t["n"] for t in by[1])] == [202, 60]  # every chunk's part labelled
    assert len(by[0]) == 2 and min(t["n"] for t in by[0]) >= 100  # the 2 stragglers are in a part
    assert all(t["label"] for t in subs)
    left, right = sorted(by[0], key=lambda t: t["x"])
    assert _words(left) & {"flight", "lisbon", "visa", "airport", "passport"}
    assert _words(right) & {"lentil", "soup", "recipe", "oven", "dinner"}
    for t in subs:
        assert not _words(t) & {"travel", "trip", "dora", "quinn", "ana", "ben", "lol", "ok"}
        assert not _words(t) & ({"guitar"} if t["cluster_id"] == 1 else set())
        assert t["bottom"] <= t["y"] <= t["top"] and t["left"] <= t["x"] <= t["right"]
    assert len({t["label"] for t in by[1]}) == len(by[1])  # siblings never say the same


def test_subtopics_of_a_cluster_too_small_or_without_words():
    """Clusters under ``min_size`` are not split; a part with no word left (only its parent's
    words and names) gets no label rather than a repeat of its parent."""
    from brb_pipeline.core.insights.subtopics import subtopics

    pts = _travel_and_food()
    assert subtopics(pts, min_size=300) == []
    bare = pts.with_columns(pl.lit("Ana (10:00): travel trip dora").alias("content"),
                            pl.lit("Travel · trip").alias("label"))
    assert subtopics(bare, names=["Dora"]) == []


def test_html_shows_subtopics_only_when_zoomed_in(tmp_path):
    files = write_map(tmp_path, _two_topic_cluster(), title="Zoom")
    page = files.html.read_text(encoding="utf-8")
    data = json.loads(page.split('<script id="data" type="application/json">')[1].split("</script>")[0])
    assert len(data["sub"]) == 2 and "needs a visa" not in page  # labels, never the chunk text
    driver = _browser()
    try:
        driver.get(files.html.resolve().as_uri())
        assert driver.execute_script("return window.__subLabels") == 0
        from selenium.webdriver.common.by import By

        driver.find_elements(By.CSS_SELECTOR, "#clusters .cl")[0].click()  # "Big", then zoom onto it
        assert driver.execute_script("return window.__subLabels") == 0
        driver.execute_script("zoomToVisible()")
        assert driver.execute_script("return view.s / S0") > 1.8
        assert driver.execute_script("return window.__subLabels") == 2
        under = driver.execute_script(  # points of a sub-label's own cluster under its box
            "return window.__subBoxes.map(([c, x0, y0, x1, y1]) => G[c].filter(i => {"
            " const x = sx(D.x[i]), y = sy(D.y[i]); return x >= x0 && x <= x1 && y >= y0 && y <= y1}).length)")
        assert under == [0, 0]  # placed off its part (before: on its middle)
    finally:
        driver.quit()


def _crowded_3d(n_clusters: int = 24) -> pl.DataFrame:
    """:func:`_crowded` in 3-D: most clusters packed in the middle, two far outliers."""
    pts = _crowded(n_clusters)
    rng = np.random.default_rng(3)
    z = rng.normal(0, 0.4, pts.height) + pts["cluster_id"].cast(pl.Float64).to_numpy() % 3
    pts = pts.with_columns(pl.col("x").alias("x3"), pl.col("y").alias("y3"), pl.Series("z3", z))
    far = pts.head(2).with_columns(pl.lit(-1).cast(pl.Int64).alias("cluster_id"),
                                   pl.Series("x3", [400.0, -400.0]), pl.Series("z3", [300.0, -300.0]))
    return pl.concat([pts, far])


@pytest.mark.slow  # browser
def test_3d_labels_are_apart_sized_by_cluster_and_redrawn_on_rotation(tmp_path):
    """In Chromium: the 3-D page's labels never overlap (before: 24 labels piled in the middle),
    the view is not stretched by two far outliers, and after a camera turn the labels are laid
    out again (still apart, a different set may show)."""
    from brb_pipeline.core.insights.map_3d import view_ranges, label_anchors

    pts = _crowded_3d()
    df = insights_map.as_points(pts)
    summ = cluster_summary(df)
    ranges = view_ranges(df, label_anchors(df, summ))
    assert ranges["x3"][1] < 100 and ranges["x3"][0] > -100  # the outliers do not set the view
    files = write_map(tmp_path, pts, title="3-D")
    page = files.html_3d.read_text(encoding="utf-8")
    assert "annotation-scene" in page and "labelsShown" in page  # the declutter script is in it
    driver = _browser()
    boxes_js = ("return Array.from(document.querySelectorAll('.infolayer g.annotation-scene'))"
                ".filter(g => g.style.visibility !== 'hidden').map(g => {"
                "const r = g.querySelector('.annotation-text-g').getBoundingClientRect();"
                "return [+g.getAttribute('data-index'), r.left, r.top, r.right, r.bottom]})")

    def apart(boxes):
        return not any(a[1] < b[3] and a[3] > b[1] and a[2] < b[4] and a[4] > b[2]
                       for i, a in enumerate(boxes) for b in boxes[i + 1:])

    try:
        from selenium.webdriver.support.ui import WebDriverWait

        driver.get(files.html_3d.resolve().as_uri())
        gd = "document.querySelector('.js-plotly-plot')"
        WebDriverWait(driver, 60).until(lambda d: d.execute_script(f"return {gd}.dataset.labelsShown"))
        shown = driver.execute_script(boxes_js)
        assert len(driver.find_elements("css selector", ".infolayer g.annotation-scene")) == 24
        assert 4 <= len(shown) < 24 and apart(shown)  # some hidden, none overlapping
        assert 0 in [b[0] for b in shown]  # the biggest cluster's label is always there
        # the traces rebuilt in the page: one per cluster, hover "label / contact · date / snippet"
        traces = driver.execute_script(f"return {gd}.data.map(t => [t.name, t.x.length, t.text[0]])")
        _, pts3, _ = _page_3d(page)
        assert [[t["name"], t["n"]] for t in pts3["traces"]] == [t[:2] for t in traces]
        big = df.filter(pl.col("cluster_id") == summ["cluster_id"][0]).row(0, named=True)
        assert traces[0][2] == (f"<b>{html.escape(big['label'])}</b><br>{big['contact']} · "
                                f"{big['date']}<br>{html.escape(big['snippet'][:99].rstrip())}…")
        below = driver.execute_script(  # some went below their cluster, their leader line flipped
            "return Array.from(document.querySelectorAll('.infolayer g.annotation-scene .annotation-text-g'))"
            ".filter(t => (t.getAttribute('transform') || '').includes('translate(0,')).length")
        assert below >= 1
        driver.execute_script(f"Plotly.relayout({gd}, {{'scene.camera.eye': {{x: -1.2, y: 0.3, z: 0.9}}}})")
        WebDriverWait(driver, 30).until(lambda d: d.execute_script(boxes_js) != shown)
        again = driver.execute_script(boxes_js)
        assert len(again) >= 4 and apart(again)
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
    finally:
        driver.quit()
