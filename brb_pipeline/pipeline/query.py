"""Search as a user asks it: route a named contact into a filter, embed the rest with the
model's query prefix, run hybrid/vector/lexical search, attach neighbours, log the search."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from brb_pipeline.core import duck, metadata
from brb_pipeline.core.contacts_lookup import find_contacts
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.routing import ContactRef, route_query
from brb_pipeline.core.search import neighbours, search
from brb_pipeline.core.searchlog import log_search
from brb_pipeline.settings import Settings


def contact_refs(s: Settings) -> list[ContactRef]:
    contacts = metadata.read_contacts(s.brb_db)
    return [ContactRef(r["contact_id"], r["display_name"], tuple(r.get("handles") or []))
            for r in contacts.iter_rows(named=True)]


def run_search(
    s: Settings,
    query: str,
    *,
    embedder: Any | None,
    mode: str = "hybrid",
    k: int = 10,
    contacts: list[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    channel: str | None = None,
    route: bool = True,
    context: bool = False,
    log: bool = True,
) -> dict[str, Any]:
    """One search, as a JSON-able dict (see the README for the fields).

    Args:
        embedder: the store's embedding model (None only for ``mode="lexical"``).
        contacts: names or handles to filter on (resolved against brb.db).
        route: turn a contact named in the question into a filter and search the rest.
        context: include the neighbouring chunks (position ±1) of each hit.
    """
    t0 = time.perf_counter()
    if not s.brb_db.exists() or not s.duckdb_path.exists():
        raise StoreError(f"no search store in {s.home}: run `brb ingest` (or `brb demo`) first")
    contact_ids = find_contacts(s.brb_db, contacts, default_region=s.default_region) if contacts else []
    refs = contact_refs(s)  # read brb.db once per search: routing and hit names
    text = query
    routing: dict[str, Any] = {"matched": [], "contact_ids": [], "query": query}
    if route and not contact_ids:
        routed = route_query(query, refs)
        if routed.contact_ids and routed.query.strip():
            text, contact_ids = routed.query, list(routed.contact_ids)
            routing = {"matched": list(routed.matched), "contact_ids": contact_ids, "query": text}
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        stored_model = duck.get_meta(con, "embedding_model")
        vec = None
        if mode != "lexical":
            if embedder is None:
                raise StoreError("vector search needs the embedding model")
            if stored_model and stored_model != embedder.model_id:
                raise StoreError(f"the store was embedded with {stored_model} but the configured model is "
                                 f"{embedder.model_id}: run `brb ingest` to re-embed, or search with --mode lexical")
            vec = embedder.embed_query(text)
        res = search(con, query_text=text, query_vec=vec, mode=mode, k=k, rrf_k=s.rrf_k,
                     contact_ids=contact_ids or None, channel=channel, since=since, until=until,
                     ef_search=s.hnsw_ef_search)
        names = {r.contact_id: r.display_name for r in refs}
        hits = []
        for h in res.hits:
            item = {
                "chunk_id": h.chunk_id, "contact_id": h.contact_id, "contact": names.get(h.contact_id, h.contact_id),
                "chat_id": h.chat_id, "channel": h.channel,
                "start": h.start_ts.isoformat() if h.start_ts else None,
                "end": h.end_ts.isoformat() if h.end_ts else None,
                "scores": {"vector": h.vector_score, "vector_rank": h.vector_rank, "lexical": h.lexical_score,
                           "lexical_rank": h.lexical_rank, "fused": h.score},
                "text": h.content,
            }
            if context:
                item["context"] = [{"chunk_id": n.chunk_id, "position": n.position, "text": n.content}
                                   for n in neighbours(con, h.chunk_id, span=1) if n.chunk_id != h.chunk_id]
            hits.append(item)
    finally:
        con.close()
    latency_ms = round((time.perf_counter() - t0) * 1000, 2)
    if log:
        log_search(s.brb_db, query=query, mode=mode, model=stored_model, contact_ids=contact_ids,
                   results=[(h["chunk_id"], h["scores"]["fused"]) for h in hits], latency_ms=latency_ms)
    return {"query": query, "mode": mode, "k": k, "routing": routing, "filters": {
        "contact_ids": contact_ids, "since": since.isoformat() if since else None,
        "until": until.isoformat() if until else None, "channel": channel},
        "model": stored_model, "vector_strategy": res.vector_strategy, "latency_ms": latency_ms,
        "timings_ms": res.timings_ms, "hits": hits}
