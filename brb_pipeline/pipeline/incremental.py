"""What an incremental re-ingestion has left to do, read from brb.db (no Dagster here).

Used by the sensors that chain the three jobs in the Dagster UI (ingest -> changed batches ->
finalize) and by tests.
"""

from __future__ import annotations

import hashlib
from typing import Any

from brb_pipeline.core import metadata
from brb_pipeline.core.store.chunks import partition_path
from brb_pipeline.pipeline.embed import embed_keys
from brb_pipeline.settings import Settings


def pending_work(s: Settings) -> dict[str, Any]:
    """Which batches still need embedding and whether the store is behind the staged partitions.

    Returns:
        ``{"to_embed": [...], "to_load": [...], "state": hash}``: ``to_embed`` batches whose
        staged embeddings are missing or stale; ``to_load`` batches embedded but not yet in the
        store; ``state`` identifies this situation (a sensor's run key).
    """
    if not s.brb_db.exists():
        return {"to_embed": [], "to_load": [], "state": ""}
    rows = metadata.all_batches(s.brb_db)
    keys = embed_keys(s, {r["batch"]: r["fingerprint"] for r in rows})
    to_embed = sorted(r["batch"] for r in rows
                      if r.get("embedded_fingerprint") != keys[r["batch"]]
                      or not partition_path(s.staging_dir, r["batch"]).exists())
    to_load = sorted(r["batch"] for r in rows
                     if r["batch"] not in to_embed and r.get("loaded_fingerprint") != r.get("embedded_fingerprint"))
    state = hashlib.sha1(repr([(r["batch"], r.get("embedded_fingerprint"), r.get("loaded_fingerprint"))
                               for r in rows]).encode()).hexdigest()[:16]
    return {"to_embed": to_embed, "to_load": to_load, "state": state}
