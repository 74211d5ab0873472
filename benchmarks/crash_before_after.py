"""Kill a real `brb ingest` from outside (SIGKILL at a JSON-lines progress line) and report what
is left: search in every mode, `brb status`, and whether a plain rerun finishes within a bound.

Runs against whichever brb_pipeline is first on the path, so the same script compares two
commits in one run, e.g. an old checkout through PYTHONPATH against the working tree:

    git worktree add /tmp/old <rev>
    PYTHONPATH=/tmp/old .venv/bin/python benchmarks/crash_before_after.py --root /tmp/ba --label old
    .venv/bin/python benchmarks/crash_before_after.py --root /tmp/ba --label new

Each kill point starts from a home ingested from the archive without its newest quarter of
messages; those messages then arrive in the same chat.db and the ingest that loads them is killed.
Prints one JSON line per kill point. Uses the hash embedder (the process, not the model, is tested).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ENV = {**os.environ, "BRB_EMBEDDING_MODEL": "hash", "BRB_HDBSCAN_MIN_CLUSTER_SIZE": "8", "PYTHONUNBUFFERED": "1"}
ENV.pop("BRB_FAULT", None)
# -P: the working directory is not put on the path, so PYTHONPATH decides which brb_pipeline runs
PY = [sys.executable, "-P", "-m", "brb_pipeline.cli"]
KILL_AT = {"first saving line": lambda m: True, "chunks stored": lambda m: "chunks stored" in m.get("message", "")}


def brb(*args: str, home: Path, timeout: float = 120) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(PY + list(args) + ["--home", str(home)], capture_output=True, text=True, env=ENV,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:  # run() has killed it
        return None


def archives(root: Path) -> tuple[Path, Path]:
    """(before.db, after.db): a 400-message demo chat.db without and with its newest quarter."""
    before, after = root / "before.db", root / "after.db"
    if not after.exists():
        from brb_pipeline.demo.chatdb_writer import _register_trigger_functions
        from brb_pipeline.demo.generate import build_demo_archive

        a = build_demo_archive(root / "archive", messages=400, seed=5)
        shutil.copy(a.chat_db, after)
        shutil.copy(a.chat_db, before)
        con = sqlite3.connect(before)
        _register_trigger_functions(con)
        n = con.execute("SELECT count(*) FROM message").fetchone()[0]
        cut = con.execute("SELECT date FROM message ORDER BY date DESC LIMIT 1 OFFSET ?", (n // 4,)).fetchone()[0]
        con.execute("DELETE FROM chat_message_join WHERE message_id IN (SELECT ROWID FROM message WHERE date > ?)",
                    (cut,))
        con.execute("DELETE FROM message WHERE date > ?", (cut,))
        con.commit()
        con.close()
    return before, after


def kill_once(root: Path, label: str, when: str, rerun_bound: float) -> dict:
    before, after = archives(root)
    src = root / "src"
    src.mkdir(exist_ok=True)
    home = root / f"{label}-{when.replace(' ', '_')}"
    shutil.rmtree(home, ignore_errors=True)
    shutil.copy(before, src / "chat.db")
    r = brb("ingest", "--chat-db", str(src / "chat.db"), "--progress", "none", "--no-insights", home=home)
    if r is None or r.returncode:
        raise SystemExit(f"baseline ingest failed: {r and r.stderr[-500:]}")
    shutil.copy(after, src / "chat.db")  # new messages arrive
    p = subprocess.Popen(PY + ["ingest", "--progress", "jsonl", "--no-insights", "--home", str(home)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=ENV,
                         stdin=subprocess.DEVNULL)
    for line in p.stdout:
        m = json.loads(line)
        if m.get("stage") == "saving" and KILL_AT[when](m):
            p.send_signal(signal.SIGKILL)
            break
    p.wait()
    search = {}
    for mode in ("hybrid", "vector", "lexical"):
        s = brb("search", "dinner", "--mode", mode, "--json", home=home, timeout=60)
        search[mode] = "ok" if s and s.returncode == 0 else (s.stderr.strip().splitlines()[-1][:100] if s else "timeout")
    st = brb("status", "--json", home=home)
    status = json.loads(st.stdout)["last_ingestion"]["status"] if st and st.returncode == 0 else None
    t0 = time.perf_counter()
    rr = brb("ingest", "--progress", "none", "--no-insights", home=home, timeout=rerun_bound)
    took = time.perf_counter() - t0
    rerun = f"rc {rr.returncode} in {took:.1f} s" if rr else f"still running after {took:.0f} s (killed)"
    return {"code": label, "killed_at": when, "rc": p.returncode, "search": search, "status_after_kill": status,
            "rerun": rerun}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, required=True, help="work folder (archives and homes are made there)")
    ap.add_argument("--label", default="this", help="name of the code under test in the output")
    ap.add_argument("--rerun-bound", type=float, default=90.0, help="seconds a rerun may take before it counts as hung")
    args = ap.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    for when in KILL_AT:
        print(json.dumps(kill_once(args.root, args.label, when, args.rerun_bound)), flush=True)


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
