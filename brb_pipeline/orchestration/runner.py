"""Headless runs of the asset graph, in-process: the `brb` CLI and host apps use this.

The same assets the Dagster UI materializes run here through ``dagster.materialize`` against the
home dir's Dagster instance (so the UI shows CLI runs and the batch partitions), in three steps:
the unpartitioned ingestion assets, one run per contact batch that changed, then the store,
indexes and insights. Cancellation is checked between batches and inside embedding.

What a run reports is what happened: a check of ERROR severity that fails fails the run (its name
and numbers in the error), WARN ones come back as warnings; a step's failure comes back as the
library error it raised, with Dagster's trace in ``<home>/logs/ingest-<run>.log`` instead of on
the terminal. A run whose process died (kill -9, a crash, a power cut) holds nothing: before each
run, brb marks such runs interrupted in brb.db and failed in Dagster, and frees the concurrency
slots they held, so the next run never waits for a dead one.

The rest of the orchestration a run uses lives beside it: the instance and dead runs in
:mod:`.instance`, what a result means in :mod:`.outcome`, forget's clean-up of Dagster's
history in :mod:`.history`, the graph and the jobs' selections in :mod:`.graph`.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

from brb_pipeline.config.settings import Settings
from brb_pipeline.core import metadata
from brb_pipeline.core.errors import CancelledError, CheckFailedError
from brb_pipeline.core.progress import CancelToken, Progress
from brb_pipeline.keys import provider as keys
from brb_pipeline.orchestration.assets.ingest import parsed_messages
from brb_pipeline.orchestration.assets.insights import insights_map
from brb_pipeline.orchestration.assets.memory import batch_topics, person_profiles
from brb_pipeline.orchestration.assets.store import chunk_store
from brb_pipeline.orchestration.graph import (ALL_DEFS, BATCH_ASSETS, FINALIZE_ASSETS, INGEST_ASSETS,
                                              MEMORY_ASSETS, STORE_ASSETS, resources)
from brb_pipeline.orchestration.history import wipe_derived_events
from brb_pipeline.orchestration.instance import instance_for, reclaim_dead_runs
from brb_pipeline.orchestration.outcome import RunLog, asset_metadata, read_checks, step_failure
from brb_pipeline.orchestration.resources import Runtime
from brb_pipeline.stages import homelock, memory
from brb_pipeline.stages.incremental import force_batches, pending_work

log = logging.getLogger("brb")

# Dagster's console logger prints every step event at DEBUG and a failed step's trace at ERROR;
# headless runs show progress bars and one error line instead (the events are still in the
# instance's event log for the UI, traces in <home>/logs). BRB_DAGSTER_LOG=DEBUG brings them back.
DAGSTER_CONSOLE_LEVEL = os.environ.get("BRB_DAGSTER_LOG", "CRITICAL").upper()


#: ``workspace.yaml``'s code location; a Definitions object's repository is ``__repository__``.
CODE_LOCATION = "brb_pipeline"


def _attach_to_code_location(instance: dg.DagsterInstance, run_id: str, job: str) -> None:
    """Record an in-process run as a run of ``job`` in the UI's code location.

    ``execute_in_process`` stores a run without a code-location origin, and the UI's Overview
    timeline (and a job's Runs tab) leave such runs out. The origin named here is what
    ``brb ui`` loads from ``workspace.yaml``. Best effort: a Dagster that changed this storage
    call only loses the runs from the timeline, never the ingestion.
    """
    try:
        from dagster._core.definitions.repository_definition import SINGLETON_REPOSITORY_NAME
        from dagster._core.remote_origin import (
            ManagedGrpcPythonEnvCodeLocationOrigin,
            RemoteJobOrigin,
            RemoteRepositoryOrigin,
        )
        from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

        location = ManagedGrpcPythonEnvCodeLocationOrigin(
            LoadableTargetOrigin(executable_path=sys.executable, module_name="brb_pipeline.orchestration.definitions"),
            location_name=CODE_LOCATION)
        run = instance.get_run_by_id(run_id)
        if run is not None and run.remote_job_origin is None:
            instance.run_storage.replace_job_origin(
                run, RemoteJobOrigin(RemoteRepositoryOrigin(location, SINGLETON_REPOSITORY_NAME), job))
    except Exception as e:  # noqa: BLE001 - the run itself succeeded or failed on its own
        log.debug("Dagster - could not attach run %s to the code location (%s)", run_id, type(e).__name__)


def _process_tags(run_id: str) -> dict[str, str]:
    pid = os.getpid()
    return {"brb/run": run_id, "brb/pid": str(pid), "brb/process_start": metadata.process_start(pid) or "",
            "brb/host": socket.gethostname()}


class _Run:
    """One headless ingestion: its settings and runtime, the Dagster instance, its row in brb.db,
    its log and the seconds each step took."""

    def __init__(self, s: Settings, runtime: Runtime) -> None:
        self.s, self.runtime = s, runtime
        self.instance = instance_for(s)
        s.save()
        reclaim_dead_runs(s, self.instance)
        self.t0 = time.perf_counter()
        self.timings: dict[str, float] = {}
        self.run_id = metadata.start_run(s.brb_db, str(s.snapshot_dir))
        self.log = RunLog(s, self.run_id)
        self.memory: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])  # topics, profiles metadata

    @contextmanager
    def timed(self, step: str) -> Iterator[None]:
        t = time.perf_counter()
        yield
        self.timings[step] = round(time.perf_counter() - t, 3)

    def materialize(self, job: str, selection: dg.AssetSelection, partition_key: str | None = None
                    ) -> dg.ExecuteInProcessResult:
        """One Dagster run of ``selection``, named ``job`` (what it does, as the UI's runs list and
        timeline show it); a failed ERROR check or step raises its library error."""
        defs = dg.Definitions(assets=ALL_DEFS, jobs=[dg.define_asset_job(job, selection=selection)],
                              resources=resources(home=str(self.s.home), runtime=self.runtime))
        result = defs.resolve_job_def(job).execute_in_process(
            instance=self.instance, partition_key=partition_key, raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": DAGSTER_CONSOLE_LEVEL}}}},
            tags={"brb/source": "cli", **_process_tags(self.run_id), **self.runtime.run_tags})
        _attach_to_code_location(self.instance, result.run_id, job)
        errors = read_checks(result, self.log, self.runtime.progress)
        if errors:
            raise CheckFailedError("; ".join(errors) + " (the previous store is kept)")
        if not result.success:
            raise step_failure(result, self.log)
        return result

    def finish(self, status: str, error: BaseException | None = None, stats: dict[str, Any] | None = None) -> None:
        """Record the run's end in brb.db (with its check warnings unless it was cancelled)."""
        if self.log.warnings and status != "cancelled":
            metadata.set_run_warnings(self.s.brb_db, self.run_id, self.log.warnings)
        if error is None:
            metadata.finish_run(self.s.brb_db, self.run_id, status=status, timings=self.timings, stats=stats)
        else:
            message = str(error) if status == "cancelled" else str(error)[:500]
            metadata.finish_run(self.s.brb_db, self.run_id, status=status, timings=self.timings, error=message)


def run_ingest(
    s: Settings,
    *,
    progress: Progress | None = None,
    cancel: CancelToken | None = None,
    only_contacts: list[str] | None = None,
    embedder: Any | None = None,
    analyze: bool = True,
    reembed: bool = False,
    generator: Any | None = None,
    run_tags: dict[str, str] | None = None,
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
        generator: the distilled memory's text generator (default: ``llm_model_path``'s).
    """
    _guard_sources(s)
    progress = progress or Progress()
    cancel = cancel or CancelToken()
    with homelock.hold(s.home, cancelled=lambda: cancel.cancelled, on_wait=lambda m: progress.log("warning", m)):
        return _locked_ingest(s, progress, cancel, only_contacts, embedder, analyze, reembed, generator, run_tags)


def _locked_ingest(s: Settings, progress: Progress, cancel: CancelToken, only_contacts: list[str] | None,
                   embedder: Any | None, analyze: bool, reembed: bool, generator: Any | None,
                   run_tags: dict[str, str] | None = None) -> dict[str, Any]:
    """:func:`run_ingest` once the home's writer lock is held."""
    keys.prepare_home(s)  # the home's mode and key, before brb.db records the run
    from brb_pipeline.privacy.forget import finish_pending

    finish_pending(s, finish=lambda s_: {"dagster_events_wiped": wipe_derived_events(s_)})  # a killed `brb forget`
    _rebuild_damaged_store(s)
    runtime = Runtime(progress, cancel, embedder, reembed=reembed, generator=generator, run_tags=run_tags)
    run = _Run(s, runtime)
    stop_forwarding = progress.forward_logs()  # pipeline warnings reach JSON lines, not only stderr
    try:
        parsed = _ingest(run)
        todo, batches = _run_batches(run, only_contacts, reembed)
        runtime.cancel.check()
        with run.timed("finalize"):
            r = run.materialize("finalize_job", FINALIZE_ASSETS) if analyze \
                else run.materialize("store_job", STORE_ASSETS)
        run.timings["total"] = round(time.perf_counter() - run.t0, 3)
        store_meta = asset_metadata(r, chunk_store)
        summary = {
            "run_id": run.run_id,
            "messages": int(parsed.get("messages", 0)),
            "batches": batches,
            "batches_processed": todo,
            "chunks": int(store_meta.get("chunks", 0)),
            "store_changed": bool(store_meta.get("changed", False)),
            "embedding_device": runtime.embedder(s).device if todo else None,
            "memory": memory.run_summary(s, *run.memory),
            "map": asset_metadata(r, insights_map).get("html"),
            "warnings": run.log.warnings,
            "timings": run.timings,
        }
        run.finish("success", stats={**_parse_stats(parsed),
                                     **{k: v for k, v in summary.items() if k not in ("timings", "warnings")}})
        return summary
    except CancelledError as e:
        run.finish("cancelled", e)
        raise
    except BaseException as e:
        run.finish("failed", e)
        raise
    finally:
        stop_forwarding()


def _rebuild_damaged_store(s: Settings) -> None:
    """A brb.duckdb that cannot be read is deleted: this run's load rebuilds it from staging."""
    from brb_pipeline.stages import repair

    damage = repair.store_damage(s, full=False)
    if damage:
        log.warning("brb - %s is damaged (%s); rebuilding it from staging", s.duckdb_path.name, damage)
        repair.prepare_store_rebuild(s)


def _guard_sources(s: Settings) -> None:
    """Refuse a home inside a source folder (missing source files are the snapshot's to report)."""
    from brb_pipeline.sources.snapshot import check_destination

    sources = [p for p in (s.chat_db, s.whatsapp_db if s.whatsapp_enabled else None)
               if p and Path(p).expanduser().exists()]
    check_destination(s.home, [Path(p).expanduser().parent for p in sources]
                      + ([s.addressbook_dir] if s.addressbook_dir else []))


def _parse_stats(parsed: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in parsed.items() if k.startswith(("stat_", "pct_"))}


def _ingest(run: _Run) -> dict[str, Any]:
    """Snapshot, parse, contacts and batches in one Dagster run; the parse numbers go to brb.db.

    Returns:
        ``parsed_messages``' metadata.
    """
    with run.timed("ingest"):
        r = run.materialize("ingest_job", INGEST_ASSETS)
    parsed = asset_metadata(r, parsed_messages)
    metadata.update_run_stats(run.s.brb_db, run.run_id, messages=int(parsed.get("messages", 0)),
                              first_ts=parsed.get("first_ts"), last_ts=parsed.get("last_ts"),
                              stats=_parse_stats(parsed))
    return parsed


def _run_batches(run: _Run, only_contacts: list[str] | None, reembed: bool) -> tuple[list[str], int]:
    """One Dagster run per batch :func:`pending_work` lists (after forcing ``only_contacts``'
    batches, or every batch with ``reembed``), cancel checked between them.

    Returns:
        (the batches processed, how many batches there are).
    """
    s, runtime = run.s, run.runtime
    force_batches(s, only_contacts, every=reembed)
    todo = pending_work(s, runtime.embedder(s).model_id)["to_embed"]
    batches = len(metadata.all_batches(s.brb_db))
    with run.timed("batches"):
        runtime.batches.start(s, todo)
        for b in todo:
            runtime.cancel.check()
            _keep_memory(run, run.materialize("batch_job", BATCH_ASSETS, partition_key=b))
        runtime.batches.finish(unchanged=batches - len(todo))
    with run.timed("memory"):  # batches whose chunks did not change but whose model or prompt did
        gen = runtime.generator(s)
        for b in memory.pending(s, [r["batch"] for r in metadata.all_batches(s.brb_db)], gen and gen.model_id):
            runtime.cancel.check()
            _keep_memory(run, run.materialize("memory_job", MEMORY_ASSETS, partition_key=b))
    return todo, batches


def _keep_memory(run: _Run, result: dg.ExecuteInProcessResult) -> None:
    """Keep a batch run's memory metadata (topics, profiles) for the run's summary."""
    for kept, asset in zip(run.memory, (batch_topics, person_profiles)):
        meta = asset_metadata(result, asset)
        if meta:
            kept.append(meta)
