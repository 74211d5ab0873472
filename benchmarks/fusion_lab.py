"""Fusion lab: the two candidate lists of every question, captured once, then fused offline.

Captures, for every long-chats question (dev and test halves) and the 16 paraphrases of
``paraphrase_check_4k.py``, what hybrid search hands its fusion step (the vector list with
cosines, the BM25 list with scores, ``specific``, the lexical coverage), then replays fusion
variants over those lists, merging windows as brb merges them (``bench_long_chats.Windows``), and
judges them as the benches do. Tuning reads the dev half (+ the paraphrases, which are NOT held
out); the real numbers come from ``bench_long_chats.py`` with the chosen default.

    PYTHONPATH=. .venv/bin/python benchmarks/fusion_lab.py --work /tmp/i29b-lc --para /tmp/i29b-demo4k
"""
from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import long_chats as lc  # noqa: E402
from bench_long_chats import Windows, judge  # noqa: E402

import brb_pipeline.core.search.hybrid as hybrid  # noqa: E402
from brb_pipeline.core.search import fusion as F  # noqa: E402
from brb_pipeline.settings import Settings  # noqa: E402

_CAUGHT: list = []
_real_fuse = hybrid._fuse


def _spy(mode, vec, lex, fusion, specific, coverage=None):  # noqa: ANN001, ANN202
    _CAUGHT.append((list(vec), list(lex), specific, coverage))
    return _real_fuse(mode, vec, lex, fusion, specific, coverage)


def capture(home: Path, questions: list[tuple[str, str, list[str], str]]) -> list[dict]:
    """questions: (half, category, evidence texts, text) -> records with both lists."""
    from brb_pipeline.pipeline.query import Searcher

    hybrid._fuse = _spy
    out = []
    with Searcher.open(Settings.load(home)) as se:
        w = Windows(se.con)
        for half, cat, ev, text in questions:
            _CAUGHT.clear()
            se.search(text, k=10, log=False, mode="hybrid")
            vec, lex, spec, cov = _CAUGHT[-1]
            out.append({"half": half, "cat": cat, "ev": ev, "q": text, "vec": vec, "lex": lex,
                        "specific": spec, "coverage": cov})
    hybrid._fuse = _real_fuse
    return out, w


def load_all(work: Path, para: Path) -> dict:
    data = {}
    for stem in lc.CONVERSATIONS:
        qs = [(q.half, q.category, q.evidence, q.text) for q in lc.questions(stem, lc.load(stem))]
        recs, w = capture(work / f"home-{stem}", qs)
        data[stem] = (recs, w.meta)
    from paraphrase_check_4k_q import Q
    recs, w = capture(para, [("para", "paraphrase", [t], q) for t, q in Q])
    data["para"] = (recs, w.meta)
    return data


class _W(Windows):
    def __init__(self, meta: dict) -> None:  # noqa: D107
        self.meta = meta


def evaluate(data: dict, fuse_fn, halves=("dev",)) -> dict:
    """recall@5 and MRR@10 per (half, category) for one fusion function (rec -> ranked ids)."""
    agg: dict = {}
    for _stem, (recs, meta) in data.items():
        w = _W(meta)
        for r in recs:
            if r["half"] not in halves:
                continue
            ranked = [d for d, _ in fuse_fn(r)]
            rank, _full = judge(w.passages(ranked), r["ev"])
            for key in ((r["half"], "all"), (r["half"], r["cat"])):
                a = agg.setdefault(key, [0, 0.0, 0])
                a[0] += rank is not None and rank <= 5
                a[1] += 1 / rank if rank else 0.0
                a[2] += 1
    return {k: (v[0], v[2], round(v[1] / v[2], 3)) for k, v in sorted(agg.items())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/i29b-lc"))
    ap.add_argument("--para", type=Path, default=Path("/tmp/i29b-demo4k"))
    ap.add_argument("--cache", type=Path, default=Path("/tmp/i29b-lab.pkl"))
    args = ap.parse_args()
    if args.cache.exists():
        data = pickle.loads(args.cache.read_bytes())
    else:
        data = load_all(args.work, args.para)
        args.cache.write_bytes(pickle.dumps(data))
    print({k: len(v[0]) for k, v in data.items()})


if __name__ == "__main__":
    main()
