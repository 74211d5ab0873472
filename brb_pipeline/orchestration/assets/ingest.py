"""Unpartitioned ingestion assets: (message_sources) -> snapshot -> parsed_messages -> contacts ->
contact_batches (-> batch_content, reported per batch)."""

import os

import dagster as dg

from brb_pipeline.config.settings import Settings
from brb_pipeline.core import faults
from brb_pipeline.orchestration.assets.groups import INGEST, contact_batches_partitions
from brb_pipeline.orchestration.automation import EAGER, OBSERVE_SOURCES, snapshot_condition
from brb_pipeline.orchestration.resources import BrbSettings, Runtime
from brb_pipeline.orchestration.results import materialized
from brb_pipeline.sources.snapshot import mail_fingerprint, source_fingerprint
from brb_pipeline.stages import ingest
from brb_pipeline.stages.incremental import pending_work


def sources_fingerprint(s: Settings) -> str:
    """Size and mtime of chat.db and its WAL, and of WhatsApp's store and Mail's index when they
    are on (Mail is never looked at when off); no file is opened, no path is in it."""
    if not s.chat_db:
        return "no chat.db configured"
    parts = ["chat=" + source_fingerprint(s.chat_db)]
    if s.whatsapp_enabled and s.whatsapp_db:
        parts.append("whatsapp=" + source_fingerprint(s.whatsapp_db))
    if s.mail_enabled and s.mail_dir:
        parts.append("mail=" + mail_fingerprint(s.mail_dir))
    return "|".join(parts)


@dg.observable_source_asset(group_name=INGEST, automation_condition=OBSERVE_SOURCES)
def message_sources() -> dg.DataVersion:
    """chat.db (and WhatsApp, Mail when on), watched by their size and mtime: a new data version
    is what makes ``source_snapshot`` run under automation. Hand logic (Dagster cannot stat a
    file outside its storage); it takes no lock and opens no database."""
    return dg.DataVersion(sources_fingerprint(Settings.load(os.environ.get("BRB_HOME") or None)))


@dg.asset(group_name=INGEST, deps=[message_sources], kinds={"sqlite"}, automation_condition=snapshot_condition())
def source_snapshot(context: dg.AssetExecutionContext, brb: BrbSettings,
                    runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """A consistent read-only copy of chat.db (with WAL content), the AddressBook and, when
    enabled, the WhatsApp store, in ``<home>/snapshot``."""
    runtime.cancel.check()
    s = brb.load()
    meta = ingest.run_snapshot(s, runtime.progress_for(context))
    faults.point("snapshot_copied")
    return materialized(s, meta)


@dg.asset(group_name=INGEST, deps=[source_snapshot], kinds={"polars", "parquet"}, automation_condition=EAGER)
def parsed_messages(context: dg.AssetExecutionContext, brb: BrbSettings,
                    runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """Every enabled channel's messages in one normalized frame (tapbacks folded, text decoded)."""
    s = brb.load()
    meta = ingest.run_parse(s, runtime.progress_for(context), runtime.cancel)
    faults.point("parsed")
    return materialized(s, meta)


@dg.asset(group_name=INGEST, deps=[parsed_messages], kinds={"sqlite"}, automation_condition=EAGER)
def contacts(brb: BrbSettings) -> dg.MaterializeResult:
    """Contacts with AddressBook names and per-contact stats in brb.db."""
    s = brb.load()
    return materialized(s, ingest.run_contacts(s))


@dg.asset(group_name=INGEST, deps=[contacts], kinds={"sqlite"}, automation_condition=EAGER)
def contact_batches(context: dg.AssetExecutionContext, brb: BrbSettings,
                    runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """Contacts grouped into batches (top 50 by messages 10 to a batch, the rest 50 to a batch),
    registered as the dynamic partitions of every per-batch asset. In a plaintext home its
    metadata's ``people`` table says which batch (partition) holds whom and ``people_partitions``
    every person's conversations (1:1 and groups) and their partitions (``brb forget`` wipes
    both); an encrypted home (the default) leaves them out, since Dagster's event log is not
    encrypted: there, find a person's partitions with the person finder `brb ui` prints (or
    `brb people --partitions`), which resolves names locally and re-runs by partition key.
    ``changed`` is for display: what runs next is ``stages.incremental.pending_work``'s call,
    reported as a ``batch_content`` materialization per batch to embed (what automation reacts to)."""
    s = brb.load()
    model_id = runtime.embedder(s).model_id
    keys, changed, meta = ingest.run_batches(s, model_id)
    name = contact_batches_partitions.name
    existing = set(context.instance.get_dynamic_partitions(name))
    new = [k for k in keys if k not in existing]
    if new:
        context.instance.add_dynamic_partitions(name, new)
    for stale in sorted(existing - set(keys)):
        context.instance.delete_dynamic_partition(name, stale)
    to_embed = pending_work(s, model_id)["to_embed"]
    for batch in to_embed:
        context.log_event(dg.AssetMaterialization(asset_key=batch_content.key, partition=batch))
    meta["changed"] = ", ".join(changed) if changed else "none"
    meta["to_embed"] = len(to_embed)
    meta["people"] = dg.MetadataValue.md(meta["people"])
    meta["people_partitions"] = dg.MetadataValue.md(meta["people_partitions"])
    return materialized(s, meta)


#: A contact batch's messages (or its embedding settings) changed since it was embedded: reported
#: by ``contact_batches`` per partition, never computed by itself (an external asset). The
#: per-batch assets depend on it partition by partition, so automation runs exactly those batches.
batch_content = dg.AssetSpec(
    "batch_content", group_name=INGEST, deps=[contact_batches], partitions_def=contact_batches_partitions,
    description="Reported by contact_batches for each batch whose content or embedding settings changed "
                "(stages.incremental.pending_work): the per-batch assets of exactly those partitions run next.")
