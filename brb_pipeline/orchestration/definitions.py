"""The one Definitions object: assets, checks, jobs, schedules, sensors and resources."""

from __future__ import annotations

import dagster as dg

from brb_pipeline import keys

from brb_pipeline.orchestration.assets import batches, ingest, insights, memory, store
from brb_pipeline.orchestration import automation
from brb_pipeline.orchestration.jobs import contact_backfill_job
from brb_pipeline.orchestration.checks import ALL_CHECKS
from brb_pipeline.orchestration.assets.groups import INGEST, INSIGHTS, PER_BATCH, STORE, contact_batches_partitions
from brb_pipeline.orchestration.resources import BrbSettings, Runtime

keys.install()  # the code location's entry point: an encrypted home's files open with its key

ALL_ASSETS = [
    ingest.source_snapshot, ingest.parsed_messages, ingest.contacts, ingest.contact_batches,
    batches.batch_chunks, batches.batch_embeddings, memory.batch_topics, memory.person_profiles,
    store.chunk_store, store.vector_index, store.text_index,
    insights.projection, insights.clusters, insights.cluster_labels, insights.insights_map,
]
ALL_DEFS = [*ALL_ASSETS, *ALL_CHECKS]  # what in-process runs materialize

ingest_job = dg.define_asset_job("ingest_job", selection=dg.AssetSelection.groups(INGEST),
                                 description="Snapshot the sources, parse, resolve contacts, register batches.")
batch_job = dg.define_asset_job("batch_job", selection=dg.AssetSelection.groups(PER_BATCH),
                                partitions_def=contact_batches_partitions,
                                description="Chunk and embed one contact batch, distil its topics and profiles.")
finalize_job = dg.define_asset_job("finalize_job", selection=dg.AssetSelection.groups(STORE, INSIGHTS),
                                   description="Load the store, build indexes, redraw the insights map.")


def resources(home: str = "", runtime: Runtime | None = None) -> dict:
    """The resources every asset takes: the settings of ``home`` and the in-process runtime."""
    return {"brb": BrbSettings(home=home), "runtime": runtime or Runtime()}


reingest_schedule = automation.reingest_schedule(ingest_job)
source_change_sensor = automation.source_change_sensor(ingest_job)
changed_batches_sensor = automation.batches_sensor(batch_job)
finalize_sensor = automation.finalize_sensor(finalize_job)

defs = dg.Definitions(
    assets=ALL_ASSETS,
    asset_checks=ALL_CHECKS,
    jobs=[ingest_job, batch_job, finalize_job, contact_backfill_job],
    schedules=[reingest_schedule],
    sensors=[source_change_sensor, changed_batches_sensor, finalize_sensor],
    resources=resources(),
)
