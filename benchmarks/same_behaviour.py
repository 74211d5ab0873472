"""Does a refactor change what brb does? Run two checkouts of brb on the same inputs and compare.

For each checkout (a directory holding ``brb_pipeline``, e.g. a ``git worktree`` of the commit
before a change), in its own processes (``PYTHONPATH`` = the checkout):

- the long-chats archives (:mod:`long_chats`, both conversations) are ingested with the real
  bundled model, and every question of the test half is asked in one ``brb search -`` session
  (``--json -k 5``, each mode); the hits' chunk ids, in order, are recorded;
- ``brb demo --messages N`` is built and its ``brb status --json`` counts are recorded.

    .venv/bin/python benchmarks/same_behaviour.py OLD_CHECKOUT NEW_CHECKOUT [--work /tmp/same]

Prints what differs (nothing when behaviour is the same) and writes
``benchmarks/results/same_behaviour.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import long_chats as lc  # noqa: E402

MODES = ("hybrid", "lexical", "vector")
COUNTS = ("messages", "contacts", "people", "named_people", "conversations", "chunks", "clusters", "batches")


def brb(checkout: Path, *args: str, stdin: str | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": str(checkout), "BRB_EMBEDDING_DEVICE": "cpu"}
    r = subprocess.run([sys.executable, "-m", "brb_pipeline.cli", *args], input=stdin, capture_output=True,
                       text=True, env=env, cwd=checkout)
    if r.returncode != 0:
        raise SystemExit(f"{checkout}: brb {args[0]} failed: {r.stderr.strip().splitlines()[-1:]}")
    return r.stdout


def run(checkout: Path, work: Path, demo_messages: int) -> dict[str, Any]:
    out: dict[str, Any] = {"search": {}, "demo": {}}
    for stem in lc.CONVERSATIONS:
        conv = lc.load(stem)
        db, ab = lc.write_archive(conv, work / f"archive-{stem}")
        home = work / f"home-{stem}"
        brb(checkout, "ingest", "--home", str(home), "--chat-db", str(db), "--addressbook", str(ab),
            "--no-encryption", "--no-insights", "--progress", "none")
        qs = [" ".join(q.text.split()) for q in lc.questions(stem, conv) if q.half == "test"]
        for mode in MODES:
            lines = brb(checkout, "search", "-", "--json", "-k", "5", "--mode", mode, "--home", str(home),
                        stdin="\n".join(qs) + "\n").splitlines()
            out["search"][f"{stem}/{mode}"] = [[h["chunk_id"] for h in json.loads(line)["hits"]] for line in lines]
    home = work / "demo"
    brb(checkout, "demo", "--messages", str(demo_messages), "--home", str(home), "--progress", "none")
    status = json.loads(brb(checkout, "status", "--json", "--home", str(home)))
    out["demo"] = {k: status.get(k) for k in COUNTS}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--work", type=Path, default=Path("/tmp/same-behaviour"))
    ap.add_argument("--demo-messages", type=int, default=1500)
    a = ap.parse_args()
    got = {name: run(path.resolve(), a.work / name, a.demo_messages) for name, path in (("old", a.old), ("new", a.new))}
    diffs = []
    for key, hits in got["old"]["search"].items():
        other = got["new"]["search"].get(key)
        changed = sum(x != y for x, y in zip(hits, other or [])) if other else len(hits)
        print(f"{key}: {len(hits)} questions, {changed} with other hits")
        if changed:
            diffs.append(key)
    print("demo old:", got["old"]["demo"])
    print("demo new:", got["new"]["demo"])
    if got["old"]["demo"] != got["new"]["demo"]:
        diffs.append("demo")
    report = {"old": str(a.old), "new": str(a.new), "differs": diffs,
              "questions": {k: len(v) for k, v in got["old"]["search"].items()}, "demo": got}
    (ROOT / "benchmarks" / "results" / "same_behaviour.json").write_text(json.dumps(report, indent=1)[:2_000_000])
    print("SAME" if not diffs else f"DIFFERENT: {diffs}")


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
