"""Unpartitioned ingestion stages: snapshot -> parsed messages -> contacts -> contact batches."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from brb_pipeline.core import metadata
from brb_pipeline.core.contacts.batching import assign_batches, batch_fingerprints
from brb_pipeline.core.contacts.resolve import resolve_contacts
from brb_pipeline.core.crypto import files
from brb_pipeline.core.errors import SourceError, SourceMissingError
from brb_pipeline.core.progress import Progress
from brb_pipeline.core.records import CHAT_SCHEMA, MESSAGE_SCHEMA, UNKNOWN_CONTACT_ID
from brb_pipeline.core.contacts import people_db
from brb_pipeline.core.contacts.membership import member_spans, read_membership_events
from brb_pipeline.core.contacts.people import person_stats
from brb_pipeline.core.contacts.reactions import person_reactions
from brb_pipeline.core.contacts.stats import contact_stats
from brb_pipeline.keys import provider as keys
from brb_pipeline.core.store import parquet_files
from brb_pipeline.privacy.forgotten import forgotten_rules
from brb_pipeline.privacy.scrub import scrub_snapshot
from brb_pipeline.config.settings import Settings
from brb_pipeline.sources.addressbook import read_addressbook
from brb_pipeline.sources.imessage import IMessageStream
from brb_pipeline.sources.snapshot import take_snapshot
from brb_pipeline.sources.sqlite_ro import FileIO

if TYPE_CHECKING:
    from brb_pipeline.sources.mail import MailStream
    from brb_pipeline.sources.whatsapp import WhatsAppStream

log = logging.getLogger("brb")

Cancel = Callable[[], bool]

#: Rows per block when parsing and when rewriting the messages file: what these stages hold at
#: once (10K rows reads as fast as 50K and keeps the working set flat).
_BLOCK_ROWS = 10_000
#: Messages gathered in memory at a time to group ``paths.messages`` by batch (see _write_messages).
_SORT_ROWS = 500_000


def run_snapshot(s: Settings, progress: Progress | None = None) -> dict[str, Any]:
    """Copy the enabled sources into ``<home>/snapshot`` (sources opened read-only).

    The WhatsApp store is passed on only when the channel is enabled; otherwise its path is
    never touched.
    """
    keys.prepare_home(s)  # every ingestion starts here (the UI and schedules too): fix the mode first
    if s.imessage_enabled and s.chat_db is None:
        raise SourceMissingError("no chat.db configured: pass --chat-db PATH (e.g. ~/Library/Messages/chat.db)")
    t0 = time.perf_counter()
    io = snapshot_io(s)
    if progress:
        progress.update("snapshot", 5, "copying sources")
    snap = take_snapshot(
        s.home,
        chat_db=s.chat_db if s.imessage_enabled else None,
        addressbook_dir=s.addressbook_dir,
        whatsapp_db=s.whatsapp_db if s.whatsapp_enabled else None,
        mail_dir=_mail_dir(s),
        io=io,
    )
    try:  # the copy is ours: forgotten people are deleted from it before anything reads it
        scrub_snapshot(s, {"chat_db": snap.chat_db, "addressbook_files": snap.addressbook_files,
                           "whatsapp_db": snap.whatsapp_db, "mail_db": snap.mail_db}, io)
    except BaseException:
        shutil.rmtree(snap.root, ignore_errors=True)
        raise
    manifest = _jsonable(dataclasses.asdict(snap)) if dataclasses.is_dataclass(snap) else dict(snap)
    manifest["channels"] = s.channels()
    manifest["taken_at"] = time.time()
    s.paths.snapshot_manifest.write_text(json.dumps(manifest, indent=2, default=str))
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


def snapshot_io(s: Settings) -> FileIO | None:
    """How the snapshot's copies are written and read: sealed under the home's key in an
    encrypted home, None (plain files) otherwise. The key is looked up once, for the snapshot
    folder: a Mail body lies deeper under the home than a file's own key lookup walks."""
    key = files.file_key(s.snapshot_dir)
    if key is None:
        return None
    return FileIO(read=partial(files.read_bytes, key=key), write=partial(files.write_bytes, key=key))


def _mail_dir(s: Settings) -> Path | None:
    """The Mail folder to snapshot: None unless Mail is enabled (then it must be configured)."""
    if not s.mail_enabled:
        return None
    if s.mail_dir is None:
        raise SourceMissingError("no Mail folder configured: pass --mail PATH (e.g. ~/Library/Mail)")
    return s.mail_dir


def snapshot_files(s: Settings) -> dict[str, Any]:
    """The snapshot manifest written by :func:`run_snapshot`."""
    p = s.paths.snapshot_manifest
    if not p.exists():
        raise SourceMissingError(f"no snapshot in {s.snapshot_dir}: run `brb ingest` first")
    return json.loads(p.read_text())


def run_parse(s: Settings, progress: Progress | None = None, cancel: Cancel | None = None) -> dict[str, Any]:
    """Read the snapshot's message stores into one normalized Parquet file (staging).

    Messages are read, filtered (forgotten contacts) and written block by block, one row group
    per block, so memory does not grow with the archive; the file appears only once complete.
    """
    t0 = time.perf_counter()
    snap = snapshot_files(s)
    rules = forgotten_rules(s)
    channels = [c for c, on in s.channels().items() if on]
    tally = _ParseTally()
    chats: list[pl.DataFrame] = []
    stats: dict[str, int] = {}
    warnings: list[str] = []
    read: dict[str, int] = {}  # rows read per channel: the rate counts every channel's rows
    with parquet_files.atomic_parquet_writer(s.paths.parsed_messages, MESSAGE_SCHEMA) as write:
        for i, channel in enumerate(channels):
            def prog(done: int, total: int, i: int = i, channel: str = channel) -> None:
                read[channel] = done
                if progress and total:
                    progress.update("parsing", 100 * (i + done / total) / len(channels),
                                    f"{channel} {done:,}/{total:,}", count=sum(read.values()), unit="messages",
                                    channel=channel, messages_done=done, messages_total=total)

            stream = _channel_stream(s, snap, channel, cancel, prog)
            if stream is None:
                continue
            with stream:
                gone = rules.gone_chats(stream.chats) if rules else set()
                keep = rules.keep(gone) if rules else None
                for block in stream.blocks():
                    if keep is not None:
                        kept = block.filter(keep)
                        tally.forgotten += block.height - kept.height
                        block = rules.scrub_reactions(kept)
                    tally.add(block)
                    write(block)
                result = stream.result()
            chats.append(rules.scrub_chats(result.chats.filter(~pl.col("chat_id").is_in(list(gone)))) if rules
                         else result.chats)
            for k, v in result.stats.items():
                stats[k] = stats.get(k, 0) + int(v)
            warnings.extend(result.warnings)
    chat_frame = pl.concat(chats, how="vertical") if chats else pl.DataFrame(schema=CHAT_SCHEMA)
    parquet_files.atomic_write_parquet(chat_frame, s.paths.parsed_chats)
    for w in warnings:
        log.warning("Parsing - %s", w)
    n = tally.messages
    if progress:
        progress.update("parsing", 100, f"{n:,} messages", count=sum(read.values()), unit="messages",
                        messages_done=n, messages_total=n)
    meta: dict[str, Any] = {
        "messages": n,
        "chats": chat_frame.height,
        "seconds": round(time.perf_counter() - t0, 3),
        "pct_from_attributed_body": round(100 * stats.get("from_attributed_body", 0) / n, 2) if n else 0.0,
        "pct_undecodable": round(100 * stats.get("undecodable", 0) / n, 3) if n else 0.0,
        "first_ts": str(tally.first_ts) if n else None,
        "last_ts": str(tally.last_ts) if n else None,
    }
    meta.update({f"stat_{k}": v for k, v in sorted(stats.items())})
    meta["forgotten_messages_skipped"] = tally.forgotten
    return meta


class _ParseTally:
    """Running counts over the written blocks: messages, first/last timestamp, forgotten rows."""

    def __init__(self) -> None:
        self.messages = 0
        self.forgotten = 0
        self.first_ts: Any = None
        self.last_ts: Any = None

    def add(self, block: pl.DataFrame) -> None:
        if not block.height:
            return
        self.messages += block.height
        lo, hi = block["ts"].min(), block["ts"].max()
        if lo is not None and (self.first_ts is None or lo < self.first_ts):
            self.first_ts = lo
        if hi is not None and (self.last_ts is None or hi > self.last_ts):
            self.last_ts = hi


def _channel_stream(s: Settings, snap: dict[str, Any], channel: str, cancel: Cancel | None,
                    prog: Callable[[int, int], None]) -> IMessageStream | WhatsAppStream | MailStream | None:
    """The block reader of one enabled channel's snapshot (None when it has no store)."""
    io = snapshot_io(s)
    if channel == "imessage":
        return IMessageStream(Path(snap["chat_db"]), default_region=s.default_region, cancel=cancel, progress=prog,
                              chunk_rows=_BLOCK_ROWS, io=io, attachments_dir=s.attachments_dir,
                              voice_lengths=s.voice_lengths)
    if channel == "whatsapp" and snap.get("whatsapp_db"):
        from brb_pipeline.sources.whatsapp import WhatsAppStream  # opened only when opted in

        return WhatsAppStream(Path(snap["whatsapp_db"]), default_region=s.default_region, cancel=cancel,
                              progress=prog, chunk_rows=_BLOCK_ROWS, io=io)
    if channel == "mail" and snap.get("mail_db"):
        from brb_pipeline.sources.mail import MailStream  # opened only when opted in

        return MailStream(Path(snap["mail_db"]), exclude_lists=s.mail_exclude_lists, default_region=s.default_region,
                          cancel=cancel, progress=prog, io=io)
    return None


#: What contact resolution reads of each message, then what per-contact stats read.
_RESOLVE_COLUMNS = ["channel", "chat_id", "sender"]
_STATS_COLUMNS = ["chat_id", "message_id", "is_from_me", "ts", "sender", "reactions"]  # per-person stats
#: What a batch fingerprint hashes (see ``core.batching.batch_fingerprints``).
_FINGERPRINT_COLUMNS = ["batch", "contact_id", "message_id", "ts", "text", "edited", "reactions"]
_FINGERPRINT_ROWS = 100_000  # messages read at once to fingerprint batches


def run_contacts(s: Settings) -> dict[str, Any]:
    """Resolve handles to contacts with AddressBook names, compute per-contact stats, write brb.db.

    Resolution and stats read only the columns they need, one after the other; the messages file
    for the per-batch stages is then written block by block (each message gets its chat's contact
    and batch).
    """
    t0 = time.perf_counter()
    chats = files.read_parquet(s.paths.parsed_chats)
    snap = snapshot_files(s)
    people: list = []
    ab_warnings: list[str] = []
    ab_dir = snap.get("addressbook_dir")
    if ab_dir:
        try:
            ab = read_addressbook(Path(ab_dir), io=snapshot_io(s))
            people, ab_warnings = ab.people, list(ab.warnings)
        except SourceError as e:
            ab_warnings.append(str(e))
    else:
        ab_warnings.append("no AddressBook given: contacts are shown by handle (pass --addressbook DIR)")
    for w in ab_warnings:
        log.warning("Contacts - %s", w)
    parsed = s.paths.parsed_messages
    events = read_membership_events(parsed)
    res = resolve_contacts(files.read_parquet(parsed, columns=_RESOLVE_COLUMNS), chats, people,
                           default_region=s.default_region, former=events)
    contact_id = res.messages.get_column("contact_id")  # same file and row order as the stats columns
    chat_contact = res.messages.select("chat_id", "contact_id").unique("chat_id", keep="first", maintain_order=True)
    res.messages = res.messages.clear()  # from here on only its per-chat mapping is needed
    stat_rows = files.read_parquet(parsed, columns=_STATS_COLUMNS)
    stats = contact_stats(stat_rows.with_columns(contact_id))
    del contact_id
    folks = res.people
    people_db.replace_people(
        s.brb_db,
        folks.people.join(person_stats(stat_rows, folks.members, folks.handle_person), on="person_id", how="left")
        .join(person_reactions(stat_rows, folks.handle_person), on="person_id", how="left"),
        folks.members.join(member_spans(folks.members, events, stat_rows, folks.handle_person),
                           on=["chat_id", "person_id"], how="left"))
    del stat_rows
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
    # A message's contact is its chat's contact: one row per chat carries it to every block.
    _write_messages(s, chat_contact, assignments.select("contact_id", "batch"))
    named = int(contacts.filter(pl.col("name_source") == "addressbook").height)
    return {
        "contacts": contacts.height,
        "named_contacts": named,
        "pct_named": round(100 * named / max(1, contacts.height), 1),
        "addressbook_people": len(people),
        "addressbook_warnings": len(ab_warnings),
        "name_conflicts": len(res.conflicts),
        "people": folks.people.height,
        "named_people": int((folks.people["name_source"] == "addressbook").sum()),
        "membership_events": events.height,
        "seconds": round(time.perf_counter() - t0, 3),
        **{f"stat_{k}": v for k, v in res.stats.items() if isinstance(v, (int, float))},
    }


def _write_messages(s: Settings, chat_contact: pl.DataFrame, batches: pl.DataFrame) -> None:
    """Parsed messages + ``contact_id`` + ``batch`` -> ``paths.messages``, grouped by batch.

    Each row group holds one batch only (a large batch spans several), so a per-batch stage
    reads its own row groups and not the whole archive (:func:`~brb_pipeline.stages.embed.batch_messages`).
    Batches are gathered a group at a time, each group at most ``_SORT_ROWS`` messages, so the
    memory this takes is bounded whatever the archive's size; within a batch, rows keep their
    parsed order.

    Args:
        chat_contact: (chat_id, contact_id), one row per chat of the parsed messages.
        batches: (contact_id, batch) assignments.
    """
    src = files.parquet_file(s.paths.parsed_messages)
    schema = pl.Schema({**MESSAGE_SCHEMA, "contact_id": pl.Utf8, "batch": batches.schema["batch"]})

    def with_batch(frame: pl.DataFrame) -> pl.DataFrame:
        frame = frame.join(chat_contact, on="chat_id", how="left", maintain_order="left").with_columns(
            pl.col("contact_id").fill_null(UNKNOWN_CONTACT_ID))
        return frame.join(batches, on="contact_id", how="left", maintain_order="left")

    per = (with_batch(pl.from_arrow(src.read(columns=["chat_id"]))).group_by("batch")
           .agg(pl.len().alias("messages")).sort("batch", nulls_last=True))
    with parquet_files.atomic_parquet_writer(s.paths.messages, schema) as write:
        for group in _pack_batches(per, max(_SORT_ROWS, int(per["messages"].max() or 0))):
            keys = [b for b in group if b is not None]
            own = pl.col("batch").is_in(keys) | (pl.col("batch").is_null() if None in group else pl.lit(False))
            blocks = []
            for rb in src.iter_batches(batch_size=_BLOCK_ROWS, use_threads=False):
                block = pl.from_arrow(rb)
                if block.height:
                    blocks.append(with_batch(block).filter(own))
            if not blocks:
                continue
            rows = pl.concat(blocks).sort("batch", nulls_last=True, maintain_order=True)
            del blocks
            parquet_files.write_grouped(write, rows, "batch")
            del rows


def run_batches(s: Settings, model_id: str | None = None) -> tuple[list[str], list[str], dict[str, Any]]:
    """Fingerprint every contact batch and record it in brb.db.

    Returns:
        (all batch keys in order, the keys that changed since they were embedded, metadata).
    """
    scan = files.scan_parquet(s.paths.messages)
    per = (scan.group_by("batch").agg(pl.len().alias("messages"), pl.col("contact_id").n_unique().alias("contacts"))
           .collect())
    fps: dict[str, str] = {}
    # A few batches' messages in memory at a time (at most the largest batch, or a fixed budget).
    budget = max(_FINGERPRINT_ROWS, int(per["messages"].max() or 0))
    for group in _pack_batches(per, budget):
        own = pl.col("batch").is_in([b for b in group if b is not None])
        if None in group:
            own = own | pl.col("batch").is_null()
        fps.update(batch_fingerprints(scan.filter(own).select(_FINGERPRINT_COLUMNS).collect()))
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
    from brb_pipeline.stages.embed import embed_keys

    keys = embed_keys(s, dict(zip(frame["batch"].to_list(), frame["fingerprint"].to_list())), model_id)
    diff = metadata.sync_batches(s.brb_db, frame, keys)
    meta = {
        "batches": len(all_keys),
        "changed_batches": len(diff["changed"]),
        "unchanged_batches": len(diff["unchanged"]),
        "removed_batches": len(diff["removed"]),
        "largest_batch_messages": int(frame["messages"].max() or 0) if frame.height else 0,
        "people": people_table(contacts),
        "people_partitions": people_db.partitions_table(s.brb_db),  # group-only people too
    }
    return all_keys, diff["changed"], meta


#: Between two people in a row of :func:`people_table` (group names contain commas).
PEOPLE_SEPARATOR = " · "
_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\|*_`[]<>#"})


def people_table(contacts: pl.DataFrame) -> str:
    """A markdown table, one row per batch: its people (display name and message count, in rank
    order) and its messages, so the Dagster UI says which partition holds whom.

    Names are identities: ``brb forget`` wipes this metadata with the asset's event history
    (``runner.wipe_derived_events``). Never message text.

    Args:
        contacts: ``metadata.read_contacts`` (contact_id, display_name, batch, messages, rank).
    """
    rows = ["| batch | people | messages |", "|---|---|---:|"]
    if contacts.height == 0:
        return "\n".join(rows)
    frame = (contacts.filter(pl.col("batch").is_not_null()).sort(["batch", "rank"], nulls_last=True)
             .select("batch", "display_name", pl.col("messages").fill_null(0)))
    for (batch,), group in frame.group_by("batch", maintain_order=True):
        people = PEOPLE_SEPARATOR.join(f"{_md(n or '?')} ({m:,})"
                                       for n, m in group.select("display_name", "messages").iter_rows())
        rows.append(f"| {batch} | {people} | {int(group['messages'].sum()):,} |")
    return "\n".join(rows)


def _md(text: str) -> str:
    """``text`` safe in one markdown table cell (no pipes, markup or line breaks)."""
    return " ".join(text.split()).translate(_MD_SPECIAL)


def _pack_batches(per: pl.DataFrame, budget: int) -> list[list[str | None]]:
    """Batch keys in groups of at most ``budget`` messages (a larger batch forms its own group).

    Args:
        per: one row per batch with ``batch`` and ``messages``.
        budget: messages per group.
    """
    groups: list[list[str | None]] = []
    size = budget + 1
    for batch, n in per.select("batch", "messages").iter_rows():
        if size + n > budget:
            groups.append([])
            size = 0
        groups[-1].append(batch)
        size += n
    return groups


def _jsonable(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _jsonable(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_jsonable(v) for v in d]
    if isinstance(d, Path):
        return str(d)
    return d
