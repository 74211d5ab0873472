"""The 2-D map page at scale, in headless Chromium: open time, filter time, page size.

Builds a synthetic points table (``--points``, default 64,000: 40 clusters of Gaussian blobs plus
10% noise, 300 contacts, dates over 4 years, 90-character snippets; no real data), renders the
page with :func:`~brb_pipeline.core.insights.map_page.html_2d`, opens it from a private temp folder
in headless Chromium (selenium) and measures:

- **open**: navigation start to the page's first drawn frame (``window.__mapReady``, set after the
  first draw; falls back to the load event for pages that do not set it);
- **search / contact / time / cluster filter**: wall time of the synchronous handler, re-draw
  included, measured in the page with ``performance.now()`` around a dispatched event, median of 5;
- **time filter**: extending a brush on the month histogram (``#hist``) from 10% to 35% of its
  width (one mousemove: the step a drag repeats), and the double-click that clears it;
- **frame**: one full redraw (``window.__map.draw`` when the page exposes it), median of 5;
- **bytes**: the HTML file's size;
- **requests**: every network request Chromium's performance log records other than the page's own
  ``file://`` URL (must be 0: the page is offline).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_map.py --points 64000 --out benchmarks/results/map_64k.json

``--3d`` measures the 3-D page (``map_3d.html``, written by ``write_map``) on the same points
with a third axis; ``--text corpus`` gives them 140-character snippets of real chat text (the
demo's chitchat corpus) instead of the 26-word ones, which gzip far better than real text:

- **open**: navigation start to the page's label script marking the plot drawn
  (``data-labels-shown``, set on the frame after plotly's first draw), each in a fresh browser
  (nothing cached), median of ``--opens``; the page's own phases of the last open
  (``performance.mark``: plotly.js ready, traces built, drawn) when it sets them;
- **hide_cluster**: the biggest cluster hidden or shown again (``Plotly.restyle`` of its
  ``visible``, what a legend click does) until the next frame, median of 6;
- **camera_turn**: ``Plotly.relayout`` of the camera until the next frame, median of 5;
- **bytes**, **requests** and **severe_console** as for the 2-D page, and the load average.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_map.py --3d --text corpus --out benchmarks/results/map3d_64k_corpus_after.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from brb_pipeline.core.insights.map import as_points, cluster_summary  # noqa: E402
from brb_pipeline.core.insights.map_page import html_2d  # noqa: E402

WORDS = ("ferry harbour dinner tickets rent landlord exam thesis hike trail recipe oven guitar "
         "concert visa passport garden tomato bike repair flight delay puppy vet budget tax").split()


def corpus_snippets(n: int, chars: int = 140) -> list[str]:
    """``n`` snippets of real chat text (the demo's chitchat corpus), shaped as the pipeline's:
    a window's lines ``Sender (HH:MM): text`` joined by `` · ``, cut to ``chars`` (SNIPPET_CHARS)."""
    from brb_pipeline.demo.people import load_corpus

    lines = [f"{who[:6]} ({ts:%H:%M}): {text}" for _, msgs in load_corpus() for ts, who, text in msgs]
    return [" · ".join(lines[(8 * i) % (len(lines) - 8):][:8])[:chars] for i in range(n)]


def synthetic_points(n: int, seed: int = 7, dims: int = 2, text: str = "words") -> pl.DataFrame:
    """``n`` points in 40 blobs + 10% noise, with contacts, dates and snippets (no real data).

    ``dims=3`` adds a third axis (``z``, the 3-D page's), drawn after everything else, so the
    2-D columns are the same points as with ``dims=2``. ``text="corpus"`` replaces the
    90-character snippets of 26 words (which compress unlike real text) by
    :func:`corpus_snippets`."""
    rng = np.random.default_rng(seed)
    k = 40
    centres = rng.uniform(-20, 20, size=(k, 2))
    cluster = rng.integers(0, k, size=n)
    xy = centres[cluster] + rng.normal(0, 0.8, size=(n, 2))
    noise = rng.random(n) < 0.10
    cluster[noise] = -1
    xy[noise] = rng.uniform(-25, 25, size=(int(noise.sum()), 2))
    days = rng.integers(0, 4 * 365, size=n)
    dates = (np.datetime64("2021-01-01") + days.astype("timedelta64[D]")).astype(str)
    contacts = [f"Person {i:03d}" for i in rng.integers(0, 300, size=n)]
    snippets = [" ".join(rng.choice(WORDS, size=14)) for _ in range(n)]
    labels = [f"topic {c} · words" if c >= 0 else "" for c in cluster]
    cols = {"x": xy[:, 0], "y": xy[:, 1], "cluster_id": cluster, "label": labels,
            "contact": contacts, "date": dates.tolist(), "snippet": snippets}
    if dims == 3:
        z = rng.uniform(-20, 20, size=k)[cluster] + rng.normal(0, 0.8, size=n)
        z[noise] = rng.uniform(-25, 25, size=int(noise.sum()))
        cols["z"] = z
    if text == "corpus":
        cols["snippet"] = corpus_snippets(n)
    return as_points(cols)


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,900"):
        opts.add_argument(arg)
    opts.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))


TIME_EVENT = """
const [sel, kind, value] = arguments; const e = document.querySelector(sel);
if (!e) return null;
let t0 = performance.now();
if (kind === 'input') { e.value = value; e.dispatchEvent(new Event('input')); }
else if (kind === 'change') { e.value = value; e.dispatchEvent(new Event('change')); }
else if (kind === 'click') { e.click(); }
else if (kind === 'draw') { window.__map.draw(); }
else if (kind === 'brush') {  // drag across the histogram from 10% to 35% of its width
  const r = e.getBoundingClientRect(), y = r.top + 30;
  const ev = (t, f) => new MouseEvent(t, {clientX: r.left + f * r.width, clientY: y, bubbles: true});
  if (value === 'clear') { e.dispatchEvent(new MouseEvent('dblclick', {bubbles: true})); }
  else {
    e.dispatchEvent(ev('mousedown', 0.10)); t0 = performance.now();  // time the extend step
    window.dispatchEvent(ev('mousemove', 0.35)); window.dispatchEvent(ev('mouseup', 0.35));
  }
}
return performance.now() - t0;
"""


def _median(driver, sel: str, kind: str, values: list[str]) -> float | None:
    out = []
    for _ in range(5):
        for v in values:
            ms = driver.execute_script(TIME_EVENT, sel, kind, v)
            if ms is None:
                return None
            out.append(ms)
    return round(statistics.median(out), 1)


def _requests(driver, page_url: str) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            url = msg["params"]["request"]["url"]
            if url != page_url and not url.startswith("data:"):
                urls.append(url)
    return urls


def measure(n: int) -> dict:
    df = synthetic_points(n)
    summ = cluster_summary(df)
    t0 = time.perf_counter()
    page = html_2d(df, summ, "Synthetic map")
    render_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="brb-map-bench-") as tmp:
        path = Path(tmp) / "map.html"
        path.write_text(page, encoding="utf-8")
        driver = browser()
        try:
            driver.get(path.as_uri())
            time.sleep(0.5)
            open_ms = driver.execute_script(
                "const t=performance.timing;return (window.__mapReady||t.loadEventEnd)-t.navigationStart")
            contact = driver.execute_script(
                "const s=document.querySelector('#who');return s&&s.options.length>1?s.options[1].value:null")
            res = {
                "points": n, "bytes": path.stat().st_size, "render_s": round(render_s, 2),
                "open_ms": open_ms,
                "search_ms": _median(driver, "#q", "input", ["ferry", ""]),
                "contact_ms": _median(driver, "#who", "change", [contact, ""]) if contact else None,
                "cluster_ms": _median(driver, "#clusters .cl", "click", [""]),
                "frame_ms": _median(driver, "body", "draw", [""])
                if driver.execute_script("return !!window.__map") else None,
                "time_ms": _median(driver, "#hist", "brush", ["", "clear"]),
                **_page_checks(driver, path),
            }
        finally:
            driver.quit()
    return res


def _page_checks(driver, path: Path) -> dict:
    """What every page run records: the requests it made beyond the page, its severe console lines."""
    return {"requests": _requests(driver, path.as_uri()),
            "severe_console": [e["message"][:200] for e in driver.get_log("browser") if e["level"] == "SEVERE"]}


# Installed before any page script (CDP): records when the 3-D page's declutter script first marks
# the plot drawn (``data-labels-shown``), which it does on the frame after plotly's first draw.
READY_3D = """
new MutationObserver((ms, obs) => {
  if (document.querySelector('[data-labels-shown]')) { window.__drawn3d = Date.now(); obs.disconnect(); }
}).observe(document, {subtree: true, childList: true, attributes: true,
                      attributeFilter: ['data-labels-shown']});
"""

# One interaction, timed in the page: plotly's promise for it resolved and the next frame painted.
TIME_3D = """
const [what, i] = arguments, done = arguments[arguments.length - 1];
const gd = document.querySelector('.js-plotly-plot'), t0 = performance.now();
const p = what === 'hide' ? Plotly.restyle(gd, {visible: i % 2 ? true : 'legendonly'}, [0])
  : Plotly.relayout(gd, {'scene.camera.eye': {x: Math.cos(i) * 1.3, y: Math.sin(i) * 1.3, z: 0.7}});
p.then(() => requestAnimationFrame(() => done(performance.now() - t0)));
"""


def _open_3d(uri: str) -> tuple[object, float | None]:
    """A fresh browser (nothing cached) opening the page; ms from navigation start to drawn."""
    driver = browser()
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": READY_3D})
    driver.set_script_timeout(120)
    driver.get(uri)
    for _ in range(600):
        if driver.execute_script("return window.__drawn3d"):
            break
        time.sleep(0.1)
    return driver, driver.execute_script(
        "return window.__drawn3d ? window.__drawn3d - performance.timing.navigationStart : null")


PHASES = """const t = performance.timing, m = n => (performance.getEntriesByName(n)[0] || {}).startTime;
return {html_loaded: t.domContentLoadedEventEnd - t.navigationStart, plotly_ready: m('brb-plotly'),
        traces_built: m('brb-traces'), drawn: m('brb-drawn')};"""


def measure_3d(n: int, text: str = "words", opens: int = 3) -> dict:
    """The 3-D page (``map_3d.html``) at ``n`` points: bytes, open (median of ``opens`` fresh
    browsers), a cluster hidden, a camera turn."""
    from brb_pipeline.core.insights.map import write_map

    df = synthetic_points(n, dims=3, text=text)
    load = [round(v, 2) for v in os.getloadavg()]  # the box is shared: say how busy it was
    with tempfile.TemporaryDirectory(prefix="brb-map3d-bench-") as tmp:
        t0 = time.perf_counter()
        path = write_map(Path(tmp), df, title="Synthetic map").html_3d
        render_s = time.perf_counter() - t0  # all three files: write_map has no 3-D-only entry
        open_ms = []
        for _ in range(opens - 1):
            driver, ms = _open_3d(path.as_uri())
            driver.quit()
            open_ms.append(ms)
        driver, ms = _open_3d(path.as_uri())
        open_ms.append(ms)
        try:
            hide = [driver.execute_async_script(TIME_3D, "hide", i) for i in range(6)]
            turn = [driver.execute_async_script(TIME_3D, "turn", i) for i in range(5)]
            res = {
                "points": n, "text": text, "load_avg_1_5_15": load, "bytes": path.stat().st_size,
                "render_s": round(render_s, 2), "open_ms": statistics.median(open_ms),
                "open_ms_each": open_ms, "phases_ms_last_open": driver.execute_script(PHASES),
                "hide_cluster_ms": round(statistics.median(hide), 1),
                "camera_turn_ms": round(statistics.median(turn), 1),
                "labels_shown": driver.execute_script(
                    "return document.querySelector('[data-labels-shown]').dataset.labelsShown"),
                **_page_checks(driver, path),
            }
        finally:
            driver.quit()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=64_000)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--3d", dest="three_d", action="store_true",
                    help="the 3-D page (map_3d.html) instead of the 2-D one")
    ap.add_argument("--text", choices=("words", "corpus"), default="words",
                    help="3-D only: snippets of 26 words (as the 2-D runs) or of real chat text")
    ap.add_argument("--opens", type=int, default=3, help="3-D only: fresh browsers opening the page")
    args = ap.parse_args()
    res = measure_3d(args.points, args.text, args.opens) if args.three_d else measure(args.points)
    print(json.dumps(res, indent=2))
    if args.out:
        args.out.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
