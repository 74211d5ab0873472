"""Variants of the line re-rank (core/search/lines.py) on the dev halves of both question sets.

Issue 29 item 4. The re-rank's weights came from the long-chats dev half alone, where messages
are whole sentences; on the full demo corpus (chit-chat, many one-word lines) it lost dev
questions. This runs each variant on both dev halves in one process: the own frozen set's dev
half (``bench_retrieval.py``'s questions and judging, on a full demo home) and the long-chats dev
half (``bench_long_chats.py``'s homes and judging), so one choice is made for both. Test halves
are never read here.

    .venv/bin/python benchmarks/line_rerank_lab.py --home /tmp/full --lc-work /tmp/lcnew

Writes ``benchmarks/results/line_rerank_lab_dev_weights.json`` (the weights of the line-vector
order; the first, wider table is ``line_rerank_lab_dev.json``, see :data:`VARIANTS`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import bench_long_chats as blc  # noqa: E402
import bench_retrieval as br  # noqa: E402
import long_chats as lc  # noqa: E402
import polars as pl  # noqa: E402

from brb_pipeline.config.settings import Settings  # noqa: E402
from brb_pipeline.core.search import lines  # noqa: E402

#: (name, weight of the line-vector order; None: the fused order, no re-rank). The 14-variant
#: table in ``results/line_rerank_lab_dev.json`` (line BM25 and fewer-words variants too) came
#: from this script at commit debe49b, when ``core/search/lines.py`` still had those knobs.
VARIANTS = [("off", None), ("1/0/.25", 0.25), ("1/0/.5 (default)", 0.5), ("1/0/1", 1.0)]


def _set(weight: float | None) -> dict[str, Any]:
    if weight is not None:
        lines.WEIGHT = weight
    return {"mode": "hybrid", "lines": weight is not None}


def own_dev(home: Path) -> dict[str, dict[str, Any]]:
    from brb_pipeline.core.embedding.models import load_embedder
    from brb_pipeline.search.query import Searcher

    qs = br.load_questions(br.QUESTIONS_DIR / "retrieval_dev.json")["questions"]
    s = Settings.load(home)
    chunks, _ = br.store_rows(s)
    messages = pl.read_parquet(s.staging_dir / "messages.parquet")
    relevant = br.relevant_chunks(br.chunk_members(chunks, messages), br.resolve_targets(qs, messages))
    out = {}
    with Searcher(s, embedder=br.CachedEmbedder(load_embedder(s.embedding))) as searcher:
        for name, w in VARIANTS:
            rows = br.ask(searcher, qs, relevant, _set(w), 10)
            out[name] = {kind: sum(1 for r in rows if r["kind"] == kind and r["rank"] and r["rank"] <= 5)
                         for kind in ("paraphrase", "short", "contact", "exact")}
            out[name]["all"] = sum(out[name].values())
            out[name]["mrr"] = round(sum(1 / r["rank"] for r in rows if r["rank"]) / len(rows), 3)
    return out


def lc_dev(work: Path) -> dict[str, dict[str, Any]]:
    return lc_dev_counts(work, [(name, lambda w=w: _set(w)) for name, w in VARIANTS])


def lc_dev_counts(work: Path, variants: Sequence[tuple[str, Callable[[], dict[str, Any]]]]
                  ) -> dict[str, dict[str, Any]]:
    """Recall@5 counts per category and MRR@10 of each variant on the long-chats dev half:
    ``variants`` are (name, a function that sets the variant up and gives the search options)."""
    from brb_pipeline.search.query import Searcher

    found: dict[str, list] = {name: [] for name, _ in variants}
    for stem in lc.CONVERSATIONS:
        qs = [q for q in lc.questions(stem, lc.load(stem)) if q.half == "dev"]
        with Searcher.open(Settings.load(blc.ingest(stem, work, True))) as searcher:
            for name, setup in variants:
                opts = setup()
                for q in qs:
                    hits = searcher.search(q.text, k=blc.K, log=False, **opts)["hits"]
                    found[name].append((q, *blc.judge([h["text"] or "" for h in hits], q.evidence)))
    out = {}
    for name, rows in found.items():
        out[name] = {c: sum(1 for q, r, _ in rows if q.category == c and r and r <= 5) for c in lc.CATEGORIES.values()}
        out[name]["all"] = sum(out[name].values())
        out[name]["mrr"] = round(sum(1 / r for _, r, _ in rows if r) / len(rows), 3)
    return out


def write_tables(result: dict[str, dict[str, Any]], out: Path) -> None:
    """Print each part's rows (one JSON line per variant) and write them all to ``out``."""
    for part, table in result.items():
        print(part)
        for name, row in table.items():
            print(f"  {name:22s} {json.dumps(row)}")
    out.write_text(json.dumps(result, indent=1))


def dev_args(doc: str, out_name: str) -> argparse.Namespace:
    """``--home`` (a full demo home), ``--lc-work`` (the long-chats homes), ``--out`` (default
    ``benchmarks/results/<out_name>``): the arguments of the labs that run both dev halves."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--lc-work", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / out_name)
    return ap.parse_args()


def main() -> None:
    args = dev_args(__doc__, "line_rerank_lab_dev_weights.json")
    result = {"own_dev (hit@5 counts of 98)": own_dev(args.home), "long_chats_dev (recall@5 counts of 136)":
              lc_dev(args.lc_work)}
    write_tables(result, args.out)


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()
    main()
