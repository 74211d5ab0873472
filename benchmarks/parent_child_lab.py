"""Parent-child retrieval on the long chats: match single messages, return their 8-message window.

Issue 29 item 4. A fact said in one message is diluted in an 8-message window, both for BM25
(length normalization, the window's other words) and for the embedding (one sentence among
eight). Here the *children* are the messages themselves (each message's line, in the chunk's
``embedding_text`` layout: the conversation header, then ``Speaker: text``), and a child's
*parents* are the chunks that hold it (two, windows overlap). Per question:

* ``brb``: brb's own default ranking of chunks (``Searcher.search`` with ``merge=False``, routing,
  dates and fusion as a user gets them);
* ``child lex``: BM25 (``bm25s``, English stop words) over the messages, a child's rank given to
  its parents;
* ``child vec``: the store's own embedding model over the messages (exact cosine), the same way.

Variants fuse the three chunk lists (weighted RRF, or the child lists first within brb's top-n)
and make passages with brb's own merging (:meth:`bench_long_chats.Windows.passages`), judged
exactly as ``bench_long_chats.py`` judges them. Everything per question is computed once and
cached, so the grid costs nothing; the choice is made on **dev** (``--half dev``), and ``--half
test --only NAME`` reports the chosen variant once, beside brb and the peers of the same run.

    .venv/bin/python benchmarks/parent_child_lab.py --half dev --work /tmp/lc [--reuse]

Writes ``benchmarks/results/parent_child_lab_<half>.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
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

import bench_long_chats as blc  # noqa: E402
import long_chats as lc  # noqa: E402

from brb_pipeline.core.search.fusion import rrf_fuse  # noqa: E402
from brb_pipeline.config.settings import Settings  # noqa: E402

DEPTH = 50


class Children:
    """The messages of one store as retrieval units, each mapped to the chunks that hold it."""

    def __init__(self, con: Any, embedder: Any | None) -> None:
        import bm25s

        rows = con.execute("SELECT chunk_id, embedding_text FROM chunks ORDER BY chat_id, position").fetchall()
        texts: dict[str, int] = {}
        self.parents: list[list[str]] = []
        self.texts: list[str] = []
        for cid, etext in rows:
            head, *lines = (etext or "").split("\n")
            for line in lines:
                unit = f"{head}\n{line}"
                i = texts.setdefault(unit, len(self.texts))
                if i == len(self.texts):
                    self.texts.append(unit)
                    self.parents.append([])
                self.parents[i].append(cid)
        self.bm25 = bm25s.BM25()
        self.bm25.index(bm25s.tokenize([t.split("\n", 1)[1] for t in self.texts], stopwords="en",
                                       show_progress=False), show_progress=False)
        self.embedder = embedder
        t0 = time.perf_counter()
        self.vecs = np.asarray(embedder.embed(self.texts), dtype=np.float32) if embedder is not None else None
        self.embed_s = time.perf_counter() - t0

    def _to_parents(self, order: Sequence[int]) -> list[str]:
        out: list[str] = []
        for i in order:
            out.extend(c for c in self.parents[int(i)] if c not in out)
        return out[:DEPTH]

    def lex(self, q: str) -> list[str]:
        import bm25s

        toks = bm25s.tokenize([q], stopwords="en", show_progress=False)
        if not toks.vocab:
            return []
        docs, scores = self.bm25.retrieve(toks, k=min(DEPTH, len(self.texts)), show_progress=False)
        return self._to_parents([d for d, s in zip(docs[0], scores[0], strict=True) if s > 0])

    def vec(self, q: str) -> list[str]:
        v = np.asarray(self.embedder.embed_query(q), dtype=np.float32)
        return self._to_parents(np.argsort(-(self.vecs @ v), kind="stable")[:DEPTH])

    def pool(self, q: str, chunks: Sequence[str]) -> tuple[list[str], list[str]]:
        """``chunks`` (a search's candidate pool) re-ranked by their best child: by BM25, by cosine."""
        import bm25s

        v = np.asarray(self.embedder.embed_query(q), dtype=np.float32)
        cos = self.vecs @ v
        toks = bm25s.tokenize([q], stopwords="en", show_progress=False)
        inv = {i: t for t, i in toks.vocab.items()}
        lex = (self.bm25.get_scores([inv[i] for i in toks.ids[0]]) if toks.vocab else np.zeros(len(self.texts)))
        best_v: dict[str, float] = {}
        best_l: dict[str, float] = {}
        want = set(chunks)
        for i, parents in enumerate(self.parents):
            for c in parents:
                if c in want:
                    best_v[c] = max(best_v.get(c, -9.0), float(cos[i]))
                    best_l[c] = max(best_l.get(c, 0.0), float(lex[i]))
        order = {c: n for n, c in enumerate(chunks)}
        bv = sorted(best_v, key=lambda c: (-best_v[c], order[c]))
        bl = sorted((c for c in best_l if best_l[c] > 0), key=lambda c: (-best_l[c], order[c]))
        return bl, bv


def variants() -> dict[str, Callable[[dict[str, list[str]]], list[str]]]:
    """Ways to combine brb's chunk list with the two child lists (each ``lists -> ranked chunks``)."""
    out: dict[str, Callable[[dict[str, list[str]]], list[str]]] = {"brb (recomputed)": lambda L: L["brb"]}

    def rrf(wl: float, wv: float, k: int = 60) -> Callable[[dict[str, list[str]]], list[str]]:
        return lambda L: [d for d, _ in rrf_fuse([L["brb"], L["clex"], L["cvec"]], k=k, weights=[1.0, wl, wv])]

    for wl in (0.0, 0.25, 0.5, 1.0):
        for wv in (0.0, 0.25, 0.5, 1.0):
            if wl or wv:
                out[f"rrf brb+{wl}*clex+{wv}*cvec"] = rrf(wl, wv)
    for k in (10, 30):
        out[f"rrf k={k} brb+0.5*clex+0.5*cvec"] = rrf(0.5, 0.5, k)

    def promote(n: int, which: str) -> Callable[[dict[str, list[str]]], list[str]]:
        def run(L: dict[str, list[str]]) -> list[str]:
            top = L[which][:n]
            return top + [c for c in L["brb"] if c not in top]
        return run

    for n in (1, 2):
        out[f"child-lex top{n} first"] = promote(n, "clex")
        out[f"child-vec top{n} first"] = promote(n, "cvec")

    def both_first(L: dict[str, list[str]]) -> list[str]:
        top = list(dict.fromkeys(L["brb"][:2] + L["clex"][:1] + L["cvec"][:1]))
        return top + [c for c in L["brb"] if c not in top]

    out["brb top2, child-lex 1, child-vec 1"] = both_first

    def pool(wl: float, wv: float) -> Callable[[dict[str, list[str]]], list[str]]:
        return lambda L: [d for d, _ in rrf_fuse([L["brb"], L["plex"], L["pvec"]], k=60, weights=[1.0, wl, wv])]

    for wl, wv in ((0.0, 0.25), (0.0, 0.5), (0.25, 0.25), (0.25, 0.5), (0.5, 0.5)):
        out[f"pool rrf brb+{wl}*clex+{wv}*cvec"] = pool(wl, wv)
    return out


def collect(half: str, work: Path, reuse: bool) -> tuple[list[tuple[Any, dict[str, list[str]]]], dict[str, Any]]:
    """Per question of ``half``: (question, {brb, clex, cvec, passages of each brb mode and peer})."""
    from brb_pipeline.search.query import Searcher

    out: list[tuple[Any, dict[str, list[str]]]] = []
    cost: dict[str, Any] = {"messages": 0, "chunks": 0, "child_embed_s": 0.0}
    for stem in lc.CONVERSATIONS:
        qs = [q for q in lc.questions(stem, lc.load(stem)) if q.half == half]
        with Searcher.open(Settings.load(blc.ingest(stem, work, reuse))) as searcher:
            w = blc.Windows(searcher.con)
            ch = Children(searcher.con, searcher.embedder)
            cost["messages"] += len(ch.texts)
            cost["chunks"] += len(w.ids)
            cost["child_embed_s"] += ch.embed_s
            t0 = time.perf_counter()
            ch.embedder.embed([t for t in w.texts])
            cost["chunk_embed_s"] = cost.get("chunk_embed_s", 0.0) + time.perf_counter() - t0
            systems = {**blc.brb_systems(searcher, {}), **blc.Peers(w).systems()}
            for q in qs:
                res = searcher.search(q.text, k=DEPTH, merge=False, log=False)
                lists = {"brb": [h["chunk_id"] for h in res["hits"] if h["kind"] == "chunk"],
                         "clex": ch.lex(q.text), "cvec": ch.vec(q.text), "_w": w}
                lists["plex"], lists["pvec"] = ch.pool(q.text, lists["brb"])
                lists.update({f"sys:{name}": fn(q.text) for name, fn in systems.items()})
                out.append((q, lists))
    return out, cost


def evaluate(rows: list[tuple[Any, dict[str, Any]]], boot: int, only: Sequence[str] | None) -> dict[str, Any]:
    found: dict[str, list] = {}
    for q, L in rows:
        for key in [k for k in L if k.startswith("sys:")]:
            found.setdefault(key[4:], []).append((q, *blc.judge(L[key], q.evidence)))
        for name, fn in variants().items():
            if only and name not in only and name != "brb (recomputed)":
                continue
            found.setdefault(name, []).append((q, *blc.judge(L["_w"].passages(fn(L)), q.evidence)))
    report = {}
    for name, r in found.items():
        report[name] = {"all": blc.summarize([(a, b) for _, a, b in r], boot), "per_category": {
            c: blc.summarize([(a, b) for q, a, b in r if q.category == c], boot) for c in lc.CATEGORIES.values()}}
    return report


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--half", choices=("dev", "test"), default="dev")
    ap.add_argument("--work", type=Path, default=Path("/tmp/brb-long-chats"))
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--only", action="append", help="Variants to report (required with --half test).")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.half == "test" and not args.only:
        ap.error("the test half reports the variant chosen on dev: name it with --only")
    rows, cost = collect(args.half, args.work, args.reuse)
    report = evaluate(rows, args.boot, args.only)
    print(f"parent-child lab, {args.half} half: recall@5 per category (MRR@10)\n" + blc.table(
        {n: {**r, "seconds": 0} for n, r in report.items()}))
    print("cost:", json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in cost.items()}))
    out = {"half": args.half, "cost": cost, "systems": report}
    path = args.out or ROOT / "benchmarks" / "results" / f"parent_child_lab_{args.half}.json"
    path.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
