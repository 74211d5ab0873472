"""Unpartitioned ingestion assets: snapshot -> parsed_messages -> contacts -> contact_batches."""


import dagster as dg

from brb_pipeline.orchestration.assets.groups import INGEST, contact_batches_partitions
from brb_pipeline.orchestration.resources import BrbSettings, Runtime
from brb_pipeline.orchestration.results import materialized
from brb_pipeline.core import faults
from brb_pipeline.stages import ingest


@dg.asset(group_name=INGEST, kinds={"sqlite"})
def source_snapshot(context: dg.AssetExecutionContext, brb: BrbSettings,
                    runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """A consistent read-only copy of chat.db (with WAL content), the AddressBook and, when
    enabled, the WhatsApp store, in ``<home>/snapshot``."""
    runtime.cancel.check()
    s = brb.load()
    meta = ingest.run_snapshot(s, runtime.progress_for(context))
    faults.point("snapshot_copied")
    return materialized(s, meta)


@dg.asset(group_name=INGEST, deps=[source_snapshot], kinds={"polars", "parquet"})
def parsed_messages(context: dg.AssetExecutionContext, brb: BrbSettings,
                    runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """Every enabled channel's messages in one normalized frame (tapbacks folded, text decoded)."""
    s = brb.load()
    meta = ingest.run_parse(s, runtime.progress_for(context), runtime.cancel)
    faults.point("parsed")
    return materialized(s, meta)


@dg.asset(group_name=INGEST, deps=[parsed_messages], kinds={"sqlite"})
def contacts(brb: BrbSettings) -> dg.MaterializeResult:
    """Contacts with AddressBook names and per-contact stats in brb.db."""
    s = brb.load()
    return materialized(s, ingest.run_contacts(s))


@dg.asset(group_name=INGEST, deps=[contacts], kinds={"sqlite"})
def contact_batches(context: dg.AssetExecutionContext, brb: BrbSettings,
                    runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """Contacts grouped into batches (top 50 by messages 10 to a batch, the rest 50 to a batch),
    registered as the dynamic partitions of every per-batch asset. In a plaintext home its
    metadata's ``people`` table says which batch (partition) holds whom and ``people_partitions``
    every person's conversations (1:1 and groups) and their partitions (``brb forget`` wipes
    both); an encrypted home (the default) leaves them out, since Dagster's event log is not
    encrypted: there, find a person's partitions with the person finder `brb ui` prints (or
    `brb people --partitions`), which resolves names locally and re-runs by partition key.
    ``changed`` is for display: what runs next is ``stages.incremental.pending_work``'s call."""
    s = brb.load()
    keys, changed, meta = ingest.run_batches(s, runtime.embedder(s).model_id)
    name = contact_batches_partitions.name
    existing = set(context.instance.get_dynamic_partitions(name))
    new = [k for k in keys if k not in existing]
    if new:
        context.instance.add_dynamic_partitions(name, new)
    for stale in sorted(existing - set(keys)):
        context.instance.delete_dynamic_partition(name, stale)
    meta["changed"] = ", ".join(changed) if changed else "none"
    meta["people"] = dg.MetadataValue.md(meta["people"])
    meta["people_partitions"] = dg.MetadataValue.md(meta["people_partitions"])
    return materialized(s, meta)
