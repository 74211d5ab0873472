"""What an encrypted brb.duckdb costs: load, index builds and search, encrypted vs plaintext.

For each store size (default 1,500 chunks, the demo's size, embedded with the hash embedder;
and 60,000 chunks with clustered random vectors), the same partitions are staged, loaded and
indexed in an encrypted home and in a plaintext home, in this one run:

* write: the staged partitions (sealed in the encrypted home);
* load: ``load_partitions`` (sealed files are decrypted into Arrow; plain ones read by DuckDB);
* hnsw: the HNSW build (plaintext) or the exact-search record (encrypted: no index);
* fts: the BM25 build;
* open: a read-only connect, as ``brb search`` does (the encrypted one loads no httpfs);
* search: p50/p95 ms of hybrid, vector and lexical queries over the open store (vectors exact
  when encrypted, HNSW when plaintext), and how often the encrypted store's top hit is the
  plaintext store's: the one-shot ``brb search`` path (SQL);
* in memory: the store loaded into a :class:`~brb_pipeline.core.search.resident.Resident` (load
  seconds) and hybrid p50/p95 from it, the path of a search session (``brb search -``), where
  both stores search their vectors exactly.

Queries: two words of a stored chunk and that chunk's vector plus noise.

Run: ``.venv/bin/python benchmarks/bench_encryption_store.py [--sizes 1500 60000] [--queries 100]``.
Writes ``benchmarks/results/bench_encryption_store.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from brb_pipeline.core.embedding.hashing import HashEmbedder  # noqa: E402
from brb_pipeline.core.search.hybrid import search  # noqa: E402
from brb_pipeline.core.search.resident import Resident  # noqa: E402
from brb_pipeline.core.store import chunks as store  # noqa: E402
from brb_pipeline.core.store import duck, index  # noqa: E402
from brb_pipeline.keys import provider as keys  # noqa: E402
from brb_pipeline.config.settings import Settings  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
BATCHES = 10
HASH_UP_TO = 5_000  # stores up to this size are embedded with the hash embedder


def synthetic_chunks(n: int, seed: int) -> pl.DataFrame:
    """``n`` chunks of 8 short chat lines each over a 3,000-word vocabulary, 25 per chat."""
    rng = np.random.default_rng(seed)
    vocab = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=rng.integers(3, 9))) for _ in range(3000)]
    texts = ["\n".join(("me: " if j % 2 else "them: ") + " ".join(rng.choice(vocab, size=rng.integers(3, 12)))
                       for j in range(8)) for _ in range(n)]
    chat = [f"chat-{i // 25}" for i in range(n)]
    return pl.DataFrame({
        "chunk_id": [f"{c}:{i % 25}" for i, c in enumerate(chat)],
        "batch": [f"b{(i // 25) % BATCHES:02d}" for i in range(n)],
        "contact_id": [f"contact-{i // 100}" for i in range(n)], "chat_id": chat, "channel": ["imessage"] * n,
        "conversation": [i % 25 // 5 for i in range(n)], "position": [i % 25 for i in range(n)],
        "first_message_id": [f"m{4 * i}" for i in range(n)], "last_message_id": [f"m{4 * i + 7}" for i in range(n)],
        "start_ts": [T0 + timedelta(hours=i) for i in range(n)],
        "end_ts": [T0 + timedelta(hours=i, minutes=30) for i in range(n)],
        "message_count": [8] * n, "content": texts, "embedding_text": texts,
    }, schema_overrides={"conversation": pl.Int32, "position": pl.Int32, "message_count": pl.Int32,
                         "start_ts": pl.Datetime("us", "UTC"), "end_ts": pl.Datetime("us", "UTC")})


def vectors(chunks: pl.DataFrame, dim: int, seed: int) -> tuple[np.ndarray, str]:
    """(n, dim) unit vectors and the model name: hash-embedded texts for a small store, random
    vectors clustered by chat for a large one (embedding 60K texts would dominate the run)."""
    if chunks.height <= HASH_UP_TO:
        emb = HashEmbedder(dim)
        return np.asarray(emb.embed(chunks["content"].to_list()), np.float32), emb.model_id
    rng = np.random.default_rng(seed)
    codes = chunks["chat_id"].cast(pl.Categorical).to_physical().to_numpy()
    centres = rng.standard_normal((int(codes.max()) + 1, dim)).astype(np.float32)
    v = centres[codes] + 0.8 * rng.standard_normal((chunks.height, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True), f"random-{dim}"


def make_queries(chunks: pl.DataFrame, emb: np.ndarray, n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in rng.choice(chunks.height, size=min(n, chunks.height), replace=False):
        words = chunks["content"][int(i)].replace("me:", "").replace("them:", "").split()
        v = emb[int(i)] + 0.3 / np.sqrt(emb.shape[1]) * rng.standard_normal(emb.shape[1]).astype(np.float32)
        out.append({"text": " ".join(rng.choice(words, size=2, replace=False)), "vec": v / np.linalg.norm(v)})
    return out


def home(root: Path, encrypted: bool) -> Settings:
    os.environ["BRB_ENCRYPTION"] = "1" if encrypted else "0"
    s = Settings(home=root / ("encrypted" if encrypted else "plaintext"), encryption=encrypted)
    assert keys.prepare_home(s)["encrypted"] is encrypted
    return s


def build(s: Settings, chunks: pl.DataFrame, emb: np.ndarray, model: str) -> dict:
    """Stage, load and index the store in ``s``'s home; seconds of each step."""
    t0 = time.perf_counter()
    paths = {}
    for (batch,), part in chunks.with_row_index("_i").group_by("batch", maintain_order=True):
        paths[batch] = store.write_partition(s.staging_dir, batch, part.drop("_i"), emb[part["_i"].to_numpy()], model)
    out = {"write_s": time.perf_counter() - t0}
    con = duck.connect(s.duckdb_path)
    try:
        out["load_s"] = store.load_partitions(con, paths).seconds
        t0 = time.perf_counter()
        index.build_hnsw(con, m=16, ef_construction=128)
        out["hnsw_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        index.build_fts(con)
        out["fts_s"] = time.perf_counter() - t0
        assert duck.encrypted(con) is bool(keys.data_key(s.home))
    finally:
        con.close()
    out["file_mb"] = s.duckdb_path.stat().st_size / 2**20
    return {k: round(v, 3) for k, v in out.items()}


def run_searches(con, queries: list[dict], mode: str, resident: Resident | None = None
                 ) -> tuple[dict, list[str | None], str | None]:
    for q in queries[:3]:  # warm-up
        search(con, query_text=q["text"], query_vec=q["vec"], mode=mode, resident=resident)
    times, tops, strategy = [], [], None
    for q in queries:
        t0 = time.perf_counter()
        r = search(con, query_text=q["text"], query_vec=q["vec"], mode=mode, k=10, resident=resident)
        times.append((time.perf_counter() - t0) * 1000)
        tops.append(r.hits[0].chunk_id if r.hits else None)
        strategy = r.vector_strategy
    return ({"p50_ms": round(float(np.percentile(times, 50)), 2), "p95_ms": round(float(np.percentile(times, 95)), 2)},
            tops, strategy)


def measure(root: Path, n: int, dim: int, n_queries: int, seed: int) -> dict:
    chunks = synthetic_chunks(n, seed)
    emb, model = vectors(chunks, dim, seed)
    queries = make_queries(chunks, emb, n_queries, seed + 1)
    out: dict = {"chunks": n, "dim": dim, "vectors": model, "queries": len(queries)}
    tops: dict = {}
    for encrypted in (True, False):
        s = home(root / f"n{n}", encrypted)
        label = "encrypted" if encrypted else "plaintext"
        res = build(s, chunks, emb, model)
        t0 = time.perf_counter()
        con = duck.connect(s.duckdb_path, read_only=True)
        res["open_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        try:
            for mode in ("hybrid", "vector", "lexical"):
                res[mode], tops[(label, mode)], strategy = run_searches(con, queries, mode)
                if mode != "lexical":
                    res[f"{mode}_strategy"] = strategy
            t0 = time.perf_counter()
            held = Resident.load(con)
            res["resident_load_s"] = round(time.perf_counter() - t0, 3)
            res["hybrid_in_memory"], tops[(label, "hybrid_in_memory")], _ = run_searches(con, queries, "hybrid", held)
            del held
        finally:
            con.close()
        out[label] = res
    modes = ("hybrid", "vector", "lexical", "hybrid_in_memory")
    same = {m: [a == b for a, b in zip(tops["encrypted", m], tops["plaintext", m])] for m in modes}
    out["same_top1"] = {m: round(float(np.mean(v)), 3) for m, v in same.items()}
    return out


def print_table(rows: list[dict]) -> None:
    head = (f"{'chunks':>7} {'store':<10} {'write s':>8} {'load s':>7} {'hnsw s':>7} {'fts s':>6} {'MB':>6} "
            f"{'open ms':>8} {'hybrid p50':>10} {'p95':>6} {'vector p50':>10} {'lexical p50':>11} "
            f"{'memory load s':>13} {'memory hybrid p50':>17}  vector search")
    print(head)
    for r in rows:
        for label in ("encrypted", "plaintext"):
            x = r[label]
            print(f"{r['chunks']:>7} {label:<10} {x['write_s']:>8.2f} {x['load_s']:>7.2f} {x['hnsw_s']:>7.2f} "
                  f"{x['fts_s']:>6.2f} {x['file_mb']:>6.1f} {x['open_ms']:>8.1f} {x['hybrid']['p50_ms']:>10.2f} "
                  f"{x['hybrid']['p95_ms']:>6.2f} {x['vector']['p50_ms']:>10.2f} {x['lexical']['p50_ms']:>11.2f} "
                  f"{x['resident_load_s']:>13.2f} {x['hybrid_in_memory']['p50_ms']:>17.2f}  {x['vector_strategy']}")
        e, p = r["encrypted"], r["plaintext"]
        print(f"{'':>7} {'delta':<10} {e['write_s'] - p['write_s']:>+8.2f} {e['load_s'] - p['load_s']:>+7.2f} "
              f"{e['hnsw_s'] - p['hnsw_s']:>+7.2f} {e['fts_s'] - p['fts_s']:>+6.2f} {'':>6} "
              f"{e['open_ms'] - p['open_ms']:>+8.1f} {e['hybrid']['p50_ms'] - p['hybrid']['p50_ms']:>+10.2f} "
              f"{'':>6} {e['vector']['p50_ms'] - p['vector']['p50_ms']:>+10.2f} "
              f"{e['lexical']['p50_ms'] - p['lexical']['p50_ms']:>+11.2f} "
              f"{e['resident_load_s'] - p['resident_load_s']:>+13.2f} "
              f"{e['hybrid_in_memory']['p50_ms'] - p['hybrid_in_memory']['p50_ms']:>+17.2f}  same top-1: {r['same_top1']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1500, 60000])
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_encryption_store_") as tmp:
        os.environ["BRB_KEY_DIR"] = str(Path(tmp) / "keys")  # the data key in a file here, not the keychain
        out: dict = {
            "benchmark": "bench_encryption_store",
            "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
            "duckdb": __import__("duckdb").__version__,
            "loadavg_at_start": [round(x, 1) for x in os.getloadavg()],
            "sizes": [measure(Path(tmp), n, args.dim, args.queries, args.seed) for n in args.sizes],
            "loadavg_at_end": [round(x, 1) for x in os.getloadavg()],
        }
    print(f"Encryption - load average {out['loadavg_at_start'][0]} -> {out['loadavg_at_end'][0]} "
          f"on {os.cpu_count()} cpus (shared machine)")
    print_table(out["sizes"])
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_encryption_store.json").write_text(json.dumps(out, indent=2, default=str))
    print(f"Encryption - wrote {RESULTS / 'bench_encryption_store.json'}")


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
