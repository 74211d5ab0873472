"""Unpartitioned ingestion stages: snapshot -> parsed messages -> contacts -> contact batches."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from brb_pipeline.core import metadata
from brb_pipeline.core.batching import assign_batches, batch_fingerprints
from brb_pipeline.core.contacts import resolve_contacts
from brb_pipeline.core.errors import SourceError, SourceMissingError
from brb_pipeline.core.progress import Progress
from brb_pipeline.core.records import CHAT_SCHEMA, MESSAGE_SCHEMA, ReadResult
from brb_pipeline.core.stats import contact_stats
from brb_pipeline.pipeline import paths
from brb_pipeline.pipeline.privacy import forgotten_filter
from brb_pipeline.settings import Settings
from brb_pipeline.sources.addressbook import read_addressbook
from brb_pipeline.sources.imessage import read_imessage
from brb_pipeline.sources.snapshot import take_snapshot

log = logging.getLogger("brb")

Cancel = Callable[[], bool]


def run_snapshot(s: Settings, progress: Progress | None = None) -> dict[str, Any]:
    """Copy the enabled sources into ``<home>/snapshot`` (sources opened read-only).

    The WhatsApp store is passed on only when the channel is enabled; otherwise its path is
    never touched.
    """
    if s.imessage_enabled and s.chat_db is None:
        raise SourceMissingError("no chat.db configured: pass --chat-db PATH (e.g. ~/Library/Messages/chat.db)")
    t0 = time.perf_counter()
    if progress:
        progress.update("snapshot", 5, "copying sources")
    snap = take_snapshot(
        s.home,
        chat_db=s.chat_db if s.imessage_enabled else None,
        addressbook_dir=s.addressbook_dir,
        whatsapp_db=s.whatsapp_db if s.whatsapp_enabled else None,
    )
    manifest = _jsonable(dataclasses.asdict(snap)) if dataclasses.is_dataclass(snap) else dict(snap)
    manifest["channels"] = s.channels()
    manifest["taken_at"] = time.time()
    paths.snapshot_manifest(s).write_text(json.dumps(manifest, indent=2, default=str))
    if progress:
        progress.update("snapshot", 100, "snapshot taken")
    for w in snap.warnings:
        log.warning("Snapshot - %s", w)
    return {
        "seconds": round(time.perf_counter() - t0, 3),
        "channels": ",".join(k for k, v in s.channels().items() if v),
        "files": len(snap.sizes),
        "bytes": int(sum(snap.sizes.values())),
        "addressbook_stores": len(snap.addressbook_files),
        "warnings": len(snap.warnings),
    }


def snapshot_files(s: Settings) -> dict[str, Any]:
    """The snapshot manifest written by :func:`run_snapshot`."""
    p = paths.snapshot_manifest(s)
    if not p.exists():
        raise SourceMissingError(f"no snapshot in {s.snapshot_dir}: run `brb ingest` first")
    return json.loads(p.read_text())


def run_parse(s: Settings, progress: Progress | None = None, cancel: Cancel | None = None) -> dict[str, Any]:
    """Read the snapshot's message stores into one normalized frame (staging Parquet)."""
    t0 = time.perf_counter()
    snap = snapshot_files(s)
    results: list[ReadResult] = []
    channels = [c for c, on in s.channels().items() if on]
    for i, channel in enumerate(channels):
        def prog(done: int, total: int, i: int = i) -> None:
            if progress and total:
                progress.update("parsing", 100 * (i + done / total) / len(channels), f"{channel} {done:,}/{total:,}")

        if channel == "imessage":
            results.append(read_imessage(Path(snap["chat_db"]), default_region=s.default_region,
                                         cancel=cancel, progress=prog))
        elif channel == "whatsapp" and snap.get("whatsapp_db"):
            from brb_pipeline.sources.whatsapp import read_whatsapp  # opened only when opted in

            results.append(read_whatsapp(Path(snap["whatsapp_db"]), default_region=s.default_region,
                                         cancel=cancel, progress=prog))
    msgs = pl.concat([r.messages for r in results], how="vertical") if results else pl.DataFrame(schema=MESSAGE_SCHEMA)
    chats = pl.concat([r.chats for r in results], how="vertical") if results else pl.DataFrame(schema=CHAT_SCHEMA)
    msgs, chats, forgotten = forgotten_filter(s, msgs, chats)
    paths.atomic_write_parquet(msgs, paths.parsed_messages(s))
    paths.atomic_write_parquet(chats, paths.parsed_chats(s))
    stats: dict[str, int] = {}
    for r in results:
        for k, v in r.stats.items():
            stats[k] = stats.get(k, 0) + int(v)
        for w in r.warnings:
            log.warning("Parsing - %s", w)
    if progress:
        progress.update("parsing", 100, f"{msgs.height:,} messages")
    n = msgs.height
    meta: dict[str, Any] = {
        "messages": n,
        "chats": chats.height,
        "seconds": round(time.perf_counter() - t0, 3),
        "pct_from_attributed_body": round(100 * stats.get("from_attributed_body", 0) / n, 2) if n else 0.0,
        "pct_undecodable": round(100 * stats.get("undecodable", 0) / n, 3) if n else 0.0,
        "first_ts": str(msgs["ts"].min()) if n else None,
        "last_ts": str(msgs["ts"].max()) if n else None,
    }
    meta.update({f"stat_{k}": v for k, v in sorted(stats.items())})
    meta["forgotten_messages_skipped"] = forgotten
    return meta


def run_contacts(s: Settings) -> dict[str, Any]:
    """Resolve handles to contacts with AddressBook names, compute per-contact stats, write brb.db."""
    t0 = time.perf_counter()
    msgs = pl.read_parquet(paths.parsed_messages(s))
    chats = pl.read_parquet(paths.parsed_chats(s))
    snap = snapshot_files(s)
    people: list = []
    ab_warnings: list[str] = []
    ab_dir = snap.get("addressbook_dir")
    if ab_dir:
        try:
            ab = read_addressbook(Path(ab_dir))
            people, ab_warnings = ab.people, list(ab.warnings)
        except SourceError as e:
            ab_warnings.append(str(e))
    else:
        ab_warnings.append("no AddressBook given: contacts are shown by handle (pass --addressbook DIR)")
    for w in ab_warnings:
        log.warning("Contacts - %s", w)
    res = resolve_contacts(msgs, chats, people, default_region=s.default_region)
    stats = contact_stats(res.messages)
    contacts = res.contacts.join(stats, on="contact_id", how="left")
    contacts = contacts.with_columns(pl.col("messages").fill_null(0))
    # Contact ids are stable across runs, so the last run's batches can be kept (sticky batches:
    # a contact that gains messages does not shift everyone ranked below it into another batch).
    before = metadata.read_contacts(s.brb_db).select("contact_id", "batch").drop_nulls()
    assignments = assign_batches(contacts.select("contact_id", "messages"), top_n=s.top_contacts,
                                 top_size=s.top_batch_size, rest_size=s.rest_batch_size,
                                 previous=dict(before.iter_rows()))
    contacts = contacts.join(assignments, on="contact_id", how="left").sort("rank")
    metadata.replace_contacts(s.brb_db, contacts)
    with_batch = res.messages.join(assignments.select("contact_id", "batch"), on="contact_id", how="left")
    paths.atomic_write_parquet(with_batch, paths.messages(s))
    named = int(contacts.filter(pl.col("name_source") == "addressbook").height)
    return {
        "contacts": contacts.height,
        "named_contacts": named,
        "pct_named": round(100 * named / max(1, contacts.height), 1),
        "addressbook_people": len(people),
        "addressbook_warnings": len(ab_warnings),
        "name_conflicts": len(res.conflicts),
        "seconds": round(time.perf_counter() - t0, 3),
        **{f"stat_{k}": v for k, v in res.stats.items() if isinstance(v, (int, float))},
    }


def run_batches(s: Settings, model_id: str | None = None) -> tuple[list[str], list[str], dict[str, Any]]:
    """Fingerprint every contact batch and record it in brb.db.

    Returns:
        (all batch keys in order, the keys that changed since they were embedded, metadata).
    """
    msgs = pl.read_parquet(paths.messages(s))
    fps = batch_fingerprints(msgs)
    per = msgs.group_by("batch").agg(pl.len().alias("messages"), pl.col("contact_id").n_unique().alias("contacts"))
    contacts = metadata.read_contacts(s.brb_db)
    # batches whose contacts have no messages at all still exist (their fingerprint is empty)
    all_keys = sorted(set(contacts["batch"].drop_nulls().to_list()) | set(per["batch"].to_list()))
    per_map = {r["batch"]: r for r in per.iter_rows(named=True)}
    frame = pl.DataFrame(
        {
            "batch": all_keys,
            "contacts": [int(per_map.get(b, {}).get("contacts", 0)) for b in all_keys],
            "messages": [int(per_map.get(b, {}).get("messages", 0)) for b in all_keys],
            "fingerprint": [fps.get(b, "empty") for b in all_keys],
        },
        schema={"batch": pl.Utf8, "contacts": pl.Int64, "messages": pl.Int64, "fingerprint": pl.Utf8},
    )
    from brb_pipeline.pipeline.embed import embed_keys

    keys = embed_keys(s, dict(zip(frame["batch"].to_list(), frame["fingerprint"].to_list())), model_id)
    diff = metadata.sync_batches(s.brb_db, frame, keys)
    meta = {
        "batches": len(all_keys),
        "changed_batches": len(diff["changed"]),
        "unchanged_batches": len(diff["unchanged"]),
        "removed_batches": len(diff["removed"]),
        "largest_batch_messages": int(frame["messages"].max() or 0) if frame.height else 0,
    }
    return all_keys, diff["changed"], meta


def _jsonable(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _jsonable(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_jsonable(v) for v in d]
    if isinstance(d, Path):
        return str(d)
    return d
