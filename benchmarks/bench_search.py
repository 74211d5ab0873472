"""Search latency and index builds on a chunk store of N chitchat chunks.

Builds a store of N real chitchat chunks (8-message windows, stride 4) with clustered vectors
(one topic centre per conversation, chunks scattered around it), or opens ``--store PATH``
(real embeddings). Builds HNSW + BM25 and reports build seconds, then runs ``--queries``
queries in each mode (vector, lexical, hybrid, hybrid filtered to one contact) and prints
p50/p95 ms, each mode twice in turn: as SQL (what a one-shot ``brb search`` runs) and from the store
held in memory (``core/search/resident.py``, what a search session runs), with its load time. Peers in the same run: the vector query with the vector inlined as a literal vs
bound as a parameter, ``hnsw_ef_search`` values (latency and recall@10 against exact search)
and HNSW ``M`` values on a subset (build seconds, recall).

Run: ``.venv/bin/python benchmarks/bench_search.py [--chunks 5000] [--store PATH]``.
Writes ``benchmarks/results/bench_search_<chunks>.json`` (``bench_search_store.json`` with --store).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_writes import chitchat_chunks  # noqa: E402

from brb_pipeline.core.search.sql import Filters
from brb_pipeline.core.store import duck  # noqa: E402
from brb_pipeline.core.store import index
from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.search.hybrid import search, vector_sql  # noqa: E402
from brb_pipeline.core.search.resident import Resident  # noqa: E402
from brb_pipeline.config.settings import Settings  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
EF_DEFAULT = Settings.hnsw_ef_search  # what a search session uses
_WORD_RE = re.compile(r"[a-z]{4,}")


def clustered_vectors(chunks: pl.DataFrame, dim: int, seed: int) -> np.ndarray:
    """(n, dim) float32 unit vectors: conversations share one of ~n/250 topic centres, chunks of
    a conversation drift around their conversation's point."""
    rng = np.random.default_rng(seed)
    n = chunks.height
    topics = rng.standard_normal((max(20, n // 250), dim)).astype(np.float32)
    conv_codes = chunks["chat_id"].cast(pl.Categorical).to_physical().to_numpy()
    n_conv = int(conv_codes.max()) + 1
    conv_topic = rng.integers(0, len(topics), n_conv)
    conv_point = topics[conv_topic] + 0.7 * rng.standard_normal((n_conv, dim)).astype(np.float32)
    v = conv_point[conv_codes] + 0.5 * rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def pct(xs: list[float]) -> dict:
    return {"p50_ms": round(float(np.percentile(xs, 50)), 2), "p95_ms": round(float(np.percentile(xs, 95)), 2)}


def make_queries(con, n: int, seed: int) -> list[dict]:
    """Queries drawn from stored chunks: 2 words of a chunk, its vector plus noise, its contact."""
    rng = np.random.default_rng(seed)
    total = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
    picks = sorted(rng.choice(total, size=min(n, total), replace=False).tolist())
    rows = con.execute(
        "SELECT content, embedding, contact_id FROM (SELECT row_number() OVER () - 1 AS i, * FROM chunks) "
        "WHERE i IN (SELECT unnest(?::BIGINT[]))",
        [picks],
    ).fetchall()
    out = []
    for content, emb, contact in rows:
        words = _WORD_RE.findall(content.lower()) or ["hello"]
        text = " ".join(rng.choice(words, size=min(2, len(words)), replace=False).tolist())
        v = np.asarray(emb, np.float32)
        v = v + 0.3 * np.linalg.norm(v) / np.sqrt(len(v)) * rng.standard_normal(len(v)).astype(np.float32)
        out.append({"text": text, "vec": v / np.linalg.norm(v), "contact": contact})
    return out


def run_mode(con, queries: list[dict], mode: str, *, filtered: bool = False, ef_search: int = EF_DEFAULT,
             resident: Resident | None = None) -> tuple[dict, list]:
    """p50/p95 ms of ``search`` over ``queries``, and each query's top 10. Vector mode returns raw
    chunks (no merging of overlapping windows), so its recall is against the exact top 10."""
    merge = mode != "vector"
    times, results = [], []
    for q in queries[:3]:  # warm-up
        search(con, query_text=q["text"], query_vec=q["vec"], mode=mode, ef_search=ef_search, merge=merge,
               resident=resident)
    for q in queries:
        t0 = time.perf_counter()
        r = search(
            con, query_text=q["text"], query_vec=q["vec"], mode=mode, k=10, ef_search=ef_search,
            filters=Filters(contact_ids=[q["contact"]] if filtered else None), merge=merge, resident=resident,
        )  # fmt: skip
        times.append((time.perf_counter() - t0) * 1000)
        results.append([h.chunk_id for h in r.hits])
    stats = pct(times)
    stats["mean_hits"] = round(float(np.mean([len(r) for r in results])), 2)
    return stats, results


def exact_top10(con, queries: list[dict]) -> list[list[str]]:
    tbl = con.execute("SELECT chunk_id, embedding FROM chunks").fetch_arrow_table()
    ids = tbl.column("chunk_id").to_pylist()
    col = tbl.column("embedding").combine_chunks()
    mat = col.values.to_numpy().reshape(len(col), -1).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    qs = np.stack([q["vec"] for q in queries])
    sims = qs @ mat.T
    top = np.argsort(-sims, axis=1)[:, :10]
    return [[ids[j] for j in row] for row in top]


def recall(got: list[list[str]], truth: list[list[str]]) -> float:
    return round(float(np.mean([len(set(g) & set(t)) / len(t) for g, t in zip(got, truth)])), 4)


def literal_vs_param(con, queries: list[dict], dim: int) -> dict:
    out = {}
    param_sql = vector_sql(dim, filtered=False)
    con.execute("SET hnsw_ef_search = 64")
    for name in ("param", "literal"):
        times = []
        for q in queries[:3] + queries:
            t0 = time.perf_counter()
            if name == "param":
                con.execute(param_sql, [q["vec"].tolist(), 50]).fetchall()
            else:
                lit = "[" + ",".join(repr(float(x)) for x in q["vec"]) + f"]::FLOAT[{dim}]"
                con.execute(
                    f"SELECT chunk_id, array_cosine_distance(embedding, {lit}) AS d FROM chunks ORDER BY d LIMIT 50"
                ).fetchall()
            times.append((time.perf_counter() - t0) * 1000)
        out[name] = pct(times[3:])
    plan = "".join(r[1] for r in con.execute("EXPLAIN " + param_sql, [queries[0]["vec"].tolist(), 50]).fetchall())
    out["param_plan_uses_hnsw"] = "HNSW_INDEX_SCAN" in plan
    return out


def m_sweep(chunks: pl.DataFrame, emb: np.ndarray, queries: list[dict], tmp: Path, n_sub: int) -> dict:
    """HNSW M in {8, 16, 32} on the first n_sub chunks: build seconds, vector p50, recall@10."""
    sub, sub_emb = chunks.head(n_sub), emb[:n_sub]
    con = duck.connect(tmp / "msweep.duckdb")
    paths = {"batch-000": store.write_partition(tmp / "msweep", "batch-000", sub.with_columns(pl.lit("batch-000").alias("batch")), sub_emb, "bench@0")}
    store.load_partitions(con, paths)
    index.build_fts(con)
    truth = exact_top10(con, queries)
    out = {}
    for m in (8, 16, 32):
        rep = index.build_hnsw(con, m=m, ef_construction=128)
        stats, got = run_mode(con, queries, "vector")
        out[f"M={m}"] = {"build_s": round(rep.seconds, 2), **stats, "recall_at_10": recall(got, truth)}
        print(f"  M={m:<3} build {rep.seconds:6.2f} s  vector p50 {stats['p50_ms']:6.2f} ms  recall@10 {out[f'M={m}']['recall_at_10']:.3f}")
    con.close()
    return {"chunks": n_sub, "results": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=5000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--store", type=Path, help="an existing brb.duckdb with real embeddings (opened read-only)")
    ap.add_argument("--m-sweep-chunks", type=int, default=5000, help="subset size for the M comparison (0: skip)")
    ap.add_argument("--save-store", type=Path, help="keep the built store here (reuse it with --store)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    tmpdir = tempfile.TemporaryDirectory(prefix="bench_search_")
    tmp = Path(tmpdir.name)
    db_path = args.save_store / "brb.duckdb" if args.save_store else tmp / "brb.duckdb"
    out: dict = {
        "benchmark": "bench_search",
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "duckdb": __import__("duckdb").__version__,
        "loadavg_at_start": [round(x, 1) for x in os.getloadavg()],
    }
    chunks = emb = None
    if args.store:
        con = duck.connect(args.store, read_only=True)
        status = index.index_status(con)
        out["source"] = str(args.store)
        out["build"] = {"hnsw": status["hnsw"], "fts": status["fts"]}
        dim = status["dim"]
    else:
        t0 = time.perf_counter()
        chunks = chitchat_chunks(None).head(args.chunks)
        if chunks.height < args.chunks:
            print(f"Search - chitchat gives {chunks.height} chunks (asked {args.chunks})")
        emb = clustered_vectors(chunks, args.dim, args.seed)
        dim = args.dim
        paths = {}
        for (batch,), part in chunks.with_row_index("_i").group_by("batch", maintain_order=True):
            paths[batch] = store.write_partition(tmp / "staging", batch, part.drop("_i"), emb[part["_i"].to_numpy()], "bench-clustered@0")
        con = duck.connect(db_path)
        store.clear(con)
        load = store.load_partitions(con, paths)
        prep_s = time.perf_counter() - t0
        hnsw = index.build_hnsw(con, m=16, ef_construction=128)
        fts = index.build_fts(con)
        out["source"] = "chitchat chunks, clustered random vectors"
        out["build"] = {
            "prepare_and_load_s": round(prep_s, 2), "load_s": round(load.seconds, 2),
            "hnsw_s": round(hnsw.seconds, 2), "hnsw_params": hnsw.params,
            "fts_s": round(fts.seconds, 2), "fts_params": {k: v for k, v in fts.params.items() if k != "fields"},
        }  # fmt: skip
        con.close()
        con = duck.connect(db_path, read_only=True)  # search a reopened store, as the CLI does
    n_chunks = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
    out["chunks"], out["dim"] = n_chunks, dim
    print(f"Search - load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus (shared machine)")
    print(f"Search - {n_chunks} chunks, {dim}-d; build: {json.dumps(out['build'], default=str)}")

    queries = make_queries(con, args.queries, args.seed + 1)
    truth = exact_top10(con, queries)
    out["queries"] = len(queries)
    modes = {}
    t0 = time.perf_counter()
    held = Resident.load(con)
    out["resident_load_s"] = round(time.perf_counter() - t0, 3)
    print(f"Search - the store held in memory (core/search/resident.py) in {out['resident_load_s']:.2f} s")
    print(f"{'mode':<27} {'p50 ms':>8} {'p95 ms':>8} {'hits':>6} {'recall@10':>10}")
    for label, mode, filtered in [
        ("vector", "vector", False), ("lexical", "lexical", False),
        ("hybrid", "hybrid", False), ("hybrid+contact", "hybrid", True),
        ("vector+contact", "vector", True),
    ]:  # fmt: skip
        # The SQL path (a one-shot search) and the same query from memory (a search session), in turn.
        for name, res in ((label, None), (f"{label} (in memory)", held)):
            stats, got = run_mode(con, queries, mode, filtered=filtered, resident=res)
            if mode == "vector" and not filtered:
                stats["recall_at_10"] = recall(got, truth)
            modes[name] = stats
            print(f"{name:<27} {stats['p50_ms']:>8.2f} {stats['p95_ms']:>8.2f} {stats['mean_hits']:>6.1f} "
                  f"{stats.get('recall_at_10', ''):>10}")
    del held
    out["modes"] = modes

    print("Search - vector query form (HNSW, top 50):")
    out["query_form"] = literal_vs_param(con, queries, dim)
    for k, v in out["query_form"].items():
        print(f"  {k}: {v}")
    print("Search - hnsw_ef_search (vector mode):")
    ef = {}
    for e in (16, 32, 64, 128, 256):
        stats, got = run_mode(con, queries, "vector", ef_search=e)
        ef[str(e)] = {**stats, "recall_at_10": recall(got, truth)}
        print(f"  ef_search={e:<4} p50 {stats['p50_ms']:6.2f} ms  p95 {stats['p95_ms']:6.2f} ms  recall@10 {ef[str(e)]['recall_at_10']:.3f}")
    out["ef_search"] = ef
    con.close()
    if chunks is not None and args.m_sweep_chunks:
        print(f"Search - HNSW M on the first {min(args.m_sweep_chunks, chunks.height)} chunks (ef_construction 128):")
        out["m_sweep"] = m_sweep(chunks, emb, queries[:100], tmp, min(args.m_sweep_chunks, chunks.height))
    out["loadavg_at_end"] = [round(x, 1) for x in os.getloadavg()]
    name = "bench_search_store.json" if args.store else f"bench_search_{n_chunks}.json"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / name).write_text(json.dumps(out, indent=2, default=str))
    print(f"Search - wrote {RESULTS / name}")
    tmpdir.cleanup()


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
