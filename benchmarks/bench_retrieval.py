"""Retrieval quality of lexical, vector and hybrid search on the demo archive.

Builds the default demo archive (or reuses an ingested home), ingests it once, then asks every
question of a question set (``benchmarks/questions_demo.json``) in the three search modes against
the same store rows, so the modes are compared on identical data and questions. A hit is a
returned chunk that contains one of the question's answering messages; the chunk -> message map
comes from the chunk's first/last message ids and the chat's message order in
``staging/messages.parquet`` (the order chunking uses), so targets survive chunking changes.

Reports top-1, top-5 and MRR@10 per mode and per question kind, run_search latency p50/p95 per
mode (end to end: query embedding, DuckDB search, result assembly), and a sweep of the RRF
constant for hybrid. Lexical (BM25) is the peer every other number is compared against.

    .venv/bin/python benchmarks/bench_retrieval.py [--archive-messages 6000] [--questions FILE]
        [--model bundled:all-MiniLM-L6-v2|hash] [--home DIR] [-k 10] [--rrf-sweep 10,30,60,100]

Writes ``benchmarks/results/retrieval.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from brb_pipeline.settings import DEFAULT_MODEL, Settings  # noqa: E402

log = logging.getLogger("brb.bench")

MODES = ("lexical", "vector", "hybrid")
KINDS = ("lexical", "semantic", "multilingual")
DEFAULT_QUESTIONS = ROOT / "benchmarks" / "questions_demo.json"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "retrieval.json"
CHAT_ORDER = ["contact_id", "chat_id", "ts", "message_id"]  # the order core.chunking windows over


# ----------------------------------------------------------------------------- scoring


def first_relevant_rank(hit_ids: Sequence[str], relevant: Iterable[str]) -> int | None:
    """1-based rank of the first hit in ``relevant``; None when no hit is relevant."""
    rel = set(relevant)
    for i, cid in enumerate(hit_ids, 1):
        if cid in rel:
            return i
    return None


def summarize_ranks(ranks: Sequence[int | None], *, mrr_at: int = 10) -> dict[str, Any]:
    """Top-1, top-5 and MRR@``mrr_at`` over one rank per question.

    Args:
        ranks: 1-based rank of the first relevant hit per question, None for a miss.
        mrr_at: reciprocal ranks beyond this count as 0.

    Returns:
        ``{"n", "top1", "top5", "mrr@<mrr_at>", "misses"}``; rates are fractions in [0, 1]
        (all 0.0 when ``ranks`` is empty).
    """
    n = len(ranks)
    key = f"mrr@{mrr_at}"
    if n == 0:
        return {"n": 0, "top1": 0.0, "top5": 0.0, key: 0.0, "misses": 0}
    top1 = sum(1 for r in ranks if r is not None and r <= 1) / n
    top5 = sum(1 for r in ranks if r is not None and r <= 5) / n
    mrr = sum(1.0 / r for r in ranks if r is not None and r <= mrr_at) / n
    return {"n": n, "top1": round(top1, 4), "top5": round(top5, 4), key: round(mrr, 4),
            "misses": sum(1 for r in ranks if r is None or r > mrr_at)}


def latency_summary(ms: Sequence[float]) -> dict[str, float]:
    """p50/p95/mean of latencies in milliseconds (zeros when empty)."""
    if not ms:
        return {"p50_ms": 0.0, "p95_ms": 0.0, "mean_ms": 0.0}
    a = np.asarray(ms, dtype=np.float64)
    return {"p50_ms": round(float(np.percentile(a, 50)), 2), "p95_ms": round(float(np.percentile(a, 95)), 2),
            "mean_ms": round(float(a.mean()), 2)}


# ----------------------------------------------------------------------------- chunk membership


def chunk_members(chunks: pl.DataFrame, messages: pl.DataFrame) -> pl.DataFrame:
    """The message ids inside every chunk.

    A chunk covers the messages of its (contact_id, chat_id) from ``first_message_id`` to
    ``last_message_id`` inclusive, in (ts, message_id) order, which is how chunking windows.

    Args:
        chunks: one row per chunk with chunk_id, contact_id, chat_id, first_message_id,
            last_message_id.
        messages: the staged messages with contact_id, chat_id, ts, message_id.

    Returns:
        A frame ``(chunk_id, chat_id, message_id)``, one row per (chunk, member message).

    Raises:
        ValueError: a chunk's first or last message is not among ``messages`` (the store and the
            staged messages are from different ingests).
    """
    pos = (messages.select(CHAT_ORDER).sort(CHAT_ORDER)
           .with_columns(pl.int_range(pl.len()).over(["contact_id", "chat_id"]).alias("pos")))
    keyed = pos.select("contact_id", "chat_id", "message_id", "pos")
    c = chunks.select("chunk_id", "contact_id", "chat_id", "first_message_id", "last_message_id")
    c = (c.join(keyed.rename({"message_id": "first_message_id", "pos": "lo"}),
                on=["contact_id", "chat_id", "first_message_id"], how="left")
          .join(keyed.rename({"message_id": "last_message_id", "pos": "hi"}),
                on=["contact_id", "chat_id", "last_message_id"], how="left"))
    missing = c.filter(pl.col("lo").is_null() | pl.col("hi").is_null()).height
    if missing:
        raise ValueError(f"{missing} chunks start or end at a message missing from the staged messages: "
                         "store and staging are from different ingests")
    return (c.select("chunk_id", "contact_id", "chat_id", "lo", "hi")
             .join(keyed, on=["contact_id", "chat_id"], how="inner")
             .filter((pl.col("pos") >= pl.col("lo")) & (pl.col("pos") <= pl.col("hi")))
             .select("chunk_id", "chat_id", "message_id"))


def resolve_targets(questions: Sequence[Mapping[str, Any]], messages: pl.DataFrame) -> dict[str, list[tuple[str, str]]]:
    """question id -> the (chat_id, message_id) of its answering messages in ``messages``.

    A question's ``targets`` (``{"ts": ISO-8601, "text": prefix}``) are matched first: a message
    whose timestamp is within 1 s and whose text starts with the prefix; failing that (a planted
    message whose time the generator chose), a message whose text prefix is unique in the
    archive. Questions without ``targets`` use their ``chat_id`` and ``message_ids`` as given,
    kept only when present. Unresolvable targets are left out (a question may end up with none).
    """
    by_second: dict[int, list[tuple[str, str, str]]] = {}
    rows = list(messages.select(
        pl.col("ts").dt.epoch("s").alias("sec"), "chat_id", "message_id", pl.col("text").fill_null("")).iter_rows())
    for sec, chat, mid, text in rows:
        by_second.setdefault(sec, []).append((chat, mid, text))
    have = {(chat, mid) for _, chat, mid, _ in rows}
    out: dict[str, list[tuple[str, str]]] = {}
    for q in questions:
        found: list[tuple[str, str]] = []
        if q.get("targets"):
            for t in q["targets"]:
                sec = int(datetime.fromisoformat(t["ts"]).timestamp())
                prefix = t["text"]
                near = [(c, m) for s_ in (sec - 1, sec, sec + 1) for c, m, x in by_second.get(s_, []) if x.startswith(prefix)]
                if not near and len(prefix) >= 12:
                    anywhere = [(c, m) for _, c, m, x in rows if x.startswith(prefix)]
                    near = anywhere if len(anywhere) == 1 else []
                found.extend(p for p in near if p not in found)
        else:
            found = [(q["chat_id"], m) for m in q["message_ids"] if (q["chat_id"], m) in have]
        out[q["id"]] = found
    return out


def relevant_chunks(members: pl.DataFrame, resolved: Mapping[str, Sequence[tuple[str, str]]]) -> dict[str, set[str]]:
    """question id -> ids of the chunks containing one of its answering (chat_id, message_id)."""
    want = pl.DataFrame(
        [{"qid": qid, "chat_id": c, "message_id": m} for qid, pairs in resolved.items() for c, m in pairs],
        schema={"qid": pl.Utf8, "chat_id": pl.Utf8, "message_id": pl.Utf8},
    )
    hits = want.join(members, on=["chat_id", "message_id"], how="inner")
    out: dict[str, set[str]] = {qid: set() for qid in resolved}
    for qid, cid in hits.select("qid", "chunk_id").iter_rows():
        out[qid].add(cid)
    return out


def load_questions(path: Path) -> dict[str, Any]:
    """Read a question set; checks every question has the fields the harness uses."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    qs = doc.get("questions")
    if not isinstance(qs, list) or not qs:
        raise ValueError(f"{path}: no 'questions' list")
    ids = set()
    for q in qs:
        for f in ("id", "question", "kind", "chat_id", "message_ids"):
            if f not in q:
                raise ValueError(f"{path}: question {q.get('id', '?')} has no '{f}'")
        if not q["message_ids"]:
            raise ValueError(f"{path}: question {q['id']} has no target message")
        if q["id"] in ids:
            raise ValueError(f"{path}: duplicate question id {q['id']}")
        ids.add(q["id"])
    return doc


# ----------------------------------------------------------------------------- store


def prepare_home(home: Path, *, messages: int, seed: int, model: str, reuse: bool) -> tuple[Settings, dict[str, Any]]:
    """Build the demo archive and ingest it into ``home`` (or reuse an ingested ``home``).

    Returns:
        (settings of the home, ``{"reused", "ingest_s", "build_s", "chunks"}``).
    """
    from brb_pipeline.core.embedding import load_embedder
    from brb_pipeline.runner import run_ingest

    info: dict[str, Any] = {"reused": False, "build_s": 0.0, "ingest_s": 0.0}
    if reuse and (home / "brb.duckdb").exists() and (home / "staging" / "messages.parquet").exists():
        info["reused"] = True
        return Settings.load(home), info
    from brb_pipeline.demo.generate import build_demo_archive

    t = time.perf_counter()
    archive = build_demo_archive(home / "demo-archive", messages=messages, seed=seed)
    info["build_s"] = round(time.perf_counter() - t, 2)
    s = Settings.load(home, chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir, embedding_model=model)
    embedder = load_embedder(s)
    t = time.perf_counter()
    summary = run_ingest(s, embedder=embedder, analyze=False)
    info["ingest_s"] = round(time.perf_counter() - t, 2)
    info["ingest_timings"] = summary.get("timings")
    return s, info


def store_rows(s: Settings) -> tuple[pl.DataFrame, str | None]:
    """(chunk rows of the store, stored embedding model id)."""
    from brb_pipeline.core import duck

    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        chunks = pl.from_arrow(con.execute(
            "SELECT chunk_id, contact_id, chat_id, first_message_id, last_message_id FROM chunks").arrow())
        model = duck.get_meta(con, "embedding_model")
    finally:
        con.close()
    return chunks, model


# ----------------------------------------------------------------------------- evaluation


def ask_all(s: Settings, questions: Sequence[Mapping[str, Any]], relevant: Mapping[str, set[str]], *,
            embedder: Any, mode: str, k: int) -> list[dict[str, Any]]:
    """Ask every question once in ``mode``; one row per question.

    Rows hold the first relevant rank, ``latency_ms`` (run_search end to end: store open, query
    embedding, search, result assembly) and ``search_ms`` (core search on the open store, with
    the query embedding excluded). Routing is off: questions are compared on retrieval alone.
    """
    from brb_pipeline.pipeline.query import run_search

    rows = []
    for q in questions:
        res = run_search(s, q["question"], embedder=embedder if mode != "lexical" else None, mode=mode, k=k,
                         route=False, log=False)
        ids = [h["chunk_id"] for h in res["hits"]]
        rows.append({"id": q["id"], "kind": q["kind"], "rank": first_relevant_rank(ids, relevant[q["id"]]),
                     "latency_ms": res["latency_ms"], "search_ms": float(res["timings_ms"].get("total", 0.0)),
                     "hits": len(ids)})
    return rows


def mode_report(rows: Sequence[Mapping[str, Any]], k: int) -> dict[str, Any]:
    """Quality overall and per kind, plus latency, for one mode's rows."""
    out = {"all": summarize_ranks([r["rank"] for r in rows], mrr_at=k)}
    for kind in KINDS:
        sub = [r["rank"] for r in rows if r["kind"] == kind]
        if sub:
            out[kind] = summarize_ranks(sub, mrr_at=k)
    out["latency"] = latency_summary([r["latency_ms"] for r in rows])
    out["search_latency"] = latency_summary([r["search_ms"] for r in rows])
    return out


def open_store_ms(s: Settings, repeats: int = 5) -> dict[str, float]:
    """Latency of opening the store read-only (extensions + ATTACH), which run_search pays per call."""
    from brb_pipeline.core import duck

    ms = []
    for _ in range(repeats):
        t = time.perf_counter()
        duck.connect(s.duckdb_path, read_only=True).close()
        ms.append((time.perf_counter() - t) * 1000)
    return latency_summary(ms)


def _fmt_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in header]] + [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--archive-messages", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS)
    ap.add_argument("--model", default=DEFAULT_MODEL, help="bundled:all-MiniLM-L6-v2 (default) or hash")
    ap.add_argument("--home", type=Path, default=None,
                    help="home dir to ingest into, reused as is when it already holds an ingested store")
    ap.add_argument("-k", type=int, default=10, help="hits per search (MRR@k)")
    ap.add_argument("--rrf-sweep", default="10,30,60,100", help="RRF constants to try in hybrid mode ('' to skip)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    doc = load_questions(args.questions)
    questions = doc["questions"]
    arch = doc.get("archive", {})
    if arch and (arch.get("messages"), arch.get("seed")) != (args.archive_messages, args.seed):
        print(f"warning: {args.questions.name} was written for messages={arch.get('messages')} seed={arch.get('seed')}, "
              f"the archive here is messages={args.archive_messages} seed={args.seed}", file=sys.stderr)
    tmp = None
    home = args.home
    if home is None:
        tmp = Path(tempfile.mkdtemp(prefix="brb-bench-retrieval-"))
        home = tmp
    try:
        t0 = time.perf_counter()
        s, info = prepare_home(home, messages=args.archive_messages, seed=args.seed, model=args.model,
                               reuse=args.home is not None)
        from brb_pipeline.core.embedding import load_embedder

        chunks, stored_model = store_rows(s)
        s = dataclasses.replace(s, embedding_model=args.model)
        embedder = load_embedder(s)
        if stored_model and stored_model != embedder.model_id:
            raise SystemExit(f"the store in {home} was embedded with {stored_model}, not {embedder.model_id}")
        messages = pl.read_parquet(s.staging_dir / "messages.parquet")
        resolved = resolve_targets(questions, messages)
        unresolved = [qid for qid, pairs in resolved.items() if not pairs]
        if len(unresolved) == len(questions):
            raise SystemExit(f"none of the {len(questions)} questions resolves to a message in {home}: it does not "
                             f"hold the demo archive {args.questions.name} was written for")
        members = chunk_members(chunks, messages)
        relevant = relevant_chunks(members, resolved)
        unreachable = [qid for qid, rel in relevant.items() if not rel]
        print(f"store: {chunks.height:,} chunks, {messages.height:,} messages, model {stored_model}; "
              f"{len(questions)} questions ({len(unresolved)} unresolved, {len(unreachable)} with no chunk)")

        # Warm-up: the first search loads DuckDB extensions and the model; not counted.
        from brb_pipeline.pipeline.query import run_search

        for mode in MODES:
            run_search(s, "warm up", embedder=embedder if mode != "lexical" else None, mode=mode, k=args.k,
                       route=False, log=False)

        open_ms = open_store_ms(s)
        embed_ms = []
        for q in questions:
            t = time.perf_counter()
            embedder.embed_query(q["question"])
            embed_ms.append((time.perf_counter() - t) * 1000)
        embed_lat = latency_summary(embed_ms)
        per_mode = {mode: ask_all(s, questions, relevant, embedder=embedder, mode=mode, k=args.k) for mode in MODES}
        reports = {mode: mode_report(rows, args.k) for mode, rows in per_mode.items()}
        sweep: dict[str, Any] = {}
        for rk in [int(x) for x in args.rrf_sweep.split(",") if x.strip()]:
            rows = ask_all(dataclasses.replace(s, rrf_k=rk), questions, relevant, embedder=embedder, mode="hybrid",
                           k=args.k)
            sweep[str(rk)] = mode_report(rows, args.k)
        total_s = round(time.perf_counter() - t0, 1)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    mrr_key = f"mrr@{args.k}"
    base = reports["lexical"]
    table = []
    for mode in MODES:
        r = reports[mode]
        table.append([mode, r["all"]["top1"], r["all"]["top5"], r["all"][mrr_key],
                      round(r["all"][mrr_key] / base["all"][mrr_key], 2) if base["all"][mrr_key] else "-",
                      r["latency"]["p50_ms"], r["latency"]["p95_ms"],
                      r["search_latency"]["p50_ms"], r["search_latency"]["p95_ms"],
                      round(r["search_latency"]["p50_ms"] / base["search_latency"]["p50_ms"], 2)
                      if base["search_latency"]["p50_ms"] else "-"])
    print(f"\nRetrieval on the demo archive ({args.archive_messages:,} messages, seed {args.seed}), "
          f"{len(questions)} questions, k={args.k}, model {embedder.model_id}, rrf_k={s.rrf_k}")
    print(_fmt_table(["mode", "top1", "top5", mrr_key, "mrr/lexical", "e2e p50 ms", "e2e p95 ms", "search p50 ms",
                      "search p95 ms", "search p50/lexical"], table))
    print(f"(e2e = run_search end to end; it opens the store on every call: open p50 {open_ms['p50_ms']} ms; "
          f"query embedding p50 {embed_lat['p50_ms']} ms. search = core search on the open store, embedding excluded)")
    kind_rows = []
    for kind in KINDS:
        row: list[Any] = [kind, reports["lexical"].get(kind, {}).get("n", 0)]
        for mode in MODES:
            row += [reports[mode].get(kind, {}).get("top1", 0.0), reports[mode].get(kind, {}).get(mrr_key, 0.0)]
        kind_rows.append(row)
    print("\nPer question kind (top1 / " + mrr_key + "):")
    print(_fmt_table(["kind", "n"] + [f"{m} {x}" for m in MODES for x in ("top1", "mrr")], kind_rows))
    if sweep:
        print("\nHybrid RRF constant sweep:")
        print(_fmt_table(["rrf_k", "top1", "top5", mrr_key, "search p50 ms"],
                         [[rk, r["all"]["top1"], r["all"]["top5"], r["all"][mrr_key], r["search_latency"]["p50_ms"]]
                          for rk, r in sweep.items()]))

    result = {
        "benchmark": "retrieval",
        "peer": "lexical (BM25)",
        "config": {"archive_messages": args.archive_messages, "seed": args.seed, "questions": str(args.questions.name),
                   "model": embedder.model_id, "k": args.k, "rrf_k": s.rrf_k, "route": False,
                   "window": s.window, "stride": s.stride, "gap_s": s.conversation_gap_s},
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "store": {"chunks": chunks.height, "messages": messages.height, "stored_model": stored_model,
                  "open_store": open_ms, "query_embedding": embed_lat, **info},
        "questions": {"n": len(questions), "kinds": {k: sum(1 for q in questions if q["kind"] == k) for k in KINDS},
                      "unresolved": unresolved, "unreachable": unreachable},
        "modes": reports,
        "ratios_vs_lexical": {m: {mrr_key: (round(reports[m]["all"][mrr_key] / base["all"][mrr_key], 3)
                                            if base["all"][mrr_key] else None),
                                  "e2e_p50_latency": (round(reports[m]["latency"]["p50_ms"] / base["latency"]["p50_ms"], 3)
                                                      if base["latency"]["p50_ms"] else None),
                                  "search_p50_latency": (round(reports[m]["search_latency"]["p50_ms"]
                                                               / base["search_latency"]["p50_ms"], 3)
                                                         if base["search_latency"]["p50_ms"] else None)}
                              for m in MODES},
        "rrf_sweep": sweep,
        "per_question": [{"id": q["id"], "kind": q["kind"], **{m: per_mode[m][i]["rank"] for m in MODES}}
                         for i, q in enumerate(questions)],
        "seconds": total_s,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False))
    print(f"\nwrote {args.out} ({total_s} s)")
    return result


if __name__ == "__main__":
    main()
