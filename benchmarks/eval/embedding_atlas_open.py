"""Open the embedding-atlas server (embedding_atlas_serve.py) in headless Chromium: time to the
first table/canvas, every request and whether any left localhost. Evaluation only."""
import json, sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from bench_map import browser
d = browser()
try:
    t0 = time.time(); d.get("http://127.0.0.1:8765/")
    ready = None
    for _ in range(600):
        n = d.execute_script("return document.querySelectorAll('canvas').length")
        txt = d.execute_script("return document.body.innerText.length")
        if n and txt > 200: ready = time.time() - t0; break
        time.sleep(0.05)
    time.sleep(3)
    urls = []
    for e in d.get_log("performance"):
        m = json.loads(e["message"])["message"]
        if m.get("method") == "Network.requestWillBeSent":
            urls.append(m["params"]["request"]["url"])
    ext = [u for u in urls if not u.startswith(("http://127.0.0.1", "data:", "blob:"))]
    print(json.dumps({"ready_s": ready, "requests": len(urls), "external": ext[:20],
                      "canvases": d.execute_script("return document.querySelectorAll('canvas').length"),
                      "text": d.execute_script("return document.body.innerText.slice(0,600)"),
                      "severe": [x["message"][:200] for x in d.get_log("browser") if x["level"] == "SEVERE"][:5]}, indent=1))
    d.save_screenshot(sys.argv[1] if len(sys.argv) > 1 else "embedding_atlas.png")
finally:
    d.quit()
