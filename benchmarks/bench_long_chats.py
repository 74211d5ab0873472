"""Retrieval on long multi-session chats: every brb mode beside plain BM25, MiniLM and RRF peers.

The questions and the archives come from :mod:`long_chats` (two LoCoMo conversations read from
``../shared/eval/long-chats/`` at run time; the fixed dev/test split is documented there). Each
conversation is its own archive and home: built, ingested with the real bundled model
(``brb ingest``), then asked every category 1-4 question verbatim with k = 10.

A question is found at rank r when the text of one of its evidence turns is inside the passage at
rank r (whitespace collapsed). Reported per system, overall and per category: recall@5 (any
evidence turn in the top 5), full-recall@10 (all of them in the top 10), MRR@10, each with a
bootstrap 95% interval (questions resampled).

The peers run in the same process over the very same 8-message windows (the store's chunk texts)
and return passages merged as brb merges them (:func:`brb_pipeline.core.search.fusion.merge_overlapping`):
plain BM25 (``bm25s``, English stop words), all-MiniLM-L6-v2 through sentence-transformers
(``benchmarks/setup_bench.sh``) on the bundled weights, and RRF(BM25, MiniLM) with k = 60.

    .venv/bin/python benchmarks/bench_long_chats.py --half test [--work /tmp/lc] [--reuse]

Writes ``benchmarks/results/long_chats_<half>.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import long_chats as lc  # noqa: E402
from bench_retrieval import bootstrap_ci  # noqa: E402

from brb_pipeline.core.search.fusion import Span, merge_lines, merge_overlapping, rrf_fuse  # noqa: E402
from brb_pipeline.config.settings import Settings  # noqa: E402

log = logging.getLogger("brb.bench")
K, DEPTH = 10, 50
BRB_MODES = ("hybrid", "lexical", "vector")


def ingest(stem: str, work: Path, reuse: bool) -> Path:
    """Build and ingest one conversation's archive (real model); returns its home."""
    home = work / f"home-{stem}"
    if reuse and (home / "brb.duckdb").exists():
        return home
    db, ab = lc.write_archive(lc.load(stem), work / f"archive-{stem}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "brb_pipeline.cli", "ingest", "--home", str(home), "--chat-db", str(db),
                    "--addressbook", str(ab), "--no-encryption", "--no-insights", "--progress", "none"],
                   check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    return home


class Windows:
    """The store's chunks, and passages made from a ranked chunk list as brb makes them."""

    def __init__(self, con: Any) -> None:
        rows = con.execute("SELECT chunk_id, chat_id, conversation, start_ts, end_ts, position, content "
                           "FROM chunks ORDER BY chat_id, position").fetchall()
        self.ids = [r[0] for r in rows]
        self.texts = [r[6] or "" for r in rows]
        self.meta = {r[0]: r for r in rows}

    def groups(self, ranked: Sequence[str]) -> list[list[str]]:
        """The chunk ids of each passage brb's merging makes from ``ranked``, in position order."""
        spans = [Span(c, self.meta[c][1], self.meta[c][2], self.meta[c][3], self.meta[c][4], 0.0, i, [c])
                 for i, c in enumerate(ranked[:DEPTH])]
        return [sorted(g.chunk_ids, key=lambda c: self.meta[c][5]) for g in merge_overlapping(spans)[:K]]

    def passages(self, ranked: Sequence[str]) -> list[str]:
        return [merge_lines([self.meta[c][6] or "" for c in members]) for members in self.groups(ranked)]


class Peers:
    """Plain BM25, MiniLM (sentence-transformers) and their RRF over one store's windows."""

    def __init__(self, w: Windows) -> None:
        import bm25s
        from sentence_transformers import SentenceTransformer

        from brb_pipeline.core.embedding.models import resolve_model

        self.w = w
        self.bm25 = bm25s.BM25()
        self.bm25.index(bm25s.tokenize(w.texts, stopwords="en", show_progress=False), show_progress=False)
        self.st = SentenceTransformer(str(resolve_model("bundled:all-MiniLM-L6-v2")), device="cpu")
        self.vecs = self.st.encode(w.texts, normalize_embeddings=True, batch_size=32)

    def bm25_ids(self, q: str) -> list[str]:
        import bm25s

        toks = bm25s.tokenize([q], stopwords="en", show_progress=False)
        if not toks.vocab:  # nothing left after stop words
            return []
        n = min(DEPTH, len(self.w.ids))
        docs, scores = self.bm25.retrieve(toks, k=n, show_progress=False)
        return [self.w.ids[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    def minilm_ids(self, q: str) -> list[str]:
        v = self.st.encode([q], normalize_embeddings=True)[0]
        order = np.argsort(-(self.vecs @ v), kind="stable")[:DEPTH]
        return [self.w.ids[int(i)] for i in order]

    def ranked(self) -> dict[str, Callable[[str], list[str]]]:
        """Each peer's ranked chunk ids for a query."""
        return {
            "peer: BM25 (bm25s)": self.bm25_ids,
            "peer: MiniLM (sentence-transformers)": self.minilm_ids,
            "peer: RRF(BM25, MiniLM)": lambda q: [d for d, _ in rrf_fuse([self.bm25_ids(q), self.minilm_ids(q)], k=60)],
        }

    def systems(self) -> dict[str, Callable[[str], list[str]]]:
        """Each peer's passages for a query, merged as brb merges."""
        return {name: (lambda q, f=f: self.w.passages(f(q))) for name, f in self.ranked().items()}


def brb_systems(searcher: Any, variants: dict[str, dict[str, Any]]) -> dict[str, Callable[[str], list[str]]]:
    def run(opts: dict[str, Any]) -> Callable[[str], list[str]]:
        return lambda q: [h["text"] or "" for h in searcher.search(q, k=K, log=False, **opts)["hits"]]

    out = {f"brb {m}" + (" (default)" if m == "hybrid" else ""): run({"mode": m}) for m in BRB_MODES}
    out["brb hybrid without the line re-rank"] = run({"mode": "hybrid", "lines": False})
    out.update({name: run(opts) for name, opts in variants.items()})
    return out


def judge(passages: Sequence[str], evidence: Sequence[str]) -> tuple[int | None, bool]:
    """(1-based rank of the first passage holding an evidence turn, all evidence in the top K)."""
    ev = [lc.squash(e) for e in evidence]
    flat = [lc.squash(p) for p in passages[:K]]
    first = next((i for i, p in enumerate(flat, 1) if any(e in p for e in ev)), None)
    return first, all(any(e in p for p in flat) for e in ev)


def summarize(rows: Sequence[tuple[int | None, bool]], boot: int) -> dict[str, Any]:
    per = {"recall@5": [float(r is not None and r <= 5) for r, _ in rows],
           "full_recall@10": [float(full) for _, full in rows],
           "mrr@10": [1.0 / r if r is not None else 0.0 for r, _ in rows]}
    out: dict[str, Any] = {"n": len(rows)}
    for name, vals in per.items():
        out[name] = round(float(np.mean(vals)), 3) if vals else 0.0
        out[name + "_ci"] = bootstrap_ci(vals, n=boot)
    return out


def tuning_variants() -> dict[str, dict[str, Any]]:
    """Hybrid with the lexical weight ramped by coverage (``Fusion.covered_lexical_weight``), for ``--tune``."""
    from brb_pipeline.core.search.fusion import Fusion

    out = {}
    if os.environ.get("BRB_TUNE_AGREEMENT"):  # second round: BM25's best must be near the vector top too
        for depth in (3, 5, 10, 20):
            for c0 in (0.3, 0.5):
                out[f"hybrid cov w=0.5 {c0} agree@{depth}"] = {"mode": "hybrid", "fusion": Fusion(
                    covered_lexical_weight=0.5, coverage_from=c0, coverage_full=c0, agreement_depth=depth)}
        return out
    for w in (0.3, 0.5, 0.7, 0.9):
        for c0, c1 in ((0.3, 0.6), (0.4, 0.7), (0.5, 0.8), (0.6, 0.9), (0.5, 0.5), (0.7, 0.7)):
            out[f"hybrid cov w={w} {c0}-{c1}"] = {"mode": "hybrid", "fusion": Fusion(
                covered_lexical_weight=w, coverage_from=c0, coverage_full=c1)}
    return out


def evaluate(half: str, work: Path, reuse: bool, variants: dict[str, dict[str, Any]], boot: int,
             peers: bool = True) -> tuple[dict[str, Any], dict[str, list]]:
    """Every system over both conversations' questions of ``half``."""
    from brb_pipeline.search.query import Searcher

    found: dict[str, list] = {}
    timing: dict[str, float] = {}
    for stem in lc.CONVERSATIONS:
        qs = [q for q in lc.questions(stem, lc.load(stem)) if q.half == half]
        with Searcher.open(Settings.load(ingest(stem, work, reuse))) as searcher:
            w = Windows(searcher.con)
            systems = {**brb_systems(searcher, variants), **(Peers(w).systems() if peers else {})}
            for name, fn in systems.items():
                t0 = time.perf_counter()
                for q in qs:
                    found.setdefault(name, []).append((q, *judge(fn(q.text), q.evidence)))
                timing[name] = timing.get(name, 0.0) + time.perf_counter() - t0
    report: dict[str, Any] = {}
    for name, rows in found.items():
        cats = {c: summarize([(r, f) for q, r, f in rows if q.category == c], boot)
                for c in lc.CATEGORIES.values()}
        report[name] = {"all": summarize([(r, f) for _, r, f in rows], boot), "per_category": cats,
                        "seconds": round(timing[name], 2)}
    return report, found


def table(report: dict[str, Any]) -> str:
    cats = list(lc.CATEGORIES.values())
    head = "| system | recall@5 [95% CI] | full-recall@10 | MRR@10 | " + " | ".join(
        f"{c} (n={next(iter(report.values()))['per_category'][c]['n']})" for c in cats) + " |"
    lines = [head, "|---" + "|---:" * (3 + len(cats)) + "|"]
    for name, r in report.items():
        a = r["all"]
        lines.append(f"| {name} | {a['recall@5']:.3f} [{a['recall@5_ci'][0]:.2f}, {a['recall@5_ci'][1]:.2f}] | "
                     f"{a['full_recall@10']:.3f} | {a['mrr@10']:.3f} | " + " | ".join(
                         f"{r['per_category'][c]['recall@5']:.3f} ({r['per_category'][c]['mrr@10']:.3f})"
                         for c in cats) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--half", choices=("dev", "test"), default="dev")
    ap.add_argument("--work", type=Path, default=Path("/tmp/brb-long-chats"))
    ap.add_argument("--reuse", action="store_true", help="Reuse an ingested home in --work.")
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--misses", action="store_true", help="Print the questions the default misses in the top 5.")
    ap.add_argument("--tune", action="store_true", help="Fusion variants of brb only (no peers); dev only.")
    ap.add_argument("--before", action="store_true", help="Also the default without the both-bests rule.")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.tune and args.half != "dev":
        ap.error("--tune runs on the dev half only")
    variants = tuning_variants() if args.tune else {}
    if args.before:
        from brb_pipeline.core.search.fusion import Fusion

        variants["brb hybrid without the both-bests rule (first pass)"] = {
            "mode": "hybrid", "fusion": Fusion(disagreement_depth=None)}
    report, found = evaluate(args.half, args.work, args.reuse, variants, args.boot, peers=not args.tune)
    print(f"long chats, {args.half} half: recall@5 per category (MRR@10)\n" + table(report))
    if args.misses:
        for q, r, _ in found["brb hybrid (default)"]:
            if r is None or r > 5:
                print(f"  miss [{q.category}] rank={r} {q.text}")
    out = {"half": args.half, "k": K, "depth": DEPTH, "split": "sha256(stem NUL question)[0] odd -> test",
           "machine": f"{platform.machine()} {os.cpu_count()} CPUs", "systems": report}
    path = args.out or ROOT / "benchmarks" / "results" / f"long_chats_{args.half}{'_tune' if args.tune else ''}.json"
    path.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
