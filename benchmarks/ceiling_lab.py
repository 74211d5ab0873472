"""How far can re-ranking and fusion take the own frozen set? Dev halves only.

Issue 29 asks hybrid hit@5 >= 0.70 on the own frozen set's test half (0.576 today). This lab asks
what any re-ranking of the lists search already has could reach, and runs the two cheap levers
left that need no new model, on both dev halves in one process. Test halves are never read.

1. **Ceiling (own dev).** Per question, the first relevant rank in each list search has, without
   merging: brb's vector, lexical and hybrid modes (routing as users get it) and a global
   best-message-line order (every chunk scored by its best stored line vector's cosine over the
   whole store, :mod:`brb_pipeline.core.store.line_index`; no routing). ``ANY@5`` counts the
   questions some list holds in its top 5: an oracle that picks the right list per question.
   No fusion of these lists can beat it by more than a rank swap inside the top 50.
2. **Global line candidates.** The line re-rank (:mod:`brb_pipeline.core.search.lines`) moves the
   two lists' candidates only; here the global line order's top ``M`` chunks join its pool (the
   parent-child retrieval of the literature: children found anywhere, their parents returned).
3. **Vector pseudo-relevance feedback** (Rocchio): the query vector plus ``beta`` times the mean
   of its top ``k`` windows' vectors (within the same filters), before both lists are made.

    .venv/bin/python benchmarks/ceiling_lab.py --home /tmp/full --lc-work /tmp/lcnew

Writes ``benchmarks/results/ceiling_lab_dev.json``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import bench_retrieval as br  # noqa: E402
import line_rerank_lab  # noqa: E402
import polars as pl  # noqa: E402

from brb_pipeline.config.settings import Settings  # noqa: E402
from brb_pipeline.core.search import hybrid  # noqa: E402
from brb_pipeline.core.search import lines as lines_mod  # noqa: E402
from brb_pipeline.core.search.fusion import rrf_fuse  # noqa: E402
from brb_pipeline.search import query as query_mod  # noqa: E402

KINDS = ("paraphrase", "short", "contact", "exact")
#: (name, global line candidates M, Rocchio k, Rocchio beta)
VARIANTS = [("default", 0, 0, 0.0), ("+ global lines M=20", 20, 0, 0.0), ("+ global lines M=50", 50, 0, 0.0),
            ("PRF k=3 beta=.3", 0, 3, 0.3), ("PRF k=3 beta=.6", 0, 3, 0.6), ("PRF k=10 beta=.3", 0, 10, 0.3),
            ("PRF k=10 beta=.6", 0, 10, 0.6)]


class Lines:
    """Every stored line vector of one resident store as float32 unit rows, for global scoring."""

    def __init__(self, r: Any) -> None:
        m = r.line_vecs.astype(np.float32)
        self.m = m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), np.float32(1e-12))
        self.ptr, self.ids = r.line_ptr, r.ids
        self.rows = np.flatnonzero(np.diff(self.ptr) > 0)

    def chunk_scores(self, qv: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
        best = np.full(len(self.ids), -2.0, dtype=np.float32)
        best[self.rows] = np.maximum.reduceat(self.m @ (qv / np.linalg.norm(qv)), self.ptr[self.rows])
        if keep is not None:
            best[~keep] = -2.0
        return best


class Patch:
    """The variants, patched into brb's own search path (resident stores only)."""

    def __init__(self) -> None:
        self.m, self.k, self.beta, self.glob = 0, 0, 0.0, []
        self._lines: dict[int, Lines] = {}
        self._search, self._cands, self._ranked = query_mod.search, hybrid._resident_candidates, hybrid._ranked
        query_mod.search, hybrid._resident_candidates, hybrid._ranked = self.search, self.candidates, self.ranked

    def lines(self, r: Any) -> Lines:
        if id(r) not in self._lines:
            self._lines[id(r)] = Lines(r)
        return self._lines[id(r)]

    def search(self, con: Any, **kw: Any) -> Any:
        r, qv = kw.get("resident"), kw.get("query_vec")
        if self.k and r is not None and qv is not None:
            qv = np.asarray(qv, dtype=np.float32) / np.linalg.norm(qv)
            sc = r.vectors @ qv
            keep = r.mask(kw.get("filters", hybrid.Filters()))
            if keep is not None:
                sc = np.where(keep, sc, -2.0)
            centroid = r.vectors[np.argpartition(-sc, self.k)[:self.k]].mean(axis=0)
            nq = qv + self.beta * centroid / np.linalg.norm(centroid)
            kw["query_vec"] = (nq / np.linalg.norm(nq)).astype(np.float32)
        return self._search(con, **kw)

    def candidates(self, con: Any, r: Any, q: Any, keep: Any, timings: dict) -> Any:
        out = self._cands(con, r, q, keep, timings)
        self.glob = []
        if self.m and q.vec is not None and r.line_vecs is not None:
            best = self.lines(r).chunk_scores(np.asarray(q.vec, dtype=np.float32), keep)
            top = np.argpartition(-best, self.m)[:self.m]
            self.glob = [r.ids[j] for j in top[np.argsort(-best[top])] if best[j] > -2.0]
        return out

    def ranked(self, rows_of: Any, q: Any, result: Any, fusion: Any, vec: list, lex: list, by_lines: bool = True) -> Any:
        if not self.glob or q.mode != "hybrid":
            return self._ranked(rows_of, q, result, fusion, vec, lex, by_lines)
        fused, fused_topics = hybrid.split(hybrid._fuse(q.mode, vec, lex, fusion, result.specific,
                                                         result.lexical_coverage))
        pool = [c for c, _ in fused] + [c for c in self.glob if c not in {c for c, _ in fused}]
        order = lines_mod.line_vector_order(pool, rows_of.lines(pool, q.dim), q.vec)
        out = rrf_fuse([[c for c, _ in fused], order], k=lines_mod.RRF_K, weights=[1.0, lines_mod.WEIGHT])
        result.lines_reranked = True
        result.phrases = hybrid.quoted_phrases(q.lexical_text)
        if result.phrases:
            out = hybrid.phrase_first(out, rows_of.fetch([c for c, _ in out], "chunk_id, content"), result.phrases)
        return out, fused_topics

    def set(self, m: int, k: int, beta: float) -> None:
        self.m, self.k, self.beta = m, k, beta


def own_dev(home: Path, patch: Patch) -> tuple[dict, dict]:
    from brb_pipeline.core.embedding.models import load_embedder
    from brb_pipeline.search.query import Searcher

    qs = br.load_questions(br.QUESTIONS_DIR / "retrieval_dev.json")["questions"]
    s = Settings.load(home)
    chunks, _ = br.store_rows(s)
    messages = pl.read_parquet(s.staging_dir / "messages.parquet")
    relevant = br.relevant_chunks(br.chunk_members(chunks, messages), br.resolve_targets(qs, messages))
    emb = br.CachedEmbedder(load_embedder(s.embedding))
    with Searcher(s, embedder=emb) as searcher:
        patch.set(0, 0, 0.0)
        ranks = {m: [r["rank"] for r in br.ask(searcher, qs, relevant, {"mode": m, "merge": False}, 50)]
                 for m in ("vector", "lexical", "hybrid")}
        glob = patch.lines(searcher.resident)
        ranks["lines"] = []
        for q in qs:
            order = np.argsort(-glob.chunk_scores(np.asarray(emb.embed_query(q["question"]), dtype=np.float32)))[:50]
            ranks["lines"].append(next((i + 1 for i, j in enumerate(order) if glob.ids[j] in relevant[q["id"]]), None))
        ceiling = {}
        for kind in (*KINDS, "all"):
            idx = [i for i, q in enumerate(qs) if kind in ("all", q["kind"])]
            row: dict[str, int] = {"n": len(idx)}
            for cut in (5, 50):
                for name, rk in ranks.items():
                    row[f"{name}@{cut}"] = sum(1 for i in idx if rk[i] and rk[i] <= cut)
                row[f"ANY@{cut}"] = sum(1 for i in idx if any(rk[i] and rk[i] <= cut for rk in ranks.values()))
            ceiling[kind] = row
        variants = {}
        for name, m, k, beta in VARIANTS:
            patch.set(m, k, beta)
            t = time.perf_counter()
            rows = br.ask(searcher, qs, relevant, {"mode": "hybrid"}, 10)
            row = {kind: sum(1 for r in rows if r["kind"] == kind and r["rank"] and r["rank"] <= 5) for kind in KINDS}
            row["all"] = sum(row.values())
            row["mrr"] = round(sum(1 / r["rank"] for r in rows if r["rank"]) / len(rows), 3)
            row["seconds"] = round(time.perf_counter() - t, 1)
            variants[name] = row
    return ceiling, variants


def lc_dev(work: Path, patch: Patch) -> dict[str, dict[str, Any]]:
    def setup(m: int, k: int, beta: float) -> dict[str, Any]:
        patch.set(m, k, beta)
        return {"mode": "hybrid"}

    return line_rerank_lab.lc_dev_counts(work, [(name, lambda v=(m, k, beta): setup(*v))
                                                for name, m, k, beta in VARIANTS])


def main() -> None:
    args = line_rerank_lab.dev_args(__doc__, "ceiling_lab_dev.json")
    patch = Patch()
    ceiling, variants = own_dev(args.home, patch)
    result = {"own_dev ceiling (questions with a relevant chunk in the top N of each list, no merging)": ceiling,
              "own_dev variants (hit@5 counts of 98)": variants,
              "long_chats_dev variants (recall@5 counts of 136)": lc_dev(args.lc_work, patch)}
    line_rerank_lab.write_tables(result, args.out)


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()
    main()
