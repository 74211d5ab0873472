"""One-shot ``brb search "QUERY"`` as a person runs it: a new process each time, so interpreter
start, imports, model load, store open, query embedding and search are all counted.

Runs ``--n`` different queries (the dev half's questions) in turn as ``brb search Q --json`` against
``--home`` and reports the wall time per call (p50/p95) next to what the process measured itself
(``latency_ms``: store open to result; ``timings_ms.embed``: the query embedding). The peer is a
process that only starts Python and imports nothing of ours (``python -c pass``), measured in the
same run, so the share of the floor that is the interpreter itself is visible. ``--peer-src DIR``
also runs another checkout of brb (``python -m brb_pipeline.cli`` from DIR, e.g. a ``git worktree``
of an earlier commit) on the same queries, interleaved call by call with ours.

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
    ap.add_argument("--peer-src", type=Path, default=None, help="another brb checkout to time beside this one")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "oneshot.json")
    args = ap.parse_args(argv)
    qs = [q["question"] for q in json.loads((ROOT / "benchmarks" / "questions" / "retrieval_dev.json")
                                            .read_text(encoding="utf-8"))["questions"]][: args.n]
    ours = [str(Path(sys.executable).parent / "brb")]
    peer = [sys.executable, "-m", "brb_pipeline.cli"]

    def call(cmd: list[str], q: str, cwd: Path | None) -> tuple[float, dict]:
        t = time.perf_counter()
        res = subprocess.run([*cmd, "search", q, "--home", str(args.home), "--json", "--mode", args.mode],
                             capture_output=True, text=True, check=True, cwd=cwd)
        return (time.perf_counter() - t) * 1000, json.loads(res.stdout)

    wall, inner, embed, bare, peer_wall = [], [], [], [], []
    call(ours, "warm up the page cache", None)
    for q in qs:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append((time.perf_counter() - t) * 1000)
        ms, out = call(ours, q, None)
        wall.append(ms)
        inner.append(float(out["latency_ms"]))
        embed.append(float(out["timings_ms"].get("embed", 0.0)))
        if args.peer_src:
            peer_wall.append(call(peer, q, args.peer_src)[0])
    result = {"benchmark": "oneshot", "home": str(args.home), "n": len(qs), "mode": args.mode,
              "wall_ms": {"p50": _p(wall, 50), "p95": _p(wall, 95)},
              "in_process_latency_ms": {"p50": _p(inner, 50), "p95": _p(inner, 95)},
              "query_embedding_ms": {"p50": _p(embed, 50), "p95": _p(embed, 95)},
              "python_start_ms": {"p50": _p(bare, 50), "p95": _p(bare, 95)}}
    if args.peer_src:
        result["peer"] = {"src": str(args.peer_src), "wall_ms": {"p50": _p(peer_wall, 50), "p95": _p(peer_wall, 95)}}
    print(f"one-shot brb search ({args.mode}, {len(qs)} queries): wall p50 {result['wall_ms']['p50']} ms, "
          f"p95 {result['wall_ms']['p95']} ms; in-process (open..result) p50 {result['in_process_latency_ms']['p50']} ms, "
          f"query embedding p50 {result['query_embedding_ms']['p50']} ms; bare python start p50 "
          f"{result['python_start_ms']['p50']} ms")
    if args.peer_src:
        print(f"peer {args.peer_src} in the same run: wall p50 {result['peer']['wall_ms']['p50']} ms, "
              f"p95 {result['peer']['wall_ms']['p95']} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
