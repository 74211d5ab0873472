"""Headless runs of the asset graph, in-process: the `brb` CLI and host apps use this.

The same assets the Dagster UI materializes run here through ``dagster.materialize`` against the
home dir's Dagster instance (so the UI shows CLI runs and the batch partitions), in three steps:
the unpartitioned ingestion assets, one run per contact batch that changed, then the store,
indexes and insights. Cancellation is checked between batches and inside embedding.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from brb_pipeline.assets.groups import INGEST, INSIGHTS, PER_BATCH, STORE
from brb_pipeline.assets.resources import Runtime
from brb_pipeline.core import metadata
from brb_pipeline.core.errors import BrbError, CancelledError
from brb_pipeline.core.progress import CancelToken, Progress
from brb_pipeline.core.store import partition_path
from brb_pipeline.settings import Settings

log = logging.getLogger("brb")

# Dagster's console logger prints every step event at DEBUG; headless runs show progress bars
# instead (the events are still in the instance's event log for the UI). BRB_DAGSTER_LOG=DEBUG
# brings them back.
DAGSTER_CONSOLE_LEVEL = os.environ.get("BRB_DAGSTER_LOG", "WARNING").upper()

INSTANCE_YAML = """# Written by brb: local instance storage under the pipeline's home dir.
storage:
  sqlite:
    base_dir: {base}
local_artifact_storage:
  module: dagster._core.storage.root
  class: LocalArtifactStorage
  config:
    base_dir: {base}
telemetry:
  enabled: false
concurrency:
  pools:
    default_limit: 1
"""


def instance_for(s: Settings) -> dg.DagsterInstance:
    """The Dagster instance under ``<home>/dagster`` (created on first use)."""
    home = s.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    if not cfg.exists():
        cfg.write_text(INSTANCE_YAML.format(base=str(home)))
    os.environ["DAGSTER_HOME"] = str(home)
    return dg.DagsterInstance.from_config(str(home))


def _materialize(assets_sel: dg.AssetSelection, s: Settings, runtime: Runtime, instance: dg.DagsterInstance,
                 partition_key: str | None = None) -> dg.ExecuteInProcessResult:
    from brb_pipeline.definitions import ALL_DEFS, resources

    try:
        return dg.materialize(ALL_DEFS, selection=assets_sel, instance=instance, partition_key=partition_key,
                              resources=resources(home=str(s.home), runtime=runtime),
                              run_config={"loggers": {"console": {"config": {"log_level": DAGSTER_CONSOLE_LEVEL}}}},
                              tags={"brb/source": "cli"})
    except dg.DagsterExecutionStepExecutionError as e:
        inner = getattr(e, "user_exception", None) or e.__cause__
        if isinstance(inner, BrbError):
            raise inner from None
        raise


def _meta(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, Any]:
    for ev in result.get_asset_materialization_events():
        mat = ev.event_specific_data.materialization
        if mat.asset_key.to_user_string() == asset:
            return {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return {}


def run_ingest(
    s: Settings,
    *,
    progress: Progress | None = None,
    cancel: CancelToken | None = None,
    only_contacts: list[str] | None = None,
    embedder: Any | None = None,
    analyze: bool = True,
    reembed: bool = False,
) -> dict[str, Any]:
    """Materialize the whole graph for ``s``; returns a JSON-able summary.

    Args:
        s: settings (sources, home, options).
        progress: where the six stage bars go.
        cancel: checked between batches; on cancel the previous complete store stays usable.
        only_contacts: contact ids whose batches are re-run even if unchanged (a backfill of one
            contact); other batches run only when their content changed.
        embedder: an already-loaded embedder (tests pass a fast one).
        analyze: also compute the insights map.
        reembed: embed every chunk of every processed batch again instead of reusing the vectors
            of chunks whose text did not change (all batches are processed).
    """
    from brb_pipeline.sources.snapshot import check_destination

    # missing files are reported by the snapshot; only real source folders are guarded here
    sources = [p for p in (s.chat_db, s.whatsapp_db if s.whatsapp_enabled else None) if p and Path(p).expanduser().exists()]
    check_destination(s.home, [Path(p).expanduser().parent for p in sources]
                      + ([s.addressbook_dir] if s.addressbook_dir else []))
    progress = progress or Progress()
    cancel = cancel or CancelToken()
    runtime = Runtime(progress, cancel, embedder)
    runtime.reembed = reembed
    instance = instance_for(s)
    s.save()
    t_all = time.perf_counter()
    timings: dict[str, float] = {}
    run_id = metadata.start_run(s.brb_db, str(s.snapshot_dir))
    try:
        t = time.perf_counter()
        r = _materialize(dg.AssetSelection.groups(INGEST), s, runtime, instance)
        timings["ingest"] = round(time.perf_counter() - t, 3)
        parsed = _meta(r, "parsed_messages")
        batches_meta = _meta(r, "contact_batches")
        parse_stats = {k: v for k, v in parsed.items() if k.startswith(("stat_", "pct_"))}
        metadata.update_run_stats(s.brb_db, run_id, messages=int(parsed.get("messages", 0)),
                                  first_ts=parsed.get("first_ts"), last_ts=parsed.get("last_ts"), stats=parse_stats)
        all_batches = metadata.all_batches(s.brb_db)
        changed = [b for b in str(batches_meta.get("changed", "none")).split(", ") if b and b != "none"]
        missing = [b["batch"] for b in all_batches if not partition_path(s.staging_dir, b["batch"]).exists()]
        forced = _batches_of(s, only_contacts) if only_contacts else []
        if reembed and not only_contacts:
            forced = [b["batch"] for b in all_batches]
        if forced:
            metadata.reset_embedded(s.brb_db, forced)
        todo = sorted(set(changed) | set(missing) | set(forced))
        t = time.perf_counter()
        runtime.embed_progress = _embed_progress_factory(progress, todo)
        for i, b in enumerate(todo):
            cancel.check()
            progress.update("chunking", 100 * i / max(1, len(todo)), f"{b} ({i + 1}/{len(todo)})")
            _materialize(dg.AssetSelection.groups(PER_BATCH), s, runtime, instance, partition_key=b)
        progress.update("chunking", 100, f"{len(todo)} batches")
        progress.update("embedding", 100, f"{len(todo)} batches embedded, {len(all_batches) - len(todo)} unchanged")
        timings["batches"] = round(time.perf_counter() - t, 3)
        cancel.check()
        t = time.perf_counter()
        sel = dg.AssetSelection.groups(STORE, INSIGHTS) if analyze else dg.AssetSelection.groups(STORE)
        r = _materialize(sel, s, runtime, instance)
        timings["finalize"] = round(time.perf_counter() - t, 3)
        store_meta = _meta(r, "chunk_store")
        map_meta = _meta(r, "insights_map")
        timings["total"] = round(time.perf_counter() - t_all, 3)
        summary = {
            "run_id": run_id,
            "messages": int(parsed.get("messages", 0)),
            "batches": len(all_batches),
            "batches_processed": todo,
            "chunks": int(store_meta.get("chunks", 0)),
            "store_changed": bool(store_meta.get("changed", False)),
            "map": map_meta.get("html"),
            "timings": timings,
        }
        metadata.finish_run(s.brb_db, run_id, status="success", timings=timings,
                            stats={**parse_stats, **{k: v for k, v in summary.items() if k != "timings"}})
        return summary
    except CancelledError as e:
        metadata.finish_run(s.brb_db, run_id, status="cancelled", timings=timings, error=str(e))
        raise
    except BaseException as e:
        metadata.finish_run(s.brb_db, run_id, status="failed", timings=timings, error=str(e)[:500])
        raise


def _batches_of(s: Settings, contact_ids: list[str]) -> list[str]:
    contacts = metadata.read_contacts(s.brb_db)
    return sorted(set(contacts.filter(pl.col("contact_id").is_in(contact_ids))["batch"].drop_nulls().to_list()))


def _embed_progress_factory(progress: Progress, todo: list[str]):
    order = {b: i for i, b in enumerate(todo)}

    def for_batch(batch: str):
        i = order.get(batch, 0)

        def cb(done: int, total: int) -> None:
            frac = done / total if total else 1.0
            progress.update("embedding", 100 * (i + frac) / max(1, len(todo)), f"{batch} {done:,}/{total:,} chunks")

        return cb

    return for_batch


def home_exists(s: Settings) -> bool:
    return Path(s.brb_db).exists()


DERIVED_TEXT_ASSETS = ("cluster_labels", "insights_map", "clusters")


def wipe_derived_events(s: Settings) -> int:
    """Delete the event history of assets whose metadata is derived from message text
    (cluster labels and the cluster table). Returns the number of asset keys wiped."""
    if not (s.dagster_home / "dagster.yaml").exists():
        return 0
    instance = instance_for(s)
    keys = [dg.AssetKey(k) for k in DERIVED_TEXT_ASSETS]
    instance.wipe_assets(keys)
    return len(keys)
