"""One-shot ``brb search "QUERY"`` as a person runs it: a new process each time, so interpreter
start, imports, model load, store open, query embedding and search are all counted.

Runs ``--n`` different queries (the dev half's questions) in turn as ``brb search Q --json`` against
``--home`` and reports the wall time per call (p50/p95) next to what the process measured itself
(``latency_ms``: store open to result; ``timings_ms.embed``: the query embedding). The peer is a
process that only starts Python and imports nothing of ours (``python -c pass``), measured in the
same run, so the share of the floor that is the interpreter itself is visible.

    .venv/bin/python benchmarks/bench_oneshot.py --home ~/.brb-demo [--n 20]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _p(a: list[float], q: float) -> float:
    return round(float(np.percentile(a, q)), 1) if a else 0.0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--mode", default="hybrid")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "oneshot.json")
    args = ap.parse_args(argv)
    qs = [q["question"] for q in json.loads((ROOT / "benchmarks" / "questions" / "retrieval_dev.json")
                                            .read_text(encoding="utf-8"))["questions"]][: args.n]
    brb = str(Path(sys.executable).parent / "brb")
    wall, inner, embed, bare = [], [], [], []
    subprocess.run([brb, "search", "warm up the page cache", "--home", str(args.home), "--json"],
                   capture_output=True, check=True)
    for q in qs:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        res = subprocess.run([brb, "search", q, "--home", str(args.home), "--json", "--mode", args.mode],
                             capture_output=True, text=True, check=True)
        wall.append((time.perf_counter() - t) * 1000)
        out = json.loads(res.stdout)
        inner.append(float(out["latency_ms"]))
        embed.append(float(out["timings_ms"].get("embed", 0.0)))
    result = {"benchmark": "oneshot", "home": str(args.home), "n": len(qs), "mode": args.mode,
              "wall_ms": {"p50": _p(wall, 50), "p95": _p(wall, 95)},
              "in_process_latency_ms": {"p50": _p(inner, 50), "p95": _p(inner, 95)},
              "query_embedding_ms": {"p50": _p(embed, 50), "p95": _p(embed, 95)},
              "python_start_ms": {"p50": _p(bare, 50), "p95": _p(bare, 95)}}
    print(f"one-shot brb search ({args.mode}, {len(qs)} queries): wall p50 {result['wall_ms']['p50']} ms, "
          f"p95 {result['wall_ms']['p95']} ms; in-process (open..result) p50 {result['in_process_latency_ms']['p50']} ms, "
          f"query embedding p50 {result['query_embedding_ms']['p50']} ms; bare python start p50 "
          f"{result['python_start_ms']['p50']} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
