"""The asset graph: every asset and check, the resources they take, and the selections the jobs
run. The Definitions (``definitions``) and the headless runner (``runner``) both build on it."""

from __future__ import annotations

import dagster as dg

from brb_pipeline.orchestration.assets import batches, ingest, insights, memory, store
from brb_pipeline.orchestration.assets.groups import INGEST, INSIGHTS, PER_BATCH, STORE
from brb_pipeline.orchestration.checks import ALL_CHECKS
from brb_pipeline.orchestration.resources import BrbSettings, Runtime

ALL_ASSETS = [
    ingest.message_sources, ingest.source_snapshot, ingest.parsed_messages, ingest.contacts,
    ingest.contact_batches, ingest.batch_content,
    batches.batch_chunks, batches.batch_embeddings, memory.batch_topics, memory.person_profiles,
    store.chunk_store, store.vector_index, store.text_index,
    insights.projection, insights.clusters, insights.cluster_labels, insights.insights_map,
]
ALL_DEFS = [*ALL_ASSETS, *ALL_CHECKS]  # what in-process runs materialize

#: What each job runs (the headless runner's runs are named after these jobs too).
INGEST_ASSETS = dg.AssetSelection.groups(INGEST)
BATCH_ASSETS = dg.AssetSelection.groups(PER_BATCH)
MEMORY_ASSETS = dg.AssetSelection.assets(memory.batch_topics, memory.person_profiles)
STORE_ASSETS = dg.AssetSelection.groups(STORE)
FINALIZE_ASSETS = dg.AssetSelection.groups(STORE, INSIGHTS)


def resources(home: str = "", runtime: Runtime | None = None) -> dict:
    """The resources every asset takes: the settings of ``home`` and the in-process runtime."""
    return {"brb": BrbSettings(home=home), "runtime": runtime or Runtime()}
