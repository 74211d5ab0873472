"""`brb mcp` through the real protocol: `search` tool-call latency once started, and start-up to
the first answer.

* Latency: the official SDK's stdio client starts ``brb mcp --home LARGE`` (a home of ~64K chunks),
  makes a few warm-up calls, then ``--queries`` ``search`` calls (hybrid, k 10), each timed from
  the client's send to its parsed result (protocol, search, line rendering, JSON both ways), each
  followed by a ``ping`` (the protocol's bare round trip). Peer in
  the same run: the same queries answered in this process (``Home.call``, no protocol, and
  ``Searcher.search`` alone, without the lines and citations the tool adds), and, when
  the home was embedded with the hash embedder, the configured real model's query embedding timed
  apart (``--real-model``; the hash embedder's own costs ~0.1 ms, so the real model's time is what
  a real home adds to each call).
* Start-up: ``--starts`` times, a fresh ``brb mcp --home DEMO`` process from spawn to the answer of
  its first ``search`` (the process start, imports, store and model load, chunks into memory).

Queries: 2-3 words drawn from random stored chunks (seeded), plus every fifth query filtered to
that chunk's contact.

Run: ``.venv/bin/python benchmarks/bench_mcp.py --home /tmp/h64k --home-model hash
[--demo-home /tmp/i30-demo]``. Writes ``benchmarks/results/bench_mcp.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import anyio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results"
_WORD_RE = re.compile(r"[a-z]{4,}")


def pct(xs: list[float]) -> dict:
    return {"n": len(xs), "p50_ms": round(float(np.percentile(xs, 50)), 2),
            "p95_ms": round(float(np.percentile(xs, 95)), 2), "max_ms": round(float(max(xs)), 2)}


def make_queries(home: Path, n: int, seed: int) -> list[dict]:
    """``search`` arguments drawn from the home's stored chunks."""
    from brb_pipeline import keys as _keys
    _keys.install()  # an encrypted home's files open with its key
    from brb_pipeline.core.store import duck

    rng = np.random.default_rng(seed)
    con = duck.connect(home / "brb.duckdb", read_only=True)
    try:
        rows = con.execute("SELECT content, contact_id FROM chunks").fetchall()
    finally:
        con.close()
    out = []
    for i in rng.choice(len(rows), size=min(n, len(rows)), replace=False).tolist():
        content, contact = rows[i]
        words = _WORD_RE.findall(content.lower()) or ["hello"]
        q = {"query": " ".join(rng.choice(words, size=min(int(rng.integers(2, 4)), len(words)), replace=False)), "k": 10}
        if len(out) % 5 == 4 and contact:
            q["contact"] = contact
        out.append(q)
    return out


def _params(home: Path, env: dict):
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=["-m", "brb_pipeline.cli", "mcp", "--home", str(home)],
                                 env=env)


async def _latency(home: Path, env: dict, queries: list[dict], warmup: int) -> dict:
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    times, errors, hits = [], 0, 0
    with open(os.devnull, "w") as err:
        async with stdio_client(_params(home, env), errlog=err) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            for q in queries[:warmup]:
                await s.call_tool("search", q)
            pings = []
            for q in queries:
                t0 = time.perf_counter()
                res = await s.call_tool("search", q)
                times.append((time.perf_counter() - t0) * 1000)
                errors += bool(res.is_error)
                hits += bool(not res.is_error and res.structured_content["hits"])
                t0 = time.perf_counter()
                await s.send_ping()  # the protocol's own round trip, between the same calls
                pings.append((time.perf_counter() - t0) * 1000)
    return {**pct(times), "errors": errors, "with_hits": hits, "ping": pct(pings)}


async def _first_answer(home: Path, env: dict, query: dict) -> dict:
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    t0 = time.perf_counter()
    with open(os.devnull, "w") as err:
        async with stdio_client(_params(home, env), errlog=err) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            t_init = time.perf_counter()
            res = await s.call_tool("search", query)
            t_answer = time.perf_counter()
    assert not res.is_error, res.content[0].text
    return {"initialized_ms": round((t_init - t0) * 1000, 1), "first_answer_ms": round((t_answer - t0) * 1000, 1)}


def in_process(home: Path, env: dict, queries: list[dict]) -> dict:
    """The same calls without the protocol: ``Home.call`` in this process."""
    os.environ.update(env)
    from brb_pipeline import keys as _keys
    _keys.install()  # an encrypted home's files open with its key
    from brb_pipeline.assistant.tools import Home
    from brb_pipeline.config.settings import Settings

    t0 = time.perf_counter()
    h = Home.open(Settings.load(home))
    opened = (time.perf_counter() - t0) * 1000
    try:
        times, bare = [], []
        for q in queries:  # the tool, then Searcher.search alone (what the tool adds: lines, citations)
            t = time.perf_counter()
            h.call("search", q)
            times.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            h.searcher.search(q["query"], k=q["k"], contacts=[q["contact"]] if "contact" in q else None, log=False)
            bare.append((time.perf_counter() - t) * 1000)
        return {**pct(times), "searcher_search_alone": pct(bare), "open_ms": round(opened, 1),
                "chunks": len(h.searcher.resident or [])}
    finally:
        h.close()


def real_query_embedding(home: Path, queries: list[dict], model: str | None) -> dict:
    """The default (or named) real model's query embedding alone, per query."""
    from brb_pipeline.core.embedding.models import load_embedder
    from brb_pipeline.config.settings import DEFAULT_MODEL, Settings

    s = Settings.load(home, embedding_model=model or DEFAULT_MODEL)
    emb = load_embedder(s.embedding)
    for q in queries[:5]:
        emb.embed_query(q["query"])
    times = []
    for q in queries:
        t = time.perf_counter()
        emb.embed_query(q["query"])
        times.append((time.perf_counter() - t) * 1000)
    return {**pct(times), "model": emb.model_id}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, required=True, help="a home of ~64K chunks")
    ap.add_argument("--home-model", default=None, help="BRB_EMBEDDING_MODEL for --home (e.g. hash)")
    ap.add_argument("--demo-home", type=Path, default=None, help="home for the start-up runs")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--real-model", default=None, help="model whose query embedding is timed apart (default: the default model)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", type=Path, default=RESULTS / "bench_mcp.json")
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    big_env = {**env, **({"BRB_EMBEDDING_MODEL": a.home_model} if a.home_model else {})}
    queries = make_queries(a.home, a.queries, a.seed)
    out: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
                 "python": platform.python_version(), "cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg(),
                 "home": str(a.home), "home_model": a.home_model, "queries": len(queries)}
    out["search_over_mcp"] = anyio.run(_latency, a.home, big_env, queries, 5)
    print("search over MCP:", out["search_over_mcp"], flush=True)
    out["search_in_process"] = in_process(a.home, big_env, queries)
    print("search in process:", out["search_in_process"], flush=True)
    if a.home_model and a.home_model.startswith("hash"):
        out["real_query_embedding"] = real_query_embedding(a.home, queries, a.real_model)
        print("real query embedding:", out["real_query_embedding"], flush=True)
    if a.demo_home:
        demo_q = make_queries(a.demo_home, 1, a.seed)[0]
        out["demo_home"] = str(a.demo_home)
        runs = [anyio.run(_first_answer, a.demo_home, env, demo_q) for _ in range(a.starts)]
        firsts = [r["first_answer_ms"] for r in runs]
        out["startup"] = {"runs": runs, "first_answer_p50_ms": round(float(np.median(firsts)), 1),
                          "first_answer_max_ms": max(firsts)}
        print("start-up:", out["startup"], flush=True)
    out["load_avg_at_end"] = os.getloadavg()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
