"""Retrieval quality of every search mode and fusion variant on the frozen question halves.

The questions (``benchmarks/questions/retrieval_{dev,test}.json``) were made by
``benchmarks/make_questions.py`` (targets picked by seed from the full demo corpus, written by a
writer who saw only the worksheet, split once into dev and test before any tuning). Tune on
``--half dev``; docs/search.md reports ``--half test`` only.

Every variant runs against the same open store and the same questions, each changing one thing
from the default (the mode, the fusion method or weight, merging, diversity). A hit is a returned
passage one of whose chunks contains a target message; the chunk -> message map comes from the
chunk's first/last message ids and the chat's message order in ``staging/messages.parquet``.
Routing is on, as for a user (a question that names a contact searches that contact).

Reports hit@1/5/10 and MRR@10 with bootstrap 95% intervals (questions resampled) per variant
and per question kind, the share of top-10 slots that repeat a window overlapping an earlier
hit of the same chat, search latency on the open store (the query embedding timed apart),
and the relevance floor: the cosine of the best candidate for answerable questions and for the
same questions with the target's contact filtered out (``--calibrate`` picks the floor on dev).

    .venv/bin/python benchmarks/bench_retrieval.py --home ~/.brb-full [--half test|dev] [-k 10] [--peers]

``--peers`` adds, in the same run, plain BM25 (``bm25s``), the same MiniLM through
sentence-transformers and their RRF over the store's chunks, merged into passages as brb merges
them (``bench_long_chats.Peers``; without routing, so a question naming a contact searches
everyone). The MiniLM peer encodes every chunk, minutes at 64K chunks on two cores.

``--home`` is an ingested home of the full demo archive (``brb demo --messages 0 --home DIR``).
Writes ``benchmarks/results/retrieval_<half>.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
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

from brb_pipeline.core.search.sql import Filters
from brb_pipeline.config.settings import Settings  # noqa: E402

log = logging.getLogger("brb.bench")

MODES = ("lexical", "vector", "hybrid")
KINDS = ("paraphrase", "short", "contact", "exact")
QUESTIONS_DIR = ROOT / "benchmarks" / "questions"
SQL_PATH = "_sql_path"  # a variant option: search without the resident store (core/search/resident.py)
CHAT_ORDER = ["contact_id", "chat_id", "ts", "message_id"]  # the order core.chunking windows over


# ----------------------------------------------------------------------------- scoring


def first_relevant_rank(hit_ids: Sequence[str], relevant: Iterable[str]) -> int | None:
    """1-based rank of the first hit in ``relevant``; None when no hit is relevant."""
    rel = set(relevant)
    for i, cid in enumerate(hit_ids, 1):
        if cid in rel:
            return i
    return None


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
    # Each chunk's positions lo..hi, exploded: rows = the chunks' total length, not chunks x chat.
    spans = (c.select("chunk_id", "contact_id", "chat_id", pl.int_ranges("lo", pl.col("hi") + 1).alias("pos"))
              .explode("pos").with_columns(pl.col("pos").cast(keyed.schema["pos"])))
    return (spans.join(keyed, on=["contact_id", "chat_id", "pos"], how="inner")
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
    """Read a question set; checks every question has the fields the harness uses (an id, the
    question, its kind and at least one target: ``targets`` anchors, or ``chat_id`` +
    ``message_ids``)."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    qs = doc.get("questions")
    if not isinstance(qs, list) or not qs:
        raise ValueError(f"{path}: no 'questions' list")
    ids = set()
    for q in qs:
        for f in ("id", "question", "kind"):
            if f not in q:
                raise ValueError(f"{path}: question {q.get('id', '?')} has no '{f}'")
        if "targets" in q:
            if not q["targets"]:
                raise ValueError(f"{path}: question {q['id']} has no target message")
        else:
            for f in ("chat_id", "message_ids"):
                if f not in q:
                    raise ValueError(f"{path}: question {q['id']} has no '{f}'")
            if not q["message_ids"]:
                raise ValueError(f"{path}: question {q['id']} has no target message")
        if q["id"] in ids:
            raise ValueError(f"{path}: duplicate question id {q['id']}")
        ids.add(q["id"])
    return doc


# ----------------------------------------------------------------------------- store


def store_rows(s: Settings) -> tuple[pl.DataFrame, str | None]:
    """(chunk rows of the store, stored embedding model id)."""
    from brb_pipeline.core.store import duck

    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        chunks = pl.from_arrow(con.execute(
            "SELECT chunk_id, contact_id, chat_id, first_message_id, last_message_id FROM chunks").arrow())
        model = duck.get_meta(con, "embedding_model")
    finally:
        con.close()
    return chunks, model


# ----------------------------------------------------------------------------- statistics


def bootstrap_ci(values: Sequence[float], *, n: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean of ``values`` over ``n`` resamples (questions drawn
    with replacement); ``(0, 0)`` when empty."""
    if not len(values):
        return (0.0, 0.0)
    a = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = a[rng.integers(0, len(a), size=(n, len(a)))].mean(axis=1)
    return (round(float(np.percentile(means, 2.5)), 3), round(float(np.percentile(means, 97.5)), 3))


def quality(ranks: Sequence[int | None], *, mrr_at: int = 10, boot: int = 1000) -> dict[str, Any]:
    """hit@1/5/10 and MRR@``mrr_at``, each with a bootstrap 95% interval."""
    out: dict[str, Any] = {"n": len(ranks)}
    for name, per_q in (("hit@1", [float(r is not None and r <= 1) for r in ranks]),
                        ("hit@5", [float(r is not None and r <= 5) for r in ranks]),
                        ("hit@10", [float(r is not None and r <= 10) for r in ranks]),
                        (f"mrr@{mrr_at}", [1.0 / r if r is not None and r <= mrr_at else 0.0 for r in ranks])):
        out[name] = round(float(np.mean(per_q)), 3) if per_q else 0.0
        out[name + "_ci"] = bootstrap_ci(per_q, n=boot)
    return out


def duplicate_slots(hits: Sequence[Mapping[str, Any]]) -> int:
    """Hits that overlap (same chat, intersecting time span) a hit ranked above them."""
    dup = 0
    for i, h in enumerate(hits):
        for e in hits[:i]:
            if (h["chat_id"] == e["chat_id"] and h["start"] and e["start"]
                    and h["start"] <= e["end"] and e["start"] <= h["end"]):
                dup += 1
                break
    return dup


def hit_rank(hits: Sequence[Mapping[str, Any]], relevant: set[str]) -> int | None:
    """1-based rank of the first hit one of whose chunks is relevant."""
    for i, h in enumerate(hits, 1):
        if relevant.intersection(h.get("chunk_ids") or [h["chunk_id"]]):
            return i
    return None


# ----------------------------------------------------------------------------- evaluation


class CachedEmbedder:
    """The store's embedder with query vectors kept, so every variant sees the same vectors and
    the query embedding is timed once, apart from search."""

    def __init__(self, embedder: Any) -> None:
        self.inner, self.model_id = embedder, embedder.model_id
        self.cache: dict[str, Any] = {}
        self.ms: list[float] = []

    def embed_query(self, text: str) -> Any:
        if text not in self.cache:
            t = time.perf_counter()
            self.cache[text] = self.inner.embed_query(text)
            self.ms.append((time.perf_counter() - t) * 1000)
        return self.cache[text]


def variants(s: Settings) -> list[tuple[str, dict[str, Any]]]:
    """(name, Searcher.search options): the default and one change each from it."""
    from brb_pipeline.core.search.fusion import Fusion
    from brb_pipeline.search.query import fusion_of

    d = fusion_of(s)
    rrf = lambda w, sw=None: Fusion("rrf", w, sw, d.rare_df_share, d.rrf_k)  # noqa: E731
    score = lambda w, sw=None: Fusion("score", w, sw, d.rare_df_share, d.rrf_k)  # noqa: E731
    out = [("lexical", {"mode": "lexical"}), ("vector", {"mode": "vector"}), ("hybrid (default)", {"mode": "hybrid"}),
           # the one-shot `brb search` path: SQL, so HNSW (ef_search from the settings) instead of exact vectors
           ("hybrid on the one-shot SQL path", {"mode": "hybrid", SQL_PATH: True}),
           ("hybrid without the line re-rank", {"mode": "hybrid", "lines": False}),
           ("hybrid, no merging", {"mode": "hybrid", "merge": False}),
           ("vector, no merging", {"mode": "vector", "merge": False}),
           ("hybrid, diversity 0.7", {"mode": "hybrid", "diversity": 0.7}),
           ("hybrid rrf w=1 (equal RRF)", {"mode": "hybrid", "fusion": rrf(1.0)})]
    for w in (0.5, 0.3, 0.2, 0.1):
        out.append((f"hybrid rrf w={w}", {"mode": "hybrid", "fusion": rrf(w)}))
    for w, sw in ((0.3, 1.0), (0.2, 1.0), (0.2, 0.6), (0.1, 1.0)):
        out.append((f"hybrid rrf w={w} specific={sw}", {"mode": "hybrid", "fusion": rrf(w, sw)}))
    for share in (0.0001, 0.002):
        f = Fusion("rrf", 0.2, 1.0, share, d.rrf_k)
        out.append((f"hybrid rrf w=0.2 specific=1.0 rare<={share}", {"mode": "hybrid", "fusion": f}))
    for w in (0.1, 0.2, 0.3, 0.5):
        out.append((f"hybrid score w={w}", {"mode": "hybrid", "fusion": score(w)}))
    for w, sw in ((0.1, 0.5), (0.2, 0.5), (0.3, 0.5), (0.1, 0.7), (0.2, 0.7), (0.2, 0.9)):
        out.append((f"hybrid score w={w} specific={sw}", {"mode": "hybrid", "fusion": score(w, sw)}))
    for w, sw, share in ((0.2, 0.7, 0.0001), (0.2, 0.7, 0.002), (0.0, 0.5, 0.0005), (0.0, 0.7, 0.0005),
                         (0.05, 0.5, 0.0005), (0.05, 0.7, 0.0005), (0.0, 0.7, 0.0001), (0.05, 0.7, 0.0001)):
        f = Fusion("score", w, sw, share, d.rrf_k)
        out.append((f"hybrid score w={w} specific={sw} rare<={share}", {"mode": "hybrid", "fusion": f}))
    return out


def ask(searcher: Any, questions: Sequence[Mapping[str, Any]], relevant: Mapping[str, set[str]],
        options: Mapping[str, Any], k: int, sql_searcher: Any = None) -> list[dict[str, Any]]:
    """One row per question: first relevant rank, duplicate slots, search time, floor fields.
    A variant with :data:`SQL_PATH` runs on ``sql_searcher`` (the store not held in memory)."""
    options = dict(options)
    if options.pop(SQL_PATH, False):
        searcher = sql_searcher
    rows = []
    for q in questions:
        res = searcher.search(q["question"], k=k, log=False, **options)
        rows.append({"id": q["id"], "kind": q["kind"], "rank": hit_rank(res["hits"], relevant[q["id"]]),
                     "dup": duplicate_slots(res["hits"]), "slots": len(res["hits"]),
                     "search_ms": float(res["timings_ms"].get("total", 0.0)),
                     "top_similarity": res["top_similarity"], "confident": res["confident"]})
    return rows


def peer_rows(con: Any, questions: Sequence[Mapping[str, Any]], relevant: Mapping[str, set[str]],
              k: int) -> dict[str, list[dict[str, Any]]]:
    """:func:`ask`'s rows for the peers of ``bench_long_chats.Peers`` over the store's chunks, their
    ranked chunks merged into passages as brb merges them. Peers have no routing: a question that
    names a contact is searched over everyone."""
    from bench_long_chats import Peers, Windows

    w = Windows(con)
    t = time.perf_counter()
    peers = Peers(w)
    print(f"peers: {len(w.ids):,} chunks indexed and encoded in {time.perf_counter() - t:.0f} s")
    out: dict[str, list[dict[str, Any]]] = {}
    for name, ranked in peers.ranked().items():
        rows = []
        for q in questions:
            t = time.perf_counter()
            hits = [{"chunk_ids": g} for g in w.groups(ranked(q["question"]))[:k]]
            rows.append({"id": q["id"], "kind": q["kind"], "rank": hit_rank(hits, relevant[q["id"]]), "dup": 0,
                         "slots": len(hits), "search_ms": (time.perf_counter() - t) * 1000})
        out[name] = rows
    return out


def report(rows: Sequence[Mapping[str, Any]], k: int, boot: int) -> dict[str, Any]:
    out = {"all": quality([r["rank"] for r in rows], mrr_at=k, boot=boot)}
    for kind in KINDS:
        sub = [r["rank"] for r in rows if r["kind"] == kind]
        if sub:
            out[kind] = quality(sub, mrr_at=k, boot=boot)
    slots = sum(r["slots"] for r in rows)
    out["duplicate_share"] = round(sum(r["dup"] for r in rows) / slots, 4) if slots else 0.0
    out["search_latency"] = latency_summary([r["search_ms"] for r in rows])
    return out


def floor_samples(searcher: Any, questions: Sequence[Mapping[str, Any]], target_contact: Mapping[str, str | None],
                  embedder: CachedEmbedder) -> list[float]:
    """Best candidate cosine for each question with its target's contact filtered out: what the
    store offers when the answer is not there."""
    from brb_pipeline.core.search.hybrid import search

    others = [r.contact_id for r in searcher.refs]
    out = []
    for q in questions:
        tc = target_contact.get(q["id"])
        keep = [c for c in others if c != tc]
        res = search(searcher.con, query_text=q["question"], query_vec=embedder.embed_query(q["question"]),
                     mode="vector", k=10, filters=Filters(contact_ids=keep))
        out.append(res.top_similarity if res.top_similarity is not None else -1.0)
    return out


def calibrate(found: Sequence[float], absent: Sequence[float], max_flagged: float = 0.1) -> float:
    """The highest floor that flags at most ``max_flagged`` of the answerable-and-found questions
    (their best cosine below it), rounded down to 0.01."""
    if not found:
        return 0.0
    f = np.sort(np.asarray(found))
    cut = f[int(np.floor(max_flagged * len(f)))]
    return float(np.floor(cut * 100) / 100)


def _fmt_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in header]] + [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _ci(q: Mapping[str, Any], key: str) -> str:
    lo, hi = q[key + "_ci"]
    return f"{q[key]:.3f} [{lo:.2f}, {hi:.2f}]"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--home", type=Path, required=True, help="an ingested home of the full demo archive")
    ap.add_argument("--half", choices=("dev", "test"), default="test")
    ap.add_argument("--questions", type=Path, default=None, help="another question file (default: the half)")
    ap.add_argument("-k", type=int, default=10, help="hits per search (MRR@k)")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--only", default="", help="comma-separated variant names to run (default: all)")
    ap.add_argument("--calibrate", action="store_true", help="pick the relevance floor (use on dev)")
    ap.add_argument("--peers", action="store_true",
                    help="also run plain BM25 (bm25s), MiniLM via sentence-transformers and their RRF over the "
                         "store's chunks (benchmarks/setup_bench.sh installs them; encodes every chunk)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    from brb_pipeline.core.embedding.models import load_embedder
    from brb_pipeline.search.query import Searcher

    qpath = args.questions or QUESTIONS_DIR / f"retrieval_{args.half}.json"
    doc = load_questions(qpath)
    questions = doc["questions"]
    s = Settings.load(args.home)
    t0 = time.perf_counter()
    chunks, stored_model = store_rows(s)
    messages = pl.read_parquet(s.staging_dir / "messages.parquet")
    resolved = resolve_targets(questions, messages)
    unresolved = [qid for qid, pairs in resolved.items() if not pairs]
    if len(unresolved) == len(questions):
        raise SystemExit(f"none of the {len(questions)} questions resolves to a message in {args.home}: "
                         "it does not hold the full demo archive (brb demo --messages 0)")
    relevant = relevant_chunks(chunk_members(chunks, messages), resolved)
    contact_of = dict(messages.select("message_id", "contact_id").iter_rows())
    target_contact = {qid: (contact_of.get(pairs[0][1]) if pairs else None) for qid, pairs in resolved.items()}
    embedder = CachedEmbedder(load_embedder(s.embedding))
    if stored_model and stored_model != embedder.model_id:
        raise SystemExit(f"the store in {args.home} was embedded with {stored_model}, not {embedder.model_id}")
    print(f"store: {chunks.height:,} chunks, {messages.height:,} messages, model {stored_model}; "
          f"{qpath.name}: {len(questions)} questions ({len(unresolved)} unresolved)")

    wanted = {x.strip() for x in args.only.split(",") if x.strip()}
    reports: dict[str, Any] = {}
    per_question: dict[str, list] = {}
    with Searcher(s, embedder=embedder) as searcher, Searcher(s, embedder=embedder, resident=False) as sql_searcher:
        for mode in ("lexical", "vector", "hybrid"):  # warm-up: extensions, index pages; not counted
            searcher.search("warm up", mode=mode, log=False)
            sql_searcher.search("warm up", mode=mode, log=False)
        for q in questions:
            embedder.embed_query(q["question"])
        for name, options in variants(s):
            if wanted and name not in wanted:
                continue
            rows = ask(searcher, questions, relevant, options, args.k, sql_searcher)
            reports[name] = report(rows, args.k, args.bootstrap)
            per_question[name] = [r["rank"] for r in rows]
            if name == "hybrid (default)":
                default_rows = rows
        if args.peers:
            for name, rows in peer_rows(searcher.con, questions, relevant, args.k).items():
                reports[name] = report(rows, args.k, args.bootstrap)
                per_question[name] = [r["rank"] for r in rows]
        floor: dict[str, Any] = {}
        if "hybrid (default)" in reports:
            absent = floor_samples(searcher, questions, target_contact, embedder)
            found = [r["top_similarity"] for r in default_rows if r["rank"] is not None and r["rank"] <= 5
                     and r["top_similarity"] is not None]
            use = calibrate(found, absent) if args.calibrate else s.search_min_similarity
            floor = {"floor": use, "calibrated_here": args.calibrate,
                     "found_top5": len(found),
                     "found_flagged_share": round(sum(x < use for x in found) / len(found), 3) if found else None,
                     "absent_flagged_share": round(sum(x < use for x in absent) / len(absent), 3) if absent else None,
                     "found_similarity_p10_p50": [round(float(np.percentile(found, p)), 3) for p in (10, 50)]
                     if found else None,
                     "absent_similarity_p50_p90": [round(float(np.percentile(absent, p)), 3) for p in (50, 90)]}
    total_s = round(time.perf_counter() - t0, 1)
    embed_lat = latency_summary(embedder.ms)
    mrr = f"mrr@{args.k}"
    print(f"\nRetrieval, {qpath.name} ({len(questions)} questions), {chunks.height:,} chunks, k={args.k}, "
          f"model {embedder.model_id}; 95% bootstrap intervals")
    print(_fmt_table(["variant", "hit@1", "hit@5", "hit@10", mrr, "dup share", "search p50 ms"],
                     [[n, r["all"]["hit@1"], _ci(r["all"], "hit@5"), r["all"]["hit@10"], _ci(r["all"], mrr),
                       r["duplicate_share"], r["search_latency"]["p50_ms"]] for n, r in reports.items()]))
    print(f"(query embedding p50 {embed_lat['p50_ms']} ms, p95 {embed_lat['p95_ms']} ms, not in search ms)")
    for kind in KINDS:
        print(f"\n{kind}:")
        print(_fmt_table(["variant", "n", "hit@1", "hit@5", "hit@10", mrr],
                         [[n, r[kind]["n"], r[kind]["hit@1"], _ci(r[kind], "hit@5"), r[kind]["hit@10"],
                           _ci(r[kind], mrr)] for n, r in reports.items() if kind in r]))
    if floor:
        print(f"\nrelevance floor {floor['floor']}: flags {floor['found_flagged_share']} of the {floor['found_top5']} "
              f"questions answered in the top 5, and {floor['absent_flagged_share']} of the same questions with "
              f"the target's contact filtered out")
    result = {"benchmark": "retrieval", "questions": qpath.name, "half": doc.get("half"), "n": len(questions),
              "unresolved": unresolved, "k": args.k, "model": embedder.model_id,
              "store": {"chunks": chunks.height, "messages": messages.height},
              "machine": {"python": platform.python_version(), "platform": platform.platform()},
              "query_embedding": embed_lat, "variants": reports, "floor": floor, "per_question": per_question,
              "seconds": total_s}
    out = args.out or ROOT / "benchmarks" / "results" / f"retrieval_{args.half}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(f"\nwrote {out} ({total_s} s)")
    return result


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
