"""The map's sub-topic labels of a home, and a screenshot of the page zoomed in (issue 34).

Draws the map of ``HOME`` with the ``brb_pipeline`` on ``PYTHONPATH`` (so the same script gives the
before and after of a change: point ``PYTHONPATH`` at a checkout of the old commit), writes each
split cluster's parent label and its parts' sub-labels to ``OUT.json``, then opens the page in
headless Chromium, zooms 2.2x on the biggest cluster and saves ``OUT.png``. It also counts, for
every sub-label drawn, the points of its own cluster under its box (the page's own placement).

    PYTHONPATH=. .venv/bin/python benchmarks/eval/subtopic_shots.py /tmp/sub34-demo /tmp/sub34-after

Works on the map drawn into a temporary folder; the home is only read.
"""
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_map import browser  # noqa: E402

from brb_pipeline.config.settings import Settings  # noqa: E402
from brb_pipeline.keys import provider as keys  # noqa: E402
from brb_pipeline.stages.insights import render_map  # noqa: E402

ZOOM = """
const G0 = G.map((g, i) => [g.length, i]).filter(([n, i]) => C[i].id >= 0).sort((a, b) => b[0] - a[0])[0][1];
const g = G[G0]; const mx = g.reduce((a, i) => a + sx(D.x[i]), 0) / g.length;
const my = g.reduce((a, i) => a + sy(D.y[i]), 0) / g.length;
const r = cv.getBoundingClientRect();
cv.dispatchEvent(new WheelEvent("wheel", {deltaY: -Math.log(arguments[0]) / 0.0015, clientX: r.left + mx,
                                          clientY: r.top + my, bubbles: true, cancelable: true}));
"""
OWN = """
return (window.__subBoxes || []).map(([c, x0, y0, x1, y1]) => G[c].filter(i => {
  const x = sx(D.x[i]), y = sy(D.y[i]); return x >= x0 && x <= x1 && y >= y0 && y <= y1}).length);
"""


def main(home: Path, out: Path, zoom: float = 2.2) -> None:
    keys.install()
    tmp = Path(tempfile.mkdtemp(prefix="sub34-shots-"))
    t0 = time.perf_counter()
    page = render_map(Settings.load(home), tmp).html
    seconds = time.perf_counter() - t0
    text = page.read_text(encoding="utf-8")
    data = json.loads(text.split('<script id="data" type="application/json">')[1].split("</script>")[0])
    table: dict[str, dict] = {}
    for t in data["sub"]:
        c = data["clusters"][t["c"]]
        row = table.setdefault(str(c["id"]), {"parent": c["label"], "n": c["n"], "parts": []})
        row["parts"].append({"n": t["n"], "label": t["l"]})
    d = browser()
    try:
        d.get(page.as_uri())
        time.sleep(1.0)
        d.execute_script(ZOOM, zoom)
        time.sleep(0.8)
        d.save_screenshot(str(out.with_suffix(".png")))
        own = d.execute_script(OWN)
        drawn = d.execute_script("return [window.__labels, window.__subLabels]")
    finally:
        d.quit()
    result = {"render_seconds": round(seconds, 2), "labels_drawn": drawn[0], "sub_labels_drawn": drawn[1],
              "sub_labels_total": len(data["sub"]), "own_points_under_sub_labels": own,
              "clusters": table}
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(json.dumps({k: v for k, v in result.items() if k != "clusters"}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), *(float(a) for a in sys.argv[3:]))
