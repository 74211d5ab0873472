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
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

from brb_pipeline.orchestration.assets.groups import INGEST, INSIGHTS, PER_BATCH, STORE
from brb_pipeline.orchestration.resources import Runtime
from brb_pipeline.core import metadata
from brb_pipeline.core import errors as errors_mod
from brb_pipeline.core.errors import BrbError, CancelledError, CheckFailedError
from brb_pipeline.core.progress import CancelToken, Progress
from brb_pipeline.stages import homelock, memory
from brb_pipeline.keys import provider as keys
from brb_pipeline.stages.incremental import force_batches, pending_work
from brb_pipeline.config.settings import Settings

log = logging.getLogger("brb")

#: Library errors by class name, to give back the error a failed step raised.
BRB_ERRORS = {name: cls for name, cls in vars(errors_mod).items()
              if isinstance(cls, type) and issubclass(cls, BrbError)}

# Dagster's console logger prints every step event at DEBUG and a failed step's trace at ERROR;
# headless runs show progress bars and one error line instead (the events are still in the
# instance's event log for the UI, traces in <home>/logs). BRB_DAGSTER_LOG=DEBUG brings them back.
DAGSTER_CONSOLE_LEVEL = os.environ.get("BRB_DAGSTER_LOG", "CRITICAL").upper()

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
  runs:
    max_concurrent_runs: 2
run_monitoring:
  enabled: true
"""


def instance_for(s: Settings) -> dg.DagsterInstance:
    """The Dagster instance under ``<home>/dagster`` (created on first use)."""
    home = s.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    cfg = s.paths.dagster_config
    if not cfg.exists():
        cfg.write_text(INSTANCE_YAML.format(base=str(home)))
    os.environ["DAGSTER_HOME"] = str(home)
    return dg.DagsterInstance.from_config(str(home))


class RunLog:
    """What one ingestion's Dagster runs reported: check warnings, and where failures are written."""

    def __init__(self, s: Settings, run_id: str) -> None:
        self.run_id = run_id
        self.path = s.paths.run_log(run_id)
        self.warnings: list[dict[str, Any]] = []

    def write(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(text.rstrip() + "\n")


def _meta(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, Any]:
    for ev in result.get_asset_materialization_events():
        mat = ev.event_specific_data.materialization
        if mat.asset_key.to_user_string() == asset:
            return {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return {}


def _numbers(metadata_: Any) -> str:
    return ", ".join(f"{k} {getattr(v, 'value', v)}" for k, v in list(metadata_.items())[:6])


def _read_checks(result: dg.ExecuteInProcessResult, run_log: RunLog, progress: Progress) -> list[str]:
    """Failed ERROR checks as one-line descriptions; failed WARN checks become warnings."""
    errors = []
    for ev in result.get_asset_check_evaluations():
        if ev.passed:
            continue
        line = f"check {ev.asset_key.to_user_string()}:{ev.check_name} failed ({_numbers(ev.metadata)})"
        if ev.severity == dg.AssetCheckSeverity.ERROR:
            errors.append(line)
        else:
            run_log.warnings.append({"check": ev.check_name, "asset": ev.asset_key.to_user_string(),
                                     **{k: getattr(v, "value", v) for k, v in ev.metadata.items()}})
            progress.log("warning", line)
    return errors


def _step_failure(result: dg.ExecuteInProcessResult, run_log: RunLog) -> BrbError:
    """The library error a failed step raised (rebuilt from Dagster's record of it), its trace logged."""
    failures = [ev for ev in result.all_events if ev.event_type_value == "STEP_FAILURE"]
    for ev in failures:
        run_log.write(f"step {ev.step_key} failed:\n{ev.step_failure_data.error.to_string()}")
    if not failures:
        run_log.write(f"run {result.run_id} failed without a step failure")
        return BrbError(f"the run failed; details in {run_log.path}")
    ev = failures[0]
    err = ev.step_failure_data.error
    while err is not None:
        cls = BRB_ERRORS.get(err.cls_name or "")
        if cls is not None:
            return cls(err.message.split(": ", 1)[-1].strip())
        err = err.cause
    top = ev.step_failure_data.error
    inner = top.cause or top
    first = inner.message.split(": ", 1)[-1].strip().splitlines()
    return BrbError(f"step {ev.step_key} failed ({inner.cls_name}: {(first[0] if first else '')[:200]}); "
                    f"details in {run_log.path}")


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
    import socket

    pid = os.getpid()
    return {"brb/run": run_id, "brb/pid": str(pid), "brb/process_start": metadata.process_start(pid) or "",
            "brb/host": socket.gethostname()}


_IN_PROGRESS = ("NOT_STARTED", "STARTING", "STARTED", "CANCELING")


def reclaim_dead_runs(s: Settings, instance: dg.DagsterInstance | None = None) -> dict[str, int]:
    """Settle runs whose process is gone: interrupted in brb.db, failed in Dagster, slots freed.

    A run killed with SIGKILL cannot say it ended. Left alone it stays "running" forever and
    keeps its ``brb_duckdb`` concurrency slot, and Dagster's executor waits for that slot in every
    later run. Only runs started by brb on this machine are judged (their tags name the process);
    slots held by runs that Dagster already records as finished are freed too.
    """
    import socket

    settled = metadata.settle_dead_runs(s.brb_db)
    instance = instance or instance_for(s)
    host = socket.gethostname()
    failed = freed = 0
    statuses = [getattr(dg.DagsterRunStatus, name) for name in _IN_PROGRESS]
    runs = [r for source in ("cli", "ui")  # "ui": children of a backfill launched in the UI
            for r in instance.get_runs(filters=dg.RunsFilter(statuses=statuses, tags={"brb/source": source}))]
    for run in runs:
        tags = run.tags
        if tags.get("brb/host") != host or not tags.get("brb/pid"):
            continue
        if metadata.process_alive(int(tags["brb/pid"]), tags.get("brb/process_start") or None):
            continue
        instance.report_run_failed(run, "the brb process running it is gone (killed or crashed)")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        failed += 1
    for run_id in instance.event_log_storage.get_concurrency_run_ids():
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            instance.event_log_storage.free_concurrency_slots_for_run(run_id)
            freed += 1
    if settled or failed or freed:
        log.warning("brb - settled %d interrupted run(s); freed the Dagster slots of %d", len(settled), failed + freed)
    return {"interrupted": len(settled), "dagster_failed": failed, "slots_freed": failed + freed}


def abandon_own_runs(s: Settings, reason: str) -> None:
    """Record this process's runs as cancelled (brb.db and Dagster) before it exits mid-step."""
    pid = os.getpid()
    with metadata.connect(s.brb_db) as c:
        c.execute("UPDATE ingestion_runs SET status = 'cancelled', finished_at = ?, error = ? "
                  "WHERE status = 'running' AND pid = ?", (time.time(), reason, pid))
    instance = instance_for(s)
    statuses = [getattr(dg.DagsterRunStatus, name) for name in _IN_PROGRESS]
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=statuses, tags={"brb/pid": str(pid)})):
        instance.report_run_canceled(run, reason)
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)


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
        from brb_pipeline.orchestration.definitions import ALL_DEFS, resources

        defs = dg.Definitions(assets=ALL_DEFS, jobs=[dg.define_asset_job(job, selection=selection)],
                              resources=resources(home=str(self.s.home), runtime=self.runtime))
        result = defs.resolve_job_def(job).execute_in_process(
            instance=self.instance, partition_key=partition_key, raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": DAGSTER_CONSOLE_LEVEL}}}},
            tags={"brb/source": "cli", **_process_tags(self.run_id), **self.runtime.run_tags})
        _attach_to_code_location(self.instance, result.run_id, job)
        errors = _read_checks(result, self.log, self.runtime.progress)
        if errors:
            raise CheckFailedError("; ".join(errors) + " (the previous store is kept)")
        if not result.success:
            raise _step_failure(result, self.log)
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
            r = run.materialize("finalize_job", dg.AssetSelection.groups(STORE, INSIGHTS)) if analyze \
                else run.materialize("store_job", dg.AssetSelection.groups(STORE))
        run.timings["total"] = round(time.perf_counter() - run.t0, 3)
        store_meta = _meta(r, "chunk_store")
        summary = {
            "run_id": run.run_id,
            "messages": int(parsed.get("messages", 0)),
            "batches": batches,
            "batches_processed": todo,
            "chunks": int(store_meta.get("chunks", 0)),
            "store_changed": bool(store_meta.get("changed", False)),
            "embedding_device": runtime.embedder(s).device if todo else None,
            "memory": memory.run_summary(s, *run.memory),
            "map": _meta(r, "insights_map").get("html"),
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
        r = run.materialize("ingest_job", dg.AssetSelection.groups(INGEST))
    parsed = _meta(r, "parsed_messages")
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
            _keep_memory(run, run.materialize("batch_job", dg.AssetSelection.groups(PER_BATCH), partition_key=b))
        runtime.batches.finish(unchanged=batches - len(todo))
    with run.timed("memory"):  # batches whose chunks did not change but whose model or prompt did
        gen = runtime.generator(s)
        for b in memory.pending(s, [r["batch"] for r in metadata.all_batches(s.brb_db)], gen and gen.model_id):
            runtime.cancel.check()
            _keep_memory(run, run.materialize("memory_job", dg.AssetSelection.assets("batch_topics", "person_profiles"),
                                              partition_key=b))
    return todo, batches


def _keep_memory(run: _Run, result: dg.ExecuteInProcessResult) -> None:
    """Keep a batch run's memory metadata (topics, profiles) for the run's summary."""
    for kept, asset in zip(run.memory, ("batch_topics", "person_profiles")):
        meta = _meta(result, asset)
        if meta:
            kept.append(meta)


DERIVED_TEXT_ASSETS = ("cluster_labels", "insights_map", "clusters")
#: Assets whose metadata names people (``contact_batches``' table of who is in which batch).
PEOPLE_ASSETS = ("contact_batches",)


def wipe_derived_events(s: Settings) -> int:
    """Delete from ``<home>/dagster`` what ``brb forget`` must not leave there: the event history
    of assets whose metadata is derived from message text (cluster labels, the cluster table) or
    names people (``PEOPLE_ASSETS``), and the runs of jobs whose run config names a person
    (``contact_backfill_job``), compute logs included.

    Dagster's ``wipe_assets`` keeps the run-sharded copies of the events (and the step output
    events carrying the same metadata) and plain SQLite deletes keep the bytes in free pages, so
    those rows are deleted here too and every database touched is vacuumed.

    Returns:
        The number of asset keys wiped.

    Raises:
        BrbError: Dagster's databases are locked (``brb ui`` running).
    """
    import shutil
    import sqlite3

    from brb_pipeline.orchestration.jobs import PERSON_JOBS

    if not s.paths.dagster_config.exists():
        return 0
    instance = instance_for(s)
    names = [*DERIVED_TEXT_ASSETS, *PEOPLE_ASSETS]
    keys = [dg.AssetKey(k) for k in names]
    instance.wipe_assets(keys)
    history = s.paths.dagster_history
    shards = history / "runs"
    for job in PERSON_JOBS:
        for run in instance.get_runs(filters=dg.RunsFilter(job_name=job)):
            instance.delete_run(run.run_id)
            for suffix in (".db", ".db-wal", ".db-shm"):
                (shards / f"{run.run_id}{suffix}").unlink(missing_ok=True)
            shutil.rmtree(s.paths.dagster_run_files(run.run_id), ignore_errors=True)
    instance.dispose()
    marks = ",".join("?" * len(names))
    params = [k.to_string() for k in keys] + names
    try:
        for db in sorted(shards.glob("*.db")) + [history / "runs.db"]:
            con = sqlite3.connect(db, timeout=10)
            try:
                deleted = 0
                if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'event_logs'").fetchone():
                    deleted = con.execute(
                        f"DELETE FROM event_logs WHERE asset_key IN ({marks}) OR (step_key IN ({marks}) "
                        "AND dagster_event_type IN ('STEP_OUTPUT', 'ASSET_MATERIALIZATION'))", params).rowcount
                    con.commit()
                if deleted or db.name in ("index.db", "runs.db"):  # wiped rows and deleted runs' bytes
                    con.execute("VACUUM")
                con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                con.close()
    except sqlite3.OperationalError as e:
        raise BrbError(f"could not clean Dagster's history in {s.dagster_home} ({e}): "
                       "close `brb ui` and run `brb forget` again") from None
    return len(keys)
