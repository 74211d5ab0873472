"""The one Definitions object: assets, checks, jobs, schedules, sensors and resources."""

from __future__ import annotations

import dagster as dg

from brb_pipeline.assets import batches, ingest, insights, store
from brb_pipeline.assets.groups import INGEST, INSIGHTS, PER_BATCH, STORE, contact_batches_partitions
from brb_pipeline.assets.resources import BrbSettings, runtime_resource

ALL_ASSETS = [
    ingest.source_snapshot, ingest.parsed_messages, ingest.contacts, ingest.contact_batches,
    batches.batch_chunks, batches.batch_embeddings,
    store.chunk_store, store.vector_index, store.text_index,
    insights.projection, insights.clusters, insights.cluster_labels, insights.insights_map,
]

ingest_job = dg.define_asset_job("ingest_job", selection=dg.AssetSelection.groups(INGEST),
                                 description="Snapshot the sources, parse, resolve contacts, register batches.")
batch_job = dg.define_asset_job("batch_job", selection=dg.AssetSelection.groups(PER_BATCH),
                                partitions_def=contact_batches_partitions,
                                description="Chunk and embed one contact batch.")
finalize_job = dg.define_asset_job("finalize_job", selection=dg.AssetSelection.groups(STORE, INSIGHTS),
                                   description="Load the store, build indexes, redraw the insights map.")


def resources(home: str = "", runtime=None) -> dict:
    return {"brb": BrbSettings(home=home), "runtime": runtime_resource(runtime)}


defs = dg.Definitions(
    assets=ALL_ASSETS,
    jobs=[ingest_job, batch_job, finalize_job],
    resources=resources(),
)
