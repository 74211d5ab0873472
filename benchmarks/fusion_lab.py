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
import json
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
from brb_pipeline.config.settings import Settings  # noqa: E402

_CAUGHT: list = []
_real_fuse = hybrid._fuse


def _spy(mode, vec, lex, fusion, specific, coverage=None):  # noqa: ANN001, ANN202
    _CAUGHT.append((list(vec), list(lex), specific, coverage))
    return _real_fuse(mode, vec, lex, fusion, specific, coverage)


def capture(home: Path, questions: list[tuple[str, str, list[str], str]]) -> list[dict]:
    """questions: (half, category, evidence texts, text) -> records with both lists."""
    from brb_pipeline.search.query import Searcher

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


def _moved(fused: list, order: list[str]) -> list:
    """``fused`` with ``order`` on top (those present), the rest in fused order."""
    top = [d for d in order if d in {x for x, _ in fused}]
    return [(d, 0.0) for d in dict.fromkeys(top)] + [x for x in fused if x[0] not in top]


def _disagree(r: dict, depth: int) -> bool:
    if not r["vec"] or not r["lex"]:
        return False
    return (r["vec"][0][0] not in {d for d, _ in r["lex"][:depth]}
            and r["lex"][0][0] not in {d for d, _ in r["vec"][:depth]})


def variants() -> dict:
    """The fusion families tried on dev (every one replays the captured lists)."""
    first = F.Fusion(disagreement_depth=None)

    def base(r: dict, f: F.Fusion = first) -> list:
        return F.fuse(r["vec"], r["lex"], f, specific=r["specific"], coverage=r["coverage"])

    def lead(r: dict, depth: int, who: str) -> list:
        fused = base(r)
        if not _disagree(r, depth):
            return fused
        v1, l1 = r["vec"][0][0], r["lex"][0][0]
        return _moved(fused, [v1, l1] if who == "vector" else [l1, v1])

    def rrf(r: dict, k: int, w: float) -> list:
        return F.rrf_fuse([[d for d, _ in r["vec"]], [d for d, _ in r["lex"]]], k=k, weights=[1.0, w])

    def combo(r: dict, a: float) -> list:  # the score fusion blended with equal-weight RRF (k=10)
        s, q = F._minmax(dict(base(r))), F._minmax(dict(rrf(r, 10, 1.0)))
        return sorted(((d, (1 - a) * s.get(d, 0) + a * q.get(d, 0)) for d in set(s) | set(q)),
                      key=lambda t: (-t[1], t[0]))

    out = {"first pass (score, coverage)": base,
           "no coverage rule (0.05 / 0.7)": lambda r: base(r, F.Fusion(covered_lexical_weight=None,
                                                                         disagreement_depth=None)),
           "vector only": lambda r: r["vec"], "lexical only": lambda r: r["lex"],
           "RRF k=60 w=1": lambda r: rrf(r, 60, 1.0), "RRF k=10 w=1": lambda r: rrf(r, 10, 1.0),
           "RRF k=10 w=0.5": lambda r: rrf(r, 10, 0.5),
           "first pass + 0.2 RRF": lambda r: combo(r, 0.2), "first pass + 0.5 RRF": lambda r: combo(r, 0.5)}
    for depth in (5, 10, 20):
        out[f"disagree@{depth}: vector best, BM25 best"] = lambda r, n=depth: lead(r, n, "vector")
    out["disagree@10: BM25 best, vector best"] = lambda r: lead(r, 10, "lexical")
    out["the default now (Fusion())"] = lambda r: base(r, F.Fusion())
    return out


def _features(r: dict) -> tuple[list[str], list[list[float]]]:
    """Per candidate: normalized cosine and BM25, both reciprocal ranks, in both lists, BM25 x
    coverage, BM25 x specific, cosine x coverage, the raw cosine."""
    vec, lex = dict(r["vec"]), dict(r["lex"])
    vr = {d: i for i, (d, _) in enumerate(r["vec"])}
    lr = {d: i for i, (d, _) in enumerate(r["lex"])}
    vn, ln = F._minmax(vec), F._minmax(lex)
    cov, spec, floor = r["coverage"] or 0.0, float(r["specific"]), min(vec.values(), default=0.0)
    docs = sorted(set(vec) | set(lex))
    rows = [[vn.get(d, 0.0), ln.get(d, 0.0), 1 / (1 + vr.get(d, 60)), 1 / (1 + lr.get(d, 60)),
             float(d in vec and d in lex), ln.get(d, 0.0) * cov, ln.get(d, 0.0) * spec, vn.get(d, 0.0) * cov,
             vec.get(d, floor)] for d in docs]
    return docs, rows


def rankers(data: dict) -> dict:
    """Logistic regression over :func:`_features`, trained on dev + paraphrases (label: the
    candidate's text holds an evidence turn), paraphrases weighted 1/5/20, C 0.1/1. In-sample."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    xs, ys, ws = [], [], []
    for recs, meta in data.values():
        for r in recs:
            if r["half"] == "test":
                continue
            docs, rows = _features(r)
            ev = [lc.squash(e) for e in r["ev"]]
            y = [int(any(e in lc.squash(meta[d][6] or "") for e in ev)) for d in docs]
            if any(y):
                xs += rows
                ys += y
                ws += [1.0 if r["half"] == "dev" else -1.0] * len(y)  # -1: a paraphrase row
    x, y, para = np.array(xs), np.array(ys), np.array(ws) < 0
    out = {}
    for c in (0.1, 1.0):
        for pw in (1.0, 5.0, 20.0):
            m = LogisticRegression(C=c, max_iter=2000).fit(x, y, sample_weight=np.where(para, pw, 1.0))

            def fn(r: dict, m: LogisticRegression = m) -> list:
                docs, rows = _features(r)
                return sorted(zip(docs, m.decision_function(np.array(rows)), strict=True),
                              key=lambda t: (-t[1], t[0]))
            out[f"LR ranker C={c} paraphrase weight {pw} (in-sample)"] = fn
    return out


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
    results = {}
    for name, fn in {**variants(), **rankers(data)}.items():
        e = evaluate(data, fn, ("dev", "para"))
        results[name] = {f"{h}/{c}": {"hit@5": a, "n": n, "mrr@10": m} for (h, c), (a, n, m) in e.items()}
        print(name.ljust(42), " ".join(f"{h[:4]}/{c[:6]}={a}/{n} ({m:.3f})" for (h, c), (a, n, m) in e.items()))
    out = ROOT / "benchmarks" / "results" / "fusion_lab_dev.json"
    out.write_text(json.dumps({"halves": "long-chats dev + the 16 paraphrases (not held out)",
                               "judge": "bench_long_chats.judge over passages merged as brb merges",
                               "variants": results}, indent=1))


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
