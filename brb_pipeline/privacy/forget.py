"""Forget a contact, or delete everything: data removed from every place brb keeps it.

Places: brb.db (contacts, batches, clusters, search log), brb.duckdb (rows and both indexes),
staging Parquet (parsed messages, per-batch chunks and embeddings, retired vectors, insights
layouts, label cache), the source snapshot, and the insights map. Dagster's own storage holds no
message text (assets never put it in metadata), but cluster labels are derived from text, so the
caller also wipes the insights assets' event history (see ``runner.wipe_derived_events``).

A forgotten contact stays forgotten: :mod:`brb_pipeline.privacy.forgotten` remembers it and
filters it out of every later ingestion.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from brb_pipeline.core import faults, metadata
from brb_pipeline.core.contacts.people_db import groups_of_handles
from brb_pipeline.core.crypto import files
from brb_pipeline.core.store.compact import compact_without
from brb_pipeline.keys import provider as keys
from brb_pipeline.core.store import parquet_files
from brb_pipeline.privacy import forget_journal
from brb_pipeline.privacy.forgotten import backup_forgotten, remember, retire_legacy_salt, shred_key
from brb_pipeline.config.settings import Settings


def forget_contacts(s: Settings, contact_ids: list[str], person_handles: Sequence[str] = (),
                    finish: Callable[[Settings], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Remove everything derived from these contacts; remember them as forgotten.

    A journal: what to remove is worked out first and written to brb.db (``forget_journal``)
    before anything is removed; every step is idempotent, and the entry goes only once all are
    done, so a forget killed half-way is finished from its entry by the next command
    (:func:`finish_pending`).

    Args:
        person_handles: the handles of people seen only in groups (no contact of their own):
            their messages leave the group chats, the others' stay.
        finish: a last step (the CLI wipes Dagster's derived events), its counts added to the report.

    Returns:
        Counts of what was removed where (no names, no text).
    """
    plan = plan_forget(s, contact_ids, person_handles)
    entry = forget_journal.begin(s, plan)
    faults.point("forget_journaled")
    report = apply_forget(s, plan)
    backup_forgotten(s)
    if finish is not None:
        report.update(finish(s))
    forget_journal.end(s, entry)
    _vacuum(s.brb_db)  # the entry (it names them) leaves no bytes behind
    return report


def plan_forget(s: Settings, contact_ids: list[str], person_handles: Sequence[str] = ()) -> dict[str, Any]:
    """What forgetting ``contact_ids`` removes, worked out before anything is: their handles,
    names (to recognise a rerun), batches, chats, the group chats they shared, and every staged
    chunk id of theirs (the search log is cleaned of them even when a killed run had already
    dropped the chunks)."""
    contacts = metadata.read_contacts(s.brb_db)
    mine = contacts.filter(pl.col("contact_id").is_in(contact_ids))
    handles = sorted({h for hs in mine["handles"].to_list() for h in (hs or [])} | set(person_handles))
    batches = sorted(set(mine["batch"].drop_nulls().to_list())) if mine.height else []
    chat_ids: set[str] = set()
    # group chats they wrote in or were part of: their chunks hold the person's lines or name
    shared: list[str] = sorted(set(contacts.filter(
        pl.col("handles").list.eval(pl.element().is_in(handles)).list.any()
        & ~pl.col("contact_id").is_in(contact_ids))["contact_id"].to_list())) if handles else []
    if handles:  # groups whose events name them (added, removed), though they never wrote there
        shared = sorted(set(shared) | (set(groups_of_handles(s.brb_db, handles)) - set(contact_ids)))
    if s.paths.messages.exists():
        m = files.scan_parquet(s.paths.messages)
        chat_ids = set(m.filter(pl.col("contact_id").is_in(contact_ids)).select("chat_id").unique()
                       .collect()["chat_id"].to_list())
        if handles:
            wrote = m.filter(pl.col("sender").is_in(handles) & ~pl.col("contact_id").is_in(contact_ids))
            shared = sorted(set(shared) | set(wrote.select("contact_id").unique().collect()["contact_id"].to_list()))
    if shared:
        batches = sorted(set(batches) | set(contacts.filter(pl.col("contact_id").is_in(shared))["batch"]
                                            .drop_nulls().to_list()))
    doomed = list(contact_ids) + shared
    chunk_ids: set[str] = set()
    for b in sorted(set(batches) | set(s.paths.staged_batch_files())):
        chunk_ids |= _partition_ids(s.paths.partition(b), doomed)
    return {"contact_ids": list(contact_ids), "handles": handles, "batches": batches, "chat_ids": sorted(chat_ids),
            "shared": shared, "chunk_ids": sorted(chunk_ids),
            "names": sorted(set(mine["display_name"].drop_nulls().to_list())) if mine.height else []}


def apply_forget(s: Settings, plan: dict[str, Any]) -> dict[str, Any]:
    """Carry out a :func:`plan_forget` plan; every step can run again (after a kill) to the same end."""
    contact_ids, handles, batches = plan["contact_ids"], plan["handles"], plan["batches"]
    chat_ids, shared = set(plan["chat_ids"]), plan["shared"]
    report: dict[str, Any] = {"contacts": len(contact_ids), "shared_chats_cleared": len(shared)}
    with metadata.connect(s.brb_db) as c:
        c.execute("PRAGMA secure_delete = ON")  # freed pages are zeroed, not left readable
        remember(s, c, handles, [cid[2:] for cid in contact_ids if cid.startswith("g:")])
        report["brb_db_contacts"] = c.execute(
            f"DELETE FROM contacts WHERE contact_id IN ({','.join('?' * len(contact_ids))})", contact_ids).rowcount
        report["brb_db_participants_removed"] = _drop_participants(c, set(handles))
        report["brb_db_people"] = _drop_people(c, set(handles), contact_ids)
        # the batches' content changed: make the next run re-chunk them (their rows are gone already)
        c.executemany("UPDATE batches SET embedded_fingerprint = NULL, loaded_fingerprint = NULL WHERE batch = ?",
                      [(b,) for b in batches])
        c.execute("DELETE FROM clusters")
    faults.point("forget_brb_db")
    # staging: parsed and contact-resolved messages (their lines in shared group chats too)
    mine_expr = pl.col("contact_id").is_in(contact_ids) | pl.col("sender").fill_null("").is_in(handles)
    report["staging_messages"] = _filter_parquet(s.paths.messages, ~mine_expr, handles, group_by="batch")
    if s.paths.parsed_messages.exists():
        keep = ~pl.col("chat_id").is_in(list(chat_ids))
        if handles:
            keep = keep & ~pl.col("sender").fill_null("").is_in(handles)
        report["staging_parsed"] = _filter_parquet(s.paths.parsed_messages, keep, handles)
        _filter_parquet(s.paths.parsed_chats, ~pl.col("chat_id").is_in(list(chat_ids)), handles)
    # staging: per-batch chunks and embeddings (keep the partition's schema metadata)
    removed_chunk_ids: set[str] = set(plan["chunk_ids"])
    # Group chats they wrote in lose their chunks until the next ingestion re-chunks them without
    # the person's lines (their messages are filtered out of every later parse).
    doomed = list(contact_ids) + shared
    # every staged partition, not only their current batches: a person who changed batch, or a
    # batch key that no longer exists, may have left their chunks in another file
    for b in sorted(set(batches) | set(s.paths.staged_batch_files())):
        _filter_parquet(s.paths.chunks(b), ~pl.col("contact_id").is_in(doomed))
        removed_chunk_ids |= _filter_partition(s.paths.partition(b), doomed)
        for memory_file in (s.paths.topics(b), s.paths.profiles(b)):  # the distilled memory
            _filter_partition(memory_file, doomed)
    report["staging_chunks"] = len(removed_chunk_ids)
    # retired vectors (a cache until the next load) hold chunk text of any batch: drop them all
    report["retired_removed"] = drop_retired(s)
    faults.point("forget_staging")
    # DuckDB: a DELETE only marks rows, so the store is rewritten into a fresh file without them
    # (indexes rebuilt there); a staging copy of the store may hold them too
    if s.duckdb_path.exists():
        report["store_rows"] = compact_without(s.duckdb_path, doomed)
    report["store_next_removed"] = _unlink(s.duckdb_path.with_name(s.duckdb_path.name + ".next"))
    # the message-line vectors kept from an unfinished run (chunk ids and vectors of anyone)
    report["lines_resume_removed"] = _unlink(s.paths.lines_resume)
    faults.point("forget_store")
    # search log entries that routed to them or returned their chunks
    report["search_log"] = _forget_searches(s.brb_db, set(contact_ids), removed_chunk_ids)
    # snapshot: a raw copy of the sources, re-taken (and scrubbed) at the next ingestion
    report["snapshot_removed"] = _rmtree(s.snapshot_dir)
    # insights: layouts, labels and the map carry their text; drop them until the next run
    report["insights_removed"] = _rmtree(s.paths.insights_staging) + _rmtree(s.insights_dir)
    # any other staged Parquet file naming them (a cache this function does not know by name)
    report["staging_other_files"] = _scrub_other_parquet(s, set(handles) | set(contact_ids))
    _vacuum(s.brb_db)
    retire_legacy_salt(s)
    return report


def _partition_ids(path: Path, contact_ids: list[str]) -> set[str]:
    """The chunk ids of ``contact_ids`` in a staged partition (nothing is changed)."""
    if not path.exists():
        return set()
    table = files.read_arrow(path)
    if "chunk_id" not in table.column_names or "contact_id" not in table.column_names:
        return set()
    df = pl.from_arrow(table.select(["chunk_id", "contact_id"]))
    return set(df.filter(pl.col("contact_id").is_in(contact_ids))["chunk_id"].to_list())


def _drop_people(c, handles: set[str], contact_ids: list[str]) -> int:
    """Delete the people holding a forgotten handle, and the memberships of forgotten chats."""
    gone = [pid for pid, hs in c.execute("SELECT person_id, handles_json FROM people")
            if handles & set(json.loads(hs))]
    for ids, col in ((gone, "person_id"), (list(contact_ids), "contact_id")):
        if ids:
            c.execute(f"DELETE FROM members WHERE {col} IN ({','.join('?' * len(ids))})", ids)
    if gone:
        c.execute(f"DELETE FROM people WHERE person_id IN ({','.join('?' * len(gone))})", gone)
    return len(gone)


def _drop_participants(c, handles: set[str]) -> int:
    """Take forgotten handles out of the contacts that stay (shared group chats); a name made
    from the participants' names is made again from those left. Returns contacts changed."""
    if not handles:
        return 0
    rows = c.execute("SELECT contact_id, handles_json, name_source FROM contacts").fetchall()
    names = {}
    for cid, hs, src in c.execute("SELECT contact_id, handles_json, display_name FROM contacts WHERE kind = 'direct'"):
        for h in json.loads(hs or "[]"):
            names.setdefault(h, src)
    changed = 0
    for cid, hs, src in rows:
        old = json.loads(hs or "[]")
        new = [h for h in old if h not in handles]
        if new == old:
            continue
        changed += 1
        c.execute("UPDATE contacts SET handles_json = ? WHERE contact_id = ?", (json.dumps(new), cid))
        if src == "participants":
            c.execute("UPDATE contacts SET display_name = ? WHERE contact_id = ?",
                      (_participants_name([names.get(h, h) for h in new]), cid))
    return changed


def _participants_name(names: list[str]) -> str:
    """The name core.contacts gives an unnamed group: "A", "A & B", "A, B & C", "A, B & 2 more"."""
    if not names:
        return "Unnamed group"
    if len(names) <= 2:
        return " & ".join(names)
    if len(names) == 3:
        return f"{names[0]}, {names[1]} & {names[2]}"
    return f"{names[0]}, {names[1]} & {len(names) - 2} more"


def _vacuum(db: Path) -> None:
    """Rewrite brb.db without free pages and empty its WAL (deleted rows leave no bytes). A sealed
    brb.db is rewritten whole under a fresh nonce anyway; the VACUUM keeps old rows out of the
    free pages of its image."""
    if not db.exists():
        return
    with metadata.open_db(db) as con:
        con.execute("PRAGMA secure_delete = ON")
        con.execute("VACUUM")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def delete_all(s: Settings) -> list[str]:
    """Delete everything brb stored under the home dir and shred the home's keys (the data key
    of an encrypted home, so an old backup of the home cannot be read, and the forget key).

    Returns:
        The paths removed (the key files or keychain entries as ``data key`` and ``forget key``).
    """
    removed = ["forget key"] if shred_key(s) else []  # first: its id is in brb.db, read with the data key
    removed += ["data key"] if keys.shred(s) else []  # then: it is named in encryption.json
    if s.home.exists():
        for p in sorted(s.home.iterdir()):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
            removed.append(str(p))
    return removed


def _filter_parquet(path: Path, keep: pl.Expr, handles: list[str] | None = None,
                    group_by: str | None = None) -> int:
    """Keep the rows matching ``keep``; take ``handles`` out of reaction and participant lists.

    ``group_by``: the file is grouped by this column (one value per row group); so it stays.
    """
    if not path.exists():
        return 0
    df = files.read_parquet(path)
    kept = df.filter(keep)
    dropped = df.height - kept.height
    if handles:
        before = kept
        if "reactions" in kept.columns:
            sender = pl.element().struct.field("sender")
            kept = kept.with_columns(pl.col("reactions").list.eval(
                pl.element().filter(~sender.fill_null("").is_in(handles))))
        if "participants" in kept.columns:
            kept = kept.with_columns(pl.col("participants").list.eval(pl.element().filter(~pl.element().is_in(handles))))
        if "extras" in kept.columns:  # a group event naming them, a reply quoting them: the entry goes
            kept = kept.with_columns(pl.col("extras").list.eval(pl.element().filter(~_names_any(handles))))
        changed = not kept.equals(before)
    else:
        changed = False
    if dropped or changed:
        if group_by:
            with parquet_files.atomic_parquet_writer(path, kept.schema) as write:
                parquet_files.write_grouped(write, kept, group_by)
        else:
            parquet_files.atomic_write_parquet(kept, path)
    return dropped


def _names_any(handles: list[str]) -> pl.Expr:
    """An ``extras`` entry (:data:`brb_pipeline.core.records.EXTRA`) whose name, ref or text holds
    one of ``handles``."""
    hit = pl.lit(False)
    for field in ("name", "ref", "text"):
        value = pl.element().struct.field(field).fill_null("")
        for h in handles:
            hit = hit | value.str.contains(h, literal=True)
    return hit


def _scrub_other_parquet(s: Settings, values: set[str]) -> int:
    """Every Parquet file under staging: rows with a string column equal to one of ``values``
    (handles, contact ids) dropped, and those values taken out of string lists. The schema,
    metadata included, is kept. Returns the files rewritten."""
    if not values or not s.staging_dir.exists():
        return 0
    vals = sorted(values)
    n = 0
    for path in sorted(s.staging_dir.rglob("*.parquet")):
        table = files.read_arrow(path)
        df = pl.from_arrow(table)
        strings = [c for c, t in df.schema.items() if t == pl.Utf8]
        lists = [c for c, t in df.schema.items() if t == pl.List(pl.Utf8)]
        hit = pl.lit(False)
        for c in strings:
            hit = hit | pl.col(c).is_in(vals).fill_null(False)
        out = df.filter(~hit).with_columns(
            [pl.col(c).list.eval(pl.element().filter(~pl.element().is_in(vals))) for c in lists])
        if out.equals(df):
            continue
        files.write_parquet(out.to_arrow().cast(table.schema), path, compression="snappy")
        n += 1
    return n


def _unlink(p: Path) -> int:
    if p.exists():
        p.unlink()
        return 1
    return 0


def _filter_partition(path: Path, contact_ids: list[str]) -> set[str]:
    """Drop the rows of ``contact_ids`` from a staged partition (chunks, topics or profiles), keeping
    its schema metadata (the key it was made from); returns the ids of the rows removed."""
    if not path.exists():
        return set()
    table = files.read_arrow(path)
    key = "chunk_id" if "chunk_id" in table.column_names else table.column_names[0]
    df = pl.from_arrow(table.select(list(dict.fromkeys([key, "contact_id"]))))
    gone = set(df.filter(pl.col("contact_id").is_in(contact_ids))[key].to_list())
    if gone:
        import pyarrow as pa
        import pyarrow.compute as pc

        mask = pc.invert(pc.is_in(table.column("contact_id"), value_set=pa.array(contact_ids)))
        # the schema (with its metadata) is kept
        files.write_parquet(table.filter(mask), path, compression="snappy")
    return gone


def _forget_searches(db: Path, contact_ids: set[str], chunk_ids: set[str]) -> int:
    if not db.exists():
        return 0
    with metadata.connect(db) as c:
        if not c.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_log'").fetchone():
            return 0
        doomed = []
        for rowid, routed, results in c.execute("SELECT id, contact_ids, results FROM search_log"):
            hit_ids = {r[0] for r in json.loads(results or "[]")}
            if contact_ids & set(json.loads(routed or "[]")) or chunk_ids & hit_ids:
                doomed.append((rowid,))
        c.executemany("DELETE FROM search_log WHERE id = ?", doomed)
        return len(doomed)


def _rmtree(p: Path) -> int:
    if p.exists():
        shutil.rmtree(p)
        return 1
    return 0


def drop_retired(s: Settings) -> int:
    """Delete the retired vectors (a cache that holds message text). Returns 1 if there were any."""
    d = s.paths.retired_dir
    if not d.exists():
        return 0
    shutil.rmtree(d)
    return 1


def finish_pending(s: Settings, finish: Callable[[Settings], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Carry out every unfinished forget again (each step is idempotent), then drop its entry.

    Args:
        finish: the same last step the interrupted `brb forget` had (Dagster's derived events).

    Returns:
        The plans finished (for the caller to recognise a rerun of the same forget).
    """
    done = []
    for entry, plan in forget_journal.pending(s):
        apply_forget(s, plan)
        backup_forgotten(s)
        if finish is not None:
            finish(s)
        forget_journal.end(s, entry)
        done.append(plan)
    if done:
        _vacuum(s.brb_db)
    return done
