"""Benchmark: does knowing everyone in group chats slow ingestion? (issue 28)

Ingests one demo archive with two checkouts of brb, alternating (A B B A A B B A ...) so that a
busy machine hurts both alike: wall time and the CPU time (user + system) of each `brb ingest`
subprocess, plus the run's own stage timings. The default embedding model, plaintext homes.

Usage:
    git archive <base-commit> | tar -x -C /tmp/brb-base
    .venv/bin/python benchmarks/bench_people_ingest.py --base /tmp/brb-base [--messages 3000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "people_ingest.json"


def _ingest(code: str, archive: Path, home: Path, keys: Path) -> dict:
    shutil.rmtree(home, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": code, "BRB_KEY_DIR": str(keys)}
    env.pop("BRB_EMBEDDING_MODEL", None)
    t = time.perf_counter()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([sys.executable, "-m", "brb_pipeline.cli", "ingest", "--chat-db", str(archive / "chat.db"),
                        "--addressbook", str(archive / "AddressBook"), "--progress", "none", "--no-encryption",
                        "--home", str(home)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    con = sqlite3.connect(home / "brb.db")
    timings = json.loads(con.execute("SELECT timings_json FROM ingestion_runs ORDER BY started_at DESC LIMIT 1")
                         .fetchone()[0] or "{}")
    con.close()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"wall": round(wall, 1), "cpu": round(cpu, 1),
            **{k: round(v, 2) for k, v in timings.items() if isinstance(v, (int, float))}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="checkout of the code to compare against")
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--work", type=Path, default=Path("/tmp/brb-bench-people"))
    args = ap.parse_args()
    archive = args.work / "archive"
    if not (archive / "chat.db").exists():
        subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from brb_pipeline.demo.generate "
                        "import build_demo_archive; build_demo_archive(Path(sys.argv[1]), messages=int(sys.argv[2]), seed=3)",
                        str(archive), str(args.messages)], check=True, env={**os.environ, "PYTHONPATH": str(HERE)})
    codes = {"base": args.base, "this": str(HERE)}
    runs: dict[str, list[dict]] = {k: [] for k in codes}
    for r in range(args.rounds):
        order = list(codes.items()) if r % 2 == 0 else list(reversed(codes.items()))
        for name, code in order:
            runs[name].append(_ingest(code, archive, args.work / f"home-{name}", args.work / "keys"))
            print(name, runs[name][-1], flush=True)
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("wall", "cpu")} for k, v in runs.items()}
    out = {"messages": args.messages, "rounds": args.rounds, "median": med, "runs": runs}
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(med))


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
