"""Write strategies for chunk rows into DuckDB, on the same chitchat sample, batch 128.

Strategies (each into a fresh ``brb.duckdb`` in a temp dir, ending with a CHECKPOINT). Opening the
store (``duck.connect``: loading vss + fts takes ~0.5 s here) happens once per pipeline run, is the
same for every strategy and is timed separately, outside the strategies:

* ``direct_executemany``: ``INSERT INTO chunks VALUES (?, ...)`` via ``executemany``, 128 rows a call.
* ``pandas_insert``: a pandas DataFrame of 128 rows registered, ``INSERT ... SELECT`` per batch.
* ``parquet_bulk``: our path: ``write_partition`` (Arrow, zero-copy vectors) + ``load_partitions``.
* ``parquet_buffered``: rows arrive 128 at a time (as from the embedder), buffered and flushed to a
  Parquet part every 5K rows, then one ``load_partitions`` of all parts.

Run: ``.venv/bin/python benchmarks/bench_writes.py [--messages 10000] [--dim 384]``.
Writes ``benchmarks/results/bench_writes.json`` (``bench_writes_<messages>.json`` for other sizes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from brb_pipeline.core.store import duck  # noqa: E402
from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.store.schema import TABLE_COLUMNS, table_ddl

RESULTS = Path(__file__).resolve().parent / "results"
BATCH = 128


def chitchat_messages(limit: int | None = None) -> list[tuple[str, list[dict]]]:
    """Conversations from the chitchat corpus as ``(conversation id, flat message list)``,
    in file order, until ``limit`` messages."""
    import chitchat_dataset

    data = json.loads((Path(chitchat_dataset.__file__).parent / "dataset.json").read_text())
    out, total = [], 0
    for cid, conv in data.items():
        msgs = [m for turn in conv["messages"] for m in turn]
        if limit is not None and total + len(msgs) > limit:
            msgs = msgs[: limit - total]
        if msgs:
            out.append((cid, msgs))
            total += len(msgs)
        if limit is not None and total >= limit:
            break
    return out


def chitchat_chunks(limit_messages: int | None, *, window: int = 8, stride: int = 4, batches: int = 10) -> pl.DataFrame:
    """Chunk frame (the pipeline's schema) of 8-message windows, stride 4, over chitchat.

    The first sender of a conversation stands in for the contact; conversations are spread over
    ``batches`` partition keys round-robin.
    """
    rows: dict[str, list] = {k: [] for k in store.CHUNK_COLUMNS}
    for ci, (cid, msgs) in enumerate(chitchat_messages(limit_messages)):
        contact = msgs[0]["sender"]
        starts = list(range(0, max(len(msgs) - window, 0) + 1, stride))
        if starts[-1] + window < len(msgs):
            starts.append(len(msgs) - window)
        for pos, s in enumerate(starts):
            w = msgs[s : s + window]
            text = "\n".join(("me: " if m["sender"] != contact else "them: ") + m["text"] for m in w)
            rows["chunk_id"].append(f"{cid}:{pos}")
            rows["batch"].append(f"batch-{ci % batches:03d}")
            rows["contact_id"].append(contact)
            rows["chat_id"].append(cid)
            rows["channel"].append("imessage")
            rows["conversation"].append(0)
            rows["position"].append(pos)
            rows["first_message_id"].append(f"{cid}-{s}")
            rows["last_message_id"].append(f"{cid}-{s + len(w) - 1}")
            rows["start_ts"].append(datetime.fromisoformat(w[0]["timestamp"].replace("Z", "+00:00")))
            rows["end_ts"].append(datetime.fromisoformat(w[-1]["timestamp"].replace("Z", "+00:00")))
            rows["message_count"].append(len(w))
            rows["content"].append(text)
            rows["embedding_text"].append(text)
    return pl.DataFrame(
        rows,
        schema_overrides={
            "conversation": pl.Int32, "position": pl.Int32, "message_count": pl.Int32,
            "start_ts": pl.Datetime("us", "UTC"), "end_ts": pl.Datetime("us", "UTC"),
        },
    )  # fmt: skip


def random_vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """(n, dim) float32 unit vectors, seeded (the write path does not care what they mean)."""
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _create(con, dim: int) -> None:
    con.execute(table_ddl(dim))


_COLS = TABLE_COLUMNS


def direct_executemany(con, tmp: Path, chunks: pl.DataFrame, emb: np.ndarray, model: str) -> int:
    _create(con, emb.shape[1])
    sql = f"INSERT INTO chunks ({', '.join(_COLS)}) VALUES ({', '.join('?' * len(_COLS))})"
    for s in range(0, chunks.height, BATCH):
        part = chunks.slice(s, BATCH)
        rows = [
            (*r, "", emb[s + i].tolist(), model)
            for i, r in enumerate(part.select(store.CHUNK_COLUMNS).iter_rows())
        ]
        con.executemany(sql, rows)
    con.execute("CHECKPOINT")
    return con.execute("SELECT count(*) FROM chunks").fetchone()[0]


def pandas_insert(con, tmp: Path, chunks: pl.DataFrame, emb: np.ndarray, model: str) -> int:
    dim = emb.shape[1]
    _create(con, dim)
    for s in range(0, chunks.height, BATCH):
        df = chunks.slice(s, BATCH).to_pandas()
        df["lexical_extra"] = ""
        df["embedding"] = list(emb[s : s + BATCH])
        df["embedding_model"] = model
        con.register("batch_df", df)
        cols = ", ".join(_COLS)
        sel = ", ".join(f"embedding::FLOAT[{dim}]" if c == "embedding" else c for c in _COLS)
        con.execute(f"INSERT INTO chunks ({cols}) SELECT {sel} FROM batch_df")
        con.unregister("batch_df")
    con.execute("CHECKPOINT")
    return con.execute("SELECT count(*) FROM chunks").fetchone()[0]


def parquet_bulk(con, tmp: Path, chunks: pl.DataFrame, emb: np.ndarray, model: str) -> int:
    paths = {}
    for (batch,), part in chunks.with_row_index("_i").group_by("batch", maintain_order=True):
        rows = part["_i"].to_numpy()
        paths[batch] = store.write_partition(tmp / "staging", batch, part.drop("_i"), emb[rows], model)
    store.load_partitions(con, paths)
    return con.execute("SELECT count(*) FROM chunks").fetchone()[0]


def parquet_buffered(con, tmp: Path, chunks: pl.DataFrame, emb: np.ndarray, model: str, flush_rows: int = 5000) -> int:
    paths: dict[str, Path] = {}
    buf_frames: list[pl.DataFrame] = []
    buf_vecs: list[np.ndarray] = []
    buffered = 0

    def flush() -> None:
        nonlocal buffered
        key = f"part-{len(paths):04d}"
        frame = pl.concat(buf_frames).with_columns(pl.lit(key).alias("batch"))
        paths[key] = store.write_partition(tmp / "staging", key, frame, np.concatenate(buf_vecs), model)
        buf_frames.clear()
        buf_vecs.clear()
        buffered = 0

    for s in range(0, chunks.height, BATCH):  # rows arrive 128 at a time
        buf_frames.append(chunks.slice(s, BATCH))
        buf_vecs.append(emb[s : s + BATCH])
        buffered += min(BATCH, chunks.height - s)
        if buffered >= flush_rows:
            flush()
    if buffered:
        flush()
    store.load_partitions(con, paths)
    return con.execute("SELECT count(*) FROM chunks").fetchone()[0]


STRATEGIES = {
    "direct_executemany": direct_executemany,
    "pandas_insert": pandas_insert,
    "parquet_bulk": parquet_bulk,
    "parquet_buffered": parquet_buffered,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--repeat", type=int, default=1, help="runs per strategy (best is reported)")
    args = ap.parse_args()

    chunks = chitchat_chunks(args.messages)
    emb = random_vectors(chunks.height, args.dim)
    model = "bench-random@0"
    print(f"Writes - {args.messages} messages -> {chunks.height} chunks of {args.dim}-d, batch {BATCH}")
    # Warm-up, untimed: first calls pay one-off costs (pyarrow's Parquet writer, pandas
    # conversion, DuckDB's Parquet reader: ~0.5 s) that would land on whichever runs first.
    for fn in STRATEGIES.values():
        with tempfile.TemporaryDirectory(prefix="bench_writes_warm_") as d:
            con = duck.connect(Path(d) / "brb.duckdb")
            fn(con, Path(d), chunks.head(256), emb[:256], model)
            con.close()
    results = {}
    connect_s: list[float] = []
    for name, fn in STRATEGIES.items():
        best = None
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="bench_writes_") as d:
                t0 = time.perf_counter()
                con = duck.connect(Path(d) / "brb.duckdb")
                connect_s.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                n = fn(con, Path(d), chunks, emb, model)
                sec = time.perf_counter() - t0
                con.close()
            assert n == chunks.height, (name, n)
            best = sec if best is None else min(best, sec)
        results[name] = {"seconds": round(best, 4), "rows_per_s": round(chunks.height / best, 1)}
    base = results["direct_executemany"]["seconds"]
    print(f"{'strategy':<20} {'seconds':>9} {'rows/s':>10} {'x executemany':>14}")
    for name, r in results.items():
        r["speedup_vs_executemany"] = round(base / r["seconds"], 1)
        print(f"{name:<20} {r['seconds']:>9.3f} {r['rows_per_s']:>10.0f} {r['speedup_vs_executemany']:>14.1f}")
    print(f"(duck.connect, not included above: median {np.median(connect_s):.3f} s)")
    out = {
        "benchmark": "bench_writes",
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "duckdb": __import__("duckdb").__version__,
        "loadavg": [round(x, 1) for x in os.getloadavg()],
        "messages": args.messages,
        "chunks": chunks.height,
        "dim": args.dim,
        "batch": BATCH,
        "connect_seconds_median": round(float(np.median(connect_s)), 4),
        "results": results,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "bench_writes.json" if args.messages == 10_000 else f"bench_writes_{args.messages}.json"
    (RESULTS / name).write_text(json.dumps(out, indent=2))
    print(f"Writes - wrote {RESULTS / name}")


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
