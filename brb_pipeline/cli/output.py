"""What the ``brb`` commands report: :func:`status_dict` (the keys docs/commands.md documents) and the
text forms of a status and of a search result."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from brb_pipeline.core.errors import BrbError
from brb_pipeline.config.settings import Settings

WHATSAPP_WARNING = (
    "WhatsApp channel ON: brb reads your WhatsApp ChatStorage.sqlite (read-only) into its store; "
    "nothing else protects that file, keep the home dir private"
)
MAIL_WARNING = (
    "Mail channel ON: brb reads your Mail Envelope Index and message bodies (read-only) into its store; "
    "nothing else protects them, keep the home dir private"
)


def _iso_epoch(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds") if t else None


def status_dict(s: Settings) -> dict[str, Any]:
    """What is stored. Keys are documented in docs/commands.md and only ever added to."""
    from brb_pipeline.core import metadata

    out: dict[str, Any] = {
        "home": str(s.home), "messages": 0, "contacts": 0, "named_contacts": 0, "people": 0, "named_people": 0,
        "conversations": 0, "chunks": 0,
        "embedding_model": None, "embedding_device": None, "last_ingestion": None, "last_success": None, "channels": s.channels(), "clusters": 0,
        "map": None, "indexes": None, "search_ready": False, "store_update_pending": False, "warnings": [],
        "memory": _memory_status(s), "encryption": _encryption_status(s),
    }
    if not s.brb_db.exists() or out["encryption"].get("key_ok") is False:
        return out  # an encrypted home without its key: say where the key was looked for, read nothing
    last_memory = metadata.last_run_stat(s.brb_db, "memory")
    if last_memory:
        out["memory"]["losses"] = json.loads(last_memory).get("losses")
    metadata.settle_dead_runs(s.brb_db)  # a run whose process is gone is "interrupted", never "running"
    contacts = metadata.read_contacts(s.brb_db)
    if contacts.height:
        out["contacts"] = contacts.height
        out["messages"] = int(contacts["messages"].sum())
        out["named_contacts"] = int((contacts["name_source"] == "addressbook").sum())
    _people_status(s, out)
    for key, status in (("last_ingestion", None), ("last_success", "success")):
        run = metadata.last_run(s.brb_db, status=status)
        if run:
            out[key] = {k: run[k] for k in ("run_id", "status", "messages", "first_ts", "last_ts", "error")}
            for t in ("started_at", "finished_at"):
                out[key][t] = _iso_epoch(run[t])
            if key == "last_ingestion":
                out["warnings"] = json.loads(run.get("warnings_json") or "[]")
    out["embedding_device"] = metadata.last_run_stat(s.brb_db, "embedding_device")
    out["clusters"] = metadata.count_clusters(s.brb_db)
    if s.duckdb_path.exists():
        _store_status(s, out)

    out["store_update_pending"] = s.paths.store_next.exists()
    m = s.insights_dir / "map.html"
    out["map"] = str(m) if m.exists() else None
    return out


def _people_status(s: Settings, out: dict[str, Any]) -> None:
    """``people`` (everyone in a chat: one per card or unknown handle), ``named_people`` (from the
    AddressBook) and ``conversations`` (chats with messages, 1:1 and groups)."""
    from brb_pipeline.core import metadata

    with metadata.connect(s.brb_db) as c:
        people, named = c.execute("SELECT count(*), coalesce(sum(name_source = 'addressbook'), 0) FROM people").fetchone()
        conversations = c.execute("SELECT count(DISTINCT chat_id) FROM members").fetchone()[0]
    out.update(people=people, named_people=named, conversations=conversations)


def _memory_status(s: Settings) -> dict[str, Any]:
    """The distilled memory's part of the status: rows stored, the newest run's losses, and the
    skip reason while no local model is configured."""
    from brb_pipeline.stages.memory import NO_MODEL

    skipped = s.llm_model_path is None
    return {"topics": 0, "profiles": 0, "losses": None, "skipped": skipped, "reason": NO_MODEL if skipped else None}


def _store_status(s: Settings, out: dict[str, Any]) -> None:
    """Fill ``out``'s chunk count, model, indexes and search readiness from ``brb.duckdb`` (or its
    ``store_error``)."""
    import duckdb

    from brb_pipeline.core.memory.tables import memory_counts
    from brb_pipeline.core.store import duck
    from brb_pipeline.core.store.chunks import store_stats
    from brb_pipeline.core.store.index import index_status
    from brb_pipeline.stages.repair import read_every_block

    try:
        con = duck.connect(s.duckdb_path, read_only=True)
        try:
            st = store_stats(con)
            out["chunks"] = int(st.get("chunks", 0))
            out["embedding_model"] = duck.get_meta(con, "embedding_model")
            ix = index_status(con)
            out["line_vectors"] = _line_status(con, out["chunks"])
            out["memory"].update(memory_counts(con))
            if s.duckdb_path.stat().st_size <= FULL_CHECK_MAX_BYTES:
                read_every_block(con)  # every checksum verified: a damaged block is named here
        finally:
            con.close()
        out["indexes"] = {k: {"present": bool(ix[k]["present"]), "rows": ix[k].get("rows"),
                              "matches_chunks": bool(ix[k]["present"] and not ix[k]["stale"]),
                              **({"exact": True} if ix[k].get("exact") else {})}
                          for k in ("hnsw", "fts")}
        out["search_ready"] = bool(ix["ready"])
    except BrbError as e:
        out["store_error"] = str(e)
        key_ok = out["encryption"].get("key_ok") is not False  # the home's key is right (or none is needed)
        if key_ok and "in use by another" not in str(e):  # it exists, the key is right, it does not open
            out["store_error"] = (f"brb.duckdb at {s.duckdb_path} is damaged ({str(e)[:160]}): "
                                  "run `brb reindex` to rebuild it from staging")
            out["damaged"] = {"brb.duckdb": out["store_error"]}  # its header blocks do not read
    except duckdb.Error as e:  # a checksum or AES tag that fails: a damaged file
        first = (str(e).splitlines() or [""])[0][:160]
        out["store_error"] = (f"brb.duckdb at {s.duckdb_path} is damaged ({type(e).__name__}: {first}): "
                              "run `brb reindex` to rebuild it from staging")
        out["damaged"] = {"brb.duckdb": out["store_error"]}


def _line_status(con: Any, chunks: int) -> dict[str, Any]:
    """The message-line vectors search re-ranks with (:mod:`brb_pipeline.core.store.line_index`):
    present for the store's model, and covering every chunk when they were last built."""
    from brb_pipeline.core.store import duck, line_index

    if not line_index.present(con):
        return {"present": False, "chunks": 0, "lines": 0, "matches_chunks": False}
    info = duck.get_meta(con, line_index.LINE_META) or {}
    rows = int(info.get("rows") or 0)
    return {"present": True, "chunks": rows, "lines": int(info.get("lines") or 0), "matches_chunks": rows == chunks}


#: `brb status` reads every block of a store up to this size (its checksums are then verified);
#: a larger one only has the parts status reads checked (`brb reindex` always reads it all).
FULL_CHECK_MAX_BYTES = 1 << 30


def _encryption_status(s: Settings) -> dict[str, Any]:
    from brb_pipeline.keys import provider as keys

    return keys.describe(s)


def _encryption_line(e: dict[str, Any]) -> str:
    if e.get("encrypted") is None:
        return f"encryption      {e.get('note', '')}"
    if e.get("encrypted"):
        return f"encryption      {e['cipher']}, key from {e['key_source']}" + ("" if e.get("key_ok") or "missing" in e["key_source"] else " (WRONG KEY)")
    return f"encryption      off ({e.get('note', '')})"


def status_lines(st: dict[str, Any]) -> list[str]:
    """``brb status`` as text, one line per fact, from :func:`status_dict`."""
    ch = ", ".join(f"{k} {'on' if v else 'off'}" for k, v in st["channels"].items())
    last = st["last_ingestion"] or {}
    lines = [
        f"home            {st['home']}",
        f"messages        {st['messages']:,}",
        f"contacts        {st['contacts']:,} ({st['named_contacts']:,} named)",
        f"people          {st['people']:,} ({st['named_people']:,} named) in {st['conversations']:,} conversations",
        f"chunks          {st['chunks']:,}",
        f"embedding model {st['embedding_model']}",
        f"clusters        {st['clusters']}",
        f"channels        {ch}",
        f"last ingestion  {last.get('status', 'never')}",
    ]
    for name, why in (st.get("damaged") or {}).items():
        lines.append(f"damaged         {name}: {why}")
    ix = st["indexes"] or {}
    lines.append("indexes         " + (", ".join(
        f"{'exact vectors' if v.get('exact') else k} {'ok' if v['matches_chunks'] else ('stale' if v['present'] else 'missing')}"
        for k, v in ix.items()) or "none"))
    lv = st.get("line_vectors")
    if lv is not None:
        lines.append("message lines   " + (f"{lv['lines']:,} lines of {lv['chunks']:,} chunks"
                                           f"{'' if lv['matches_chunks'] else ' (stale: the next ingest updates them)'}"
                                           if lv["present"] else "none (search keeps the fused order until the next ingest)"))
    mem = st.get("memory") or {}
    lines.append("memory          " + (f"skipped: {mem['reason']}" if mem.get("skipped") else
                                      f"{mem.get('topics', 0):,} topics, {mem.get('profiles', 0):,} profiles"))
    lines.append(_encryption_line(st["encryption"]))
    lines += [f"warning         check {w.get('check')} on {w.get('asset')}" for w in st["warnings"]]
    return lines


def search_text(out: dict[str, Any]) -> str:
    """A search result (``run_search_cold``'s dict) as the text ``brb search`` prints on stdout."""
    parts: list[str] = []
    r = out["routing"]
    if r["contact_ids"]:
        parts.append(f"(searching {', '.join(r['matched'])}'s conversations for: {r['query']})")
    if r.get("dates"):  # a date said in words: the range searched, or that it was not understood
        d = r["dates"]
        span = f"\"{d['phrase']}\": {(d['since'] or '…')[:10]} .. {(d['until'] or '…')[:10]}"
        parts.append(f"(\"{d['phrase']}\" is not a date brb can place; searched as words)" if not d["resolved"]
                     else f"({span} holds no messages; searched every date)" if d.get("applied") is False
                     else f"({span})")
    if out.get("profile"):
        parts += commitment_lines(out["profile"])
    for i, h in enumerate(out["hits"], 1):
        if h.get("kind") == "topic":  # a summary: where its messages are, to open the conversation
            parts.append(f"\n#{i}  [topic] {h['contact']}  {(h['start'] or '')[:16]} .. {(h['end'] or '')[:16]}"
                         f"  score {h['scores']['fused']:.4f}  (chat {h['chat_id']}, messages "
                         f"{h['first_message_id']} .. {h['last_message_id']})")
        else:
            parts.append(f"\n#{i}  {h['contact']}  {(h['start'] or '')[:16]}  score {h['scores']['fused']:.4f}")
        parts.append(h["text"])
    if not out["hits"]:
        parts.append("no results")
    elif out.get("confident") is False:
        parts.append("\n(no close match: these are the nearest passages)")
    return "\n".join(parts)


def commitment_lines(profile: dict[str, Any]) -> list[str]:
    """What the profile says was promised to a person (a search's ``profile``), dated when known."""
    lines = [f"What you promised {profile['contact']}:"]
    lines += [f"  - {c['text']}" + (f" ({c['date']})" if c.get("date") else "") for c in profile["commitments"]]
    if not profile["commitments"]:
        lines.append("  (no commitments in their summaries)")
    return lines
