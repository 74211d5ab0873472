"""The jobs the Dagster UI lists: the three asset jobs the headless runner's runs are named after,
and ``contact_backfill_job``, which re-runs one person.

A Dagster run covers one partition of an asset job, and the person's batch is found only at run
time, so the backfill is one op that resolves the name and runs the headless runner, the same code
path as ``brb ingest --contact NAME``: the ingestion assets, that person's batch (and any batch
whose content changed), then the store, indexes and map, each as its own run in the instance.
"""

from collections.abc import Callable
from typing import Any

import dagster as dg
from pydantic import Field

from brb_pipeline.config.settings import Settings
from brb_pipeline.core.errors import BrbError
from brb_pipeline.core.progress import CancelToken, LoggerSink, Progress
from brb_pipeline.orchestration.assets.groups import contact_batches_partitions
from brb_pipeline.orchestration.graph import BATCH_ASSETS, FINALIZE_ASSETS, INGEST_ASSETS
from brb_pipeline.orchestration.history import CONTACT_BACKFILL_JOB
from brb_pipeline.orchestration.resources import BrbSettings, Runtime
from brb_pipeline.orchestration.results import safe_metadata
from brb_pipeline.orchestration.runner import run_ingest

ingest_job = dg.define_asset_job("ingest_job", selection=INGEST_ASSETS,
                                 description="Snapshot the sources, parse, resolve contacts, register batches.")
batch_job = dg.define_asset_job("batch_job", selection=BATCH_ASSETS, partitions_def=contact_batches_partitions,
                                description="Chunk and embed one contact batch, distil its topics and profiles.")
finalize_job = dg.define_asset_job("finalize_job", selection=FINALIZE_ASSETS,
                                   description="Load the store, build indexes, redraw the insights map.")


class ContactBackfillConfig(dg.Config):
    contact: str = Field(default="", description="A person (display name, part of one, a handle or an id): their "
                                                 "1:1 and group conversations are re-run; or a group chat's name.")
    partitions: list[str] = Field(default=[], description="Instead of `contact`: these partitions (batch-NNN), as "
                                                          "`brb people --partitions` or the person finder of `brb ui` "
                                                          "gives them; keeps the name out of Dagster's storage.")
    insights: bool = Field(default=True, description="Also redraw the insights map.")
    reembed: bool = Field(default=False, description="Embed the person's batch again instead of reusing vectors.")


def backfill_contact(s: Settings, contact: str, *, partitions: list[str] | None = None,
                     progress: Progress | None = None,
                     cancel: CancelToken | None = None, load_embedder: Callable[[Settings], Any] | None = None,
                     insights: bool = True, reembed: bool = False,
                     run_tags: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``contact``'s batch and the finalize step; returns ``run_ingest``'s summary.

    Args:
        load_embedder: gives the embedder, called only once the name is resolved (a mistyped
            name does not wait for a model to load); default: the one the settings name.
        partitions: instead of ``contact`` (then ""): the batches to re-run, by partition key.
        run_tags: tags on each run it starts (the UI's: ``brb/source: ui`` and the parent run).

    Raises:
        BrbError: nothing ingested yet, no (or more than one) contact matches ``contact``, or
            neither or both of ``contact`` and ``partitions`` given, or an unknown partition.
    """
    from brb_pipeline.core.contacts.people_db import person_contact_ids

    if not s.brb_db.exists():
        raise BrbError(f"nothing ingested in {s.home}: run `brb ingest` (or materialize all) first")
    if bool(contact.strip()) == bool(partitions):
        raise BrbError("give either `contact` (a name) or `partitions` (batch keys), not both or neither")
    if partitions:
        ids = _batch_contact_ids(s, partitions)
    else:
        ids = person_contact_ids(s.brb_db, [contact], default_region=s.default_region)  # their 1:1 and groups
    return run_ingest(s, progress=progress, cancel=cancel, only_contacts=ids,
                      embedder=load_embedder(s) if load_embedder else None, analyze=insights, reembed=reembed,
                      run_tags=run_tags)


def _batch_contact_ids(s: Settings, partitions: list[str]) -> list[str]:
    """The contact ids of the given batches (re-running them re-runs those batches)."""
    from brb_pipeline.core import metadata

    batch_of = {r["contact_id"]: r["batch"] for r in metadata.contact_rows(s.brb_db)}
    unknown = sorted(set(partitions) - set(batch_of.values()))
    if unknown:
        raise BrbError(f"no partition {', '.join(unknown)}: see `brb people --partitions`")
    return sorted(c for c, b in batch_of.items() if b in set(partitions))


def _child_tags(context: dg.OpExecutionContext) -> dict[str, str]:
    """Tags of the runs a UI backfill starts: launched from the UI, by this run (no name: a tag
    outlives a delete in Dagster's run storage, and the person is in this run's config only)."""
    source = "ui" if context.run.tags.get("brb/source") != "cli" else "cli"
    return {"brb/source": source, "brb/parent_run": context.run_id, "brb/parent_job": context.job_name}


@dg.op(description="Resolve `contact` and run that person's batch (chunks, embeddings), then the store, "
                   "indexes and insights.")
def backfill_contact_op(context: dg.OpExecutionContext, config: ContactBackfillConfig, brb: BrbSettings,
                        runtime: dg.ResourceParam[Runtime]) -> dg.Output[None]:
    s = brb.load()
    # in the UI nothing listens to the runtime's progress: it goes to the run's log
    progress = runtime.progress if runtime.progress.sinks else Progress([LoggerSink(context.log)])
    try:
        summary = backfill_contact(s, config.contact, partitions=list(config.partitions), progress=progress, cancel=runtime.cancel,
                                   load_embedder=runtime.embedder, insights=config.insights, reembed=config.reembed,
                                   run_tags=_child_tags(context))
    except BrbError as e:  # the UI shows the description, not a traceback
        raise dg.Failure(description=f"brb: error: {e}", allow_retries=False) from None
    # batch keys and counts only: the person's name is in the run config, never in metadata
    return dg.Output(None, metadata=safe_metadata(s, {
        "batches_processed": ", ".join(summary["batches_processed"]) or "none",
        "chunks": summary["chunks"],
        "store_changed": summary["store_changed"],
        "brb_run": summary["run_id"],
        "seconds": summary["timings"].get("total", 0.0),
    }))


@dg.job(name=CONTACT_BACKFILL_JOB,
        description="Re-run one person: config `contact: \"Name\"` (a name, handle or contact id), or "
                    "`partitions: [batch-003]` (no name kept in Dagster: find them with `brb people --partitions` "
                    "or the person finder `brb ui` prints).")
def contact_backfill_job():
    backfill_contact_op()


ALL_JOBS = [ingest_job, batch_job, finalize_job, contact_backfill_job]
