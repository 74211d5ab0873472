"""What an incremental re-ingestion has left to do, read from brb.db (no Dagster here).

The one place that decides which batches a run chunks and embeds: the headless runner asks
:func:`pending_work` for its batch runs, and ``contact_batches`` reports the same list to Dagster
(``batch_content``) so that the UI's automation runs those partitions; the ``changed`` metadata
of ``contact_batches`` is for display only.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from brb_pipeline.core import metadata
from brb_pipeline.stages.embed import embed_keys
from brb_pipeline.config.settings import Settings


def pending_work(s: Settings, model_id: str | None = None) -> dict[str, Any]:
    """Which batches still need embedding and whether the store is behind the staged partitions.

    Args:
        model_id: the embedder's id (name@weights-hash) the batches are embedded with; defaults
            to the configured model's.

    Returns:
        ``{"to_embed": [...], "to_load": [...]}``: ``to_embed`` batches whose staged
        embeddings are missing or stale (new or changed content or settings, or reset by
        :func:`force_batches`); ``to_load`` batches embedded but not yet in the store.
    """
    if not s.brb_db.exists():
        return {"to_embed": [], "to_load": []}
    rows = metadata.all_batches(s.brb_db)
    keys = embed_keys(s, {r["batch"]: r["fingerprint"] for r in rows}, model_id)
    to_embed = sorted(r["batch"] for r in rows
                      if r.get("embedded_fingerprint") != keys[r["batch"]]
                      or not s.paths.partition(r["batch"]).exists())
    to_load = sorted(r["batch"] for r in rows
                     if r["batch"] not in to_embed and r.get("loaded_fingerprint") != r.get("embedded_fingerprint"))
    return {"to_embed": to_embed, "to_load": to_load}


def force_batches(s: Settings, contact_ids: list[str] | None = None, every: bool = False) -> list[str]:
    """Mark batches for re-embedding even if unchanged, so :func:`pending_work` lists them.

    Args:
        contact_ids: the batches holding these contacts (a backfill of one person).
        every: every batch (``--reembed`` without contacts).

    Returns:
        The batches marked, sorted.
    """
    if contact_ids:
        contacts = metadata.read_contacts(s.brb_db)
        forced = sorted(set(contacts.filter(pl.col("contact_id").is_in(contact_ids))["batch"].drop_nulls().to_list()))
    elif every:
        forced = [b["batch"] for b in metadata.all_batches(s.brb_db)]
    else:
        forced = []
    if forced:
        metadata.reset_embedded(s.brb_db, forced)
    return forced
