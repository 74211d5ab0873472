"""Forget a contact, or delete everything: data removed from every place brb keeps it.

Places: brb.db (contacts, batches, clusters, search log), brb.duckdb (rows and both indexes),
staging Parquet (parsed messages, per-batch chunks and embeddings, retired vectors, insights
layouts, label cache), the source snapshot, and the insights map. Dagster's own storage holds no
message text (assets never put it in metadata), but cluster labels are derived from text, so the
caller also wipes the insights assets' event history (see ``runner.wipe_derived_events``).

A forgotten contact stays forgotten: its handles and chats are remembered as salted hashes in
brb.db and filtered out of every later ingestion, so a scheduled run does not bring it back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from brb_pipeline.core import duck, metadata
from brb_pipeline.core.store import delete_contacts, partition_path
from brb_pipeline.pipeline import paths
from brb_pipeline.pipeline.embed import drop_retired
from brb_pipeline.settings import Settings

log = logging.getLogger("brb")

FORGOTTEN_DDL = """CREATE TABLE IF NOT EXISTS forgotten (
    kind TEXT NOT NULL,        -- handle | chat
    digest TEXT NOT NULL,      -- salted sha256: the handle itself is not kept
    PRIMARY KEY (kind, digest)
)"""


def _salt(s: Settings) -> bytes:
    p = s.home / ".forget-salt"
    if not p.exists():
        s.home.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(16))
    return p.read_bytes()


def _digest(salt: bytes, value: str) -> str:
    return hashlib.sha256(salt + value.encode()).hexdigest()


class ForgottenRules:
    """The forgotten handles and chats (salted digests), applied to freshly parsed frames.

    Args:
        salt: the home's forget salt.
        handles: digests of forgotten handles.
        chats: digests of forgotten group chat ids.
    """

    def __init__(self, salt: bytes, handles: set[str], chats: set[str]) -> None:
        self.salt = salt
        self.handles = handles
        self.chats = chats

    def _hashed(self, expr: pl.Expr) -> pl.Expr:
        salt = self.salt
        return expr.map_elements(lambda v: _digest(salt, v), return_dtype=pl.Utf8)

    def gone_chats(self, chats: pl.DataFrame) -> set[str]:
        """Chat ids to drop: direct chats with a forgotten participant and forgotten chats."""
        direct_gone = chats.filter(
            (pl.col("kind") == "direct")
            & pl.col("participants").list.eval(self._hashed(pl.element()).is_in(list(self.handles))).list.any()
        )["chat_id"].to_list()
        group_gone = chats.filter(self._hashed(pl.col("chat_id")).is_in(list(self.chats)))["chat_id"].to_list()
        return set(direct_gone) | set(group_gone)

    def keep(self, gone_chats: set[str]) -> pl.Expr:
        """Message predicate: not in a gone chat and not sent by a forgotten handle."""
        return ~pl.col("chat_id").is_in(list(gone_chats)) & ~(
            pl.col("sender").is_not_null() & self._hashed(pl.col("sender")).fill_null("").is_in(list(self.handles)))


def forgotten_rules(s: Settings) -> ForgottenRules | None:
    """What :func:`forget_contacts` remembered, or None when nobody was forgotten."""
    if not s.brb_db.exists():
        return None
    with metadata.connect(s.brb_db) as c:
        c.execute(FORGOTTEN_DDL)
        rows = c.execute("SELECT kind, digest FROM forgotten").fetchall()
    if not rows:
        return None
    return ForgottenRules(_salt(s), {d for k, d in rows if k == "handle"}, {d for k, d in rows if k == "chat"})


def forgotten_filter(s: Settings, messages: pl.DataFrame, chats: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Drop messages of forgotten contacts (their direct chats, their messages in groups,
    forgotten group chats) from freshly parsed frames. Returns (messages, chats, dropped)."""
    rules = forgotten_rules(s)
    if rules is None:
        return messages, chats, 0
    gone = rules.gone_chats(chats)
    kept = messages.filter(rules.keep(gone))
    return kept, chats.filter(~pl.col("chat_id").is_in(list(gone))), messages.height - kept.height


def forget_contacts(s: Settings, contact_ids: list[str]) -> dict[str, Any]:
    """Remove everything derived from these contacts; remember them as forgotten.

    Returns:
        Counts of what was removed where (no names, no text).
    """
    report: dict[str, Any] = {"contacts": len(contact_ids)}
    contacts = metadata.read_contacts(s.brb_db)
    mine = contacts.filter(pl.col("contact_id").is_in(contact_ids))
    handles = sorted({h for hs in mine["handles"].to_list() for h in (hs or [])}) if mine.height else []
    batches = sorted(set(mine["batch"].drop_nulls().to_list())) if mine.height else []
    chat_ids: set[str] = set()
    shared: list[str] = []  # group chats they wrote in: their chunks hold the person's lines
    if paths.messages(s).exists():
        m = pl.scan_parquet(paths.messages(s))
        chat_ids = set(m.filter(pl.col("contact_id").is_in(contact_ids)).select("chat_id").unique()
                       .collect()["chat_id"].to_list())
        if handles:
            shared = sorted(set(m.filter(pl.col("sender").is_in(handles) & ~pl.col("contact_id").is_in(contact_ids))
                                .select("contact_id").unique().collect()["contact_id"].to_list()))
    if shared:
        batches = sorted(set(batches) | set(contacts.filter(pl.col("contact_id").is_in(shared))["batch"]
                                            .drop_nulls().to_list()))
    report["shared_chats_cleared"] = len(shared)
    salt = _salt(s)
    with metadata.connect(s.brb_db) as c:
        c.execute(FORGOTTEN_DDL)
        c.executemany("INSERT OR IGNORE INTO forgotten VALUES ('handle', ?)", [(_digest(salt, h),) for h in handles])
        group_chats = [cid[2:] for cid in contact_ids if cid.startswith("g:")]
        c.executemany("INSERT OR IGNORE INTO forgotten VALUES ('chat', ?)", [(_digest(salt, ch),) for ch in group_chats])
        report["brb_db_contacts"] = c.execute(
            f"DELETE FROM contacts WHERE contact_id IN ({','.join('?' * len(contact_ids))})", contact_ids).rowcount
        # the batches' content changed: make the next run re-chunk them (their rows are gone already)
        c.executemany("UPDATE batches SET embedded_fingerprint = NULL, loaded_fingerprint = NULL WHERE batch = ?",
                      [(b,) for b in batches])
        c.execute("DELETE FROM clusters")
    # staging: parsed and contact-resolved messages (their lines in shared group chats too)
    mine_expr = pl.col("contact_id").is_in(contact_ids) | pl.col("sender").fill_null("").is_in(handles)
    report["staging_messages"] = _filter_parquet(paths.messages(s), ~mine_expr)
    if paths.parsed_messages(s).exists():
        keep = ~pl.col("chat_id").is_in(list(chat_ids))
        if handles:
            keep = keep & ~pl.col("sender").fill_null("").is_in(handles)
        report["staging_parsed"] = _filter_parquet(paths.parsed_messages(s), keep)
        _filter_parquet(paths.parsed_chats(s), ~pl.col("chat_id").is_in(list(chat_ids)))
    # staging: per-batch chunks and embeddings (keep the partition's schema metadata)
    removed_chunk_ids: set[str] = set()
    # Group chats they wrote in lose their chunks until the next ingestion re-chunks them without
    # the person's lines (their messages are filtered out of every later parse).
    doomed = list(contact_ids) + shared
    # every staged partition, not only their current batches: a person who changed batch, or a
    # batch key that no longer exists, may have left their chunks in another file
    for b in sorted(set(batches) | set(paths.staged_batch_files(s))):
        _filter_parquet(paths.chunks(s, b), ~pl.col("contact_id").is_in(doomed))
        removed_chunk_ids |= _filter_partition(partition_path(s.staging_dir, b), doomed)
    report["staging_chunks"] = len(removed_chunk_ids)
    # retired vectors (a cache until the next load) hold chunk text of any batch: drop them all
    report["retired_removed"] = drop_retired(s)
    # DuckDB rows and indexes (indexes are rebuilt without them)
    if s.duckdb_path.exists():
        con = duck.connect(s.duckdb_path)
        try:
            report["store_rows"] = delete_contacts(con, doomed)
        finally:
            con.close()
    # search log entries that routed to them or returned their chunks
    report["search_log"] = _forget_searches(s.brb_db, set(contact_ids), removed_chunk_ids)
    # snapshot: a raw copy of the sources, re-taken at the next ingestion
    report["snapshot_removed"] = _rmtree(s.snapshot_dir)
    # insights: layouts, labels and the map carry their text; drop them until the next run
    report["insights_removed"] = _rmtree(s.staging_dir / "insights") + _rmtree(s.insights_dir)
    return report


def delete_all(s: Settings) -> list[str]:
    """Delete everything brb stored under the home dir. Returns the paths removed."""
    removed = []
    if not s.home.exists():
        return removed
    for p in sorted(s.home.iterdir()):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
        removed.append(str(p))
    return removed


def _filter_parquet(path: Path, keep: pl.Expr) -> int:
    if not path.exists():
        return 0
    df = pl.read_parquet(path)
    kept = df.filter(keep)
    if kept.height != df.height:
        paths.atomic_write_parquet(kept, path)
    return df.height - kept.height


def _filter_partition(path: Path, contact_ids: list[str]) -> set[str]:
    if not path.exists():
        return set()
    table = pq.read_table(path)
    df = pl.from_arrow(table.select(["chunk_id", "contact_id"]))
    gone = set(df.filter(pl.col("contact_id").is_in(contact_ids))["chunk_id"].to_list())
    if gone:
        import pyarrow as pa
        import pyarrow.compute as pc

        mask = pc.invert(pc.is_in(table.column("contact_id"), value_set=pa.array(contact_ids)))
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(table.filter(mask), tmp)  # the schema (with its metadata) is kept
        tmp.replace(path)
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
