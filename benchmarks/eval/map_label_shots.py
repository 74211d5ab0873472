"""Before/after screenshots of the 2-D map's labels (``<out>/<prefix>_v1.png``, ``_v3.png``): a
frozen-label home (see judge_labels.py) labelled by v1 (embedding re-rank, cosine only) and by
the pipeline's labeler (v3), each drawn with today's page and shot in headless Chromium.

    PYTHONPATH=. .venv/bin/python benchmarks/eval/map_label_shots.py /tmp/m34-demo-frozen docs/map labels_6k

Works on a copy of the home (labels.parquet is rewritten there).
"""
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_map import browser  # noqa: E402

from brb_pipeline.core.embedding.models import load_embedder  # noqa: E402
from brb_pipeline.core.insights.labels import EmbeddingLabeler, LabelChain, TfidfLabeler  # noqa: E402
from brb_pipeline.stages.insights import default_labeler, render_map, run_labels  # noqa: E402
from brb_pipeline.config.settings import Settings  # noqa: E402
from brb_pipeline import keys  # noqa: E402

keys.install()  # a script is an entry point: an encrypted home's files open with its key

src, out, prefix = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
work = Path(tempfile.mkdtemp(prefix="m34-labelshots-"))
home = work / "home"
shutil.copytree(src, home, ignore=shutil.ignore_patterns("demo-archive", "snapshot", "dagster"))
s = Settings.load(home)
emb = load_embedder(s.embedding)
names = default_labeler(s, emb).base.names  # the contacts' names, as the pipeline drops them
v1 = LabelChain(TfidfLabeler(n_terms=30), EmbeddingLabeler(emb, tfidf_weight=0.0, core_terms=False))
v1.base.names = v1.refiners[0].names = names
pages = {}
for tag, chain in ((f"{prefix}_v1", v1), (f"{prefix}_v3", default_labeler(s, emb))):
    (home / "staging" / "insights" / "label_cache.json").unlink(missing_ok=True)
    run_labels(s, labeler=chain)
    pages[tag] = render_map(s, work / tag).html
d = browser()
try:
    for tag, page in pages.items():
        d.get(page.as_uri())
        time.sleep(1.0)
        d.save_screenshot(str(out / f"{tag}.png"))
finally:
    d.quit()
shutil.rmtree(work)
