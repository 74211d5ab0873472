"""The parent-child variant chosen on the long-chats dev half, on the 16-question paraphrase check.

Same home, questions and judging as ``paraphrase_check_4k.py`` (NOT held out; see there): brb's
default beside brb + child vectors (messages embedded with the store's model, RRF weight 0.25
against brb's own chunk ranking, :mod:`parent_child_lab`; A) and the dev-best B (child BM25 0.25
+ child vectors 0.5), passages merged as brb merges them.

    PYTHONPATH=. .venv/bin/python benchmarks/parent_child_paraphrase.py /tmp/demo4k
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_long_chats as blc  # noqa: E402
from paraphrase_check_4k_q import Q  # noqa: E402
from parent_child_lab import Children, variants  # noqa: E402

from brb_pipeline.search.query import Searcher  # noqa: E402
from brb_pipeline.config.settings import Settings  # noqa: E402
from brb_pipeline import keys  # noqa: E402

keys.install()  # a script is an entry point: an encrypted home's files open with its key

CHOSEN = "rrf brb+0.0*clex+0.25*cvec"  # declared on dev (A)
DEV_BEST = "rrf brb+0.25*clex+0.5*cvec"  # best recall on dev (B), shown beside it
sq = lambda s: " ".join(s.split())  # noqa: E731
with Searcher.open(Settings.load(sys.argv[1])) as se:
    w = blc.Windows(se.con)
    ch = Children(se.con, se.embedder)
    print(f"{len(ch.texts)} messages embedded in {ch.embed_s:.1f} s beside {len(w.ids)} chunks")
    fns = {"brb default (topics included, as users get it)": None,
           "brb chunks only (recomputed)": variants()["brb (recomputed)"], CHOSEN: variants()[CHOSEN],
           DEV_BEST: variants()[DEV_BEST]}
    for name, fn in fns.items():
        h5 = mrr = 0
        for target, q in Q:
            if fn is None:
                texts = [h["text"] or "" for h in se.search(q, k=10, log=False)["hits"]]
            else:
                lists = {"brb": [h["chunk_id"] for h in se.search(q, k=50, merge=False, log=False)["hits"]
                                 if h["kind"] == "chunk"], "cvec": ch.vec(q), "clex": ch.lex(q)}
                texts = w.passages(fn(lists))
            r = next((i for i, t in enumerate(texts[:10], 1) if sq(target) in sq(t)), None)
            h5 += r is not None and r <= 5
            mrr += 1 / r if r else 0
        print(f"{name}: hit@5 {h5}/{len(Q)}  MRR@10 {mrr / len(Q):.3f}", flush=True)
