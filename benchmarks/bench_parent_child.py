"""Parent-child retrieval, measured: match small units, return their 8-message parent chunk.

Children are windows of ``--child-window`` messages advancing by ``--child-stride`` inside each
conversation (the same 6-hour split as chunking), embedded with the store's model in the same
text layout as chunks (a "Conversation with NAME, DAY" header, then untimed lines). A child's
parent is the chunk holding its middle message. Three vector rankings are compared on the same
frozen questions, the same query vectors and the same exact cosine search (numpy over every row,
so the HNSW approximation is not a variable):

* ``chunks``: today's 8-message chunks;
* ``children -> parent``: the best child score per parent;
* ``max(chunk, child)``: per parent, the better of its own score and its best child's.

Overlapping parents of one conversation merge with search's own merging; routing applies a named contact as
a filter. The children's embedding time is measured here and set against the chunks'.

    .venv/bin/python benchmarks/bench_parent_child.py --home ~/.brb-full [--half test]

Children are cached in ``<home>/bench-children-<w>-<s>.npz`` (rebuilt when absent).
Writes ``benchmarks/results/parent_child_<half>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench_retrieval import (CHAT_ORDER, KINDS, QUESTIONS_DIR, chunk_members, load_questions, quality,  # noqa: E402
                             relevant_chunks, resolve_targets)

from brb_pipeline.config.settings import Settings  # noqa: E402


def child_units(messages: pl.DataFrame, names: Mapping[str, str], window: int, stride: int, gap_s: int
                ) -> tuple[list[str], list[str], list[str]]:
    """(texts, middle message ids, contact ids) of every child window."""
    from brb_pipeline.core.chunking import conversation_ids, message_line, window_bounds

    texts, middles, contacts = [], [], []
    msgs = messages.sort(CHAT_ORDER)
    for (contact_id, _chat), g in msgs.group_by(["contact_id", "chat_id"], maintain_order=True):
        ids = g["message_id"].to_list()
        ts = g["ts"].to_list()
        convs = conversation_ids(g["ts"].dt.epoch("us").to_list(), gap_s)
        name = names.get(contact_id, contact_id)
        lines = [message_line("Me" if me else (name if str(contact_id).startswith("c:") else (snd or "Unknown")),
                              None, t, a or 0, r, 2000)
                 for me, snd, t, a, r in zip(g["is_from_me"].to_list(), g["sender"].to_list(), g["text"].to_list(),
                                             g["attachments"].to_list(), g["reactions"].to_list(), strict=True)]
        start = 0
        while start < len(ids):
            end = start
            while end < len(ids) and convs[end] == convs[start]:
                end += 1
            for a, b in window_bounds(end - start, window, stride):
                lo, hi = start + a, start + b
                day = f"{ts[lo]:%Y-%m-%d}"
                texts.append(f"Conversation with {name}, {day}\n" + "\n".join(lines[lo:hi]))
                middles.append(ids[(lo + hi - 1) // 2])
                contacts.append(str(contact_id))
            start = end
    return texts, middles, contacts


def _merge_rank(parents: Sequence[str], info: Mapping[str, tuple], relevant: set[str], k: int) -> int | None:
    """Rank of the first relevant passage after search's own merging (core.fusion: same chat and
    conversation, intersecting times, at most three windows), cut at k passages."""
    from brb_pipeline.core.search.fusion import Span, merge_overlapping

    spans = [Span(cid, *info[cid], 0.0, i, [cid]) for i, cid in enumerate(parents)]
    for i, g in enumerate(merge_overlapping(spans)[:k], 1):
        if relevant.intersection(g.chunk_ids):
            return i
    return None


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--half", choices=("dev", "test"), default="test")
    ap.add_argument("--child-window", type=int, default=3)
    ap.add_argument("--child-stride", type=int, default=2)
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    from brb_pipeline.core.store import duck
    from brb_pipeline.core.embedding.models import load_embedder
    from brb_pipeline.core.contacts.routing import route_query
    from brb_pipeline.search.query import contact_refs

    s = Settings.load(args.home)
    embedder = load_embedder(s.embedding)
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        tbl = con.execute("SELECT chunk_id, contact_id, chat_id, conversation, start_ts, end_ts, first_message_id, "
                          "last_message_id, embedding FROM chunks").fetch_arrow_table()
    finally:
        con.close()
    chunks = pl.from_arrow(tbl.drop(["embedding"]))
    chunk_vecs = tbl.column("embedding").combine_chunks().flatten().to_numpy().reshape(tbl.num_rows, -1)
    messages = pl.read_parquet(s.staging_dir / "messages.parquet")
    members = chunk_members(chunks, messages)
    refs = contact_refs(s)
    names = {r.contact_id: r.display_name for r in refs}

    cache = args.home / f"bench-children-{args.child_window}-{args.child_stride}.npz"
    if cache.exists():
        z = np.load(cache, allow_pickle=False)
        child_vecs, middles, child_contacts = z["vecs"], list(z["middles"]), list(z["contacts"])
        embed_s, tokens = float(z["embed_s"]), int(z["tokens"])
    else:
        texts, middles, child_contacts = child_units(messages, names, args.child_window, args.child_stride,
                                                     s.conversation_gap_s)
        tokens = embedder.count_tokens(texts)
        print(f"embedding {len(texts):,} children ({tokens:,} tokens)...", file=sys.stderr)
        t = time.perf_counter()
        parts = []
        for i in range(0, len(texts), 4096):
            parts.append(embedder.embed(texts[i:i + 4096]))
            print(f"  {min(i + 4096, len(texts)):,}/{len(texts):,} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        embed_s = time.perf_counter() - t
        child_vecs = np.concatenate(parts)
        np.savez(cache, vecs=child_vecs, middles=np.array(middles), contacts=np.array(child_contacts),
                 embed_s=embed_s, tokens=tokens)
    # A child's parent: the first chunk (by position) that holds its middle message.
    first_chunk = dict(members.sort(["message_id", "chunk_id"]).unique("message_id", keep="first")
                       .select("message_id", "chunk_id").iter_rows())
    chunk_ids = chunks["chunk_id"].to_list()
    row_of = {c: i for i, c in enumerate(chunk_ids)}
    child_parent = np.array([row_of.get(first_chunk.get(m, ""), -1) for m in middles])
    keep = child_parent >= 0
    child_vecs, child_parent = child_vecs[keep], child_parent[keep]
    child_contacts = np.array(child_contacts)[keep]
    chunk_contacts = np.array(chunks["contact_id"].to_list())
    info = {c: (ch, cv, st, en) for c, ch, cv, st, en in chunks.select(
        "chunk_id", "chat_id", "conversation", "start_ts", "end_ts").iter_rows()}

    doc = load_questions(QUESTIONS_DIR / f"retrieval_{args.half}.json")
    questions = doc["questions"]
    relevant = relevant_chunks(members, resolve_targets(questions, messages))
    ranks: dict[str, list] = {"chunks": [], "children -> parent": [], "max(chunk, child)": []}
    for q in questions:
        routed = route_query(q["question"], refs)
        text = routed.query if routed.contact_ids and routed.query.strip() else q["question"]
        qv = embedder.embed_query(text)
        cmask = np.isin(chunk_contacts, routed.contact_ids) if routed.contact_ids else np.ones(len(chunk_ids), bool)
        kmask = np.isin(child_contacts, routed.contact_ids) if routed.contact_ids else np.ones(len(child_parent), bool)
        cs = np.where(cmask, chunk_vecs @ qv, -np.inf)
        ks = np.where(kmask, child_vecs @ qv, -np.inf)
        best_child = np.full(len(chunk_ids), -np.inf)
        np.maximum.at(best_child, child_parent, ks)
        for name, score in (("chunks", cs), ("children -> parent", best_child), ("max(chunk, child)",
                                                                                 np.maximum(cs, best_child))):
            top = np.argsort(-score)[:100]
            ranks[name].append(_merge_rank([chunk_ids[i] for i in top if np.isfinite(score[i])], info,
                                           relevant[q["id"]], args.k))
    kinds = [q["kind"] for q in questions]
    out: dict[str, Any] = {"half": args.half, "n": len(questions), "children": int(len(child_parent)),
                           "child_window": args.child_window, "child_stride": args.child_stride,
                           "chunks": len(chunk_ids), "child_embed_s": round(embed_s, 1), "child_tokens": tokens,
                           "variants": {}}
    for name, r in ranks.items():
        rep = {"all": quality(r, mrr_at=args.k)}
        for kind in KINDS:
            rep[kind] = quality([x for x, kk in zip(r, kinds, strict=True) if kk == kind], mrr_at=args.k)
        out["variants"][name] = rep
        print(f"{name:22s} hit@1 {rep['all']['hit@1']:.3f}  hit@5 {rep['all']['hit@5']:.3f} "
              f"{rep['all']['hit@5_ci']}  hit@10 {rep['all']['hit@10']:.3f}  mrr@10 {rep['all']['mrr@10']:.3f}  "
              + "  ".join(f"{kind} {rep[kind]['hit@5']:.2f}" for kind in KINDS))
    print(f"children: {len(child_parent):,} ({tokens:,} tokens) embedded in {embed_s:.0f} s; "
          f"chunks: {len(chunk_ids):,}")
    dest = args.out or ROOT / "benchmarks" / "results" / f"parent_child_{args.half}.json"
    dest.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
