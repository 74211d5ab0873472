"""The home's Dagster instance: its configuration (declared once, here), opening it, and settling
runs whose process died.

``<home>/dagster/dagster.yaml`` is written from :data:`INSTANCE_CONFIG` whenever it differs (a
home made by an older brb gets the current settings on its next run); ``brb ui``,
``brb ingest`` and the tests all open the instance through :func:`instance_for`. There is no
second copy in the repository: ``dagster dev``/``dagster-webserver`` run by hand need
``DAGSTER_HOME=<home>/dagster``, which holds this file.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

from brb_pipeline.config.settings import Settings
from brb_pipeline.core import metadata

log = logging.getLogger("brb")

#: The instance's settings (``{base}`` is ``<home>/dagster``). brb.duckdb allows one writer:
#: every asset that writes it is in the ``brb_duckdb`` pool, limited to 1 here, so parallel
#: backfills queue instead of failing on the file lock. ``run_monitoring``: a run whose worker
#: died is marked failed by the daemon (``brb ingest`` settles its own with
#: :func:`reclaim_dead_runs`). Declarative automation runs through sensors (Dagster's default).
INSTANCE_CONFIG: dict[str, Any] = {
    "storage": {"sqlite": {"base_dir": "{base}"}},
    "local_artifact_storage": {"module": "dagster._core.storage.root", "class": "LocalArtifactStorage",
                               "config": {"base_dir": "{base}"}},
    "telemetry": {"enabled": False},
    "concurrency": {"pools": {"default_limit": 1}, "runs": {"max_concurrent_runs": 2}},
    "run_monitoring": {"enabled": True},
    "auto_materialize": {"use_sensors": True},
}


def instance_yaml(base: Path) -> str:
    """:data:`INSTANCE_CONFIG` as the ``dagster.yaml`` of an instance under ``base``."""
    def fill(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        return str(base) if v == "{base}" else v

    return "# Written by brb from orchestration/instance.py: edits here are replaced.\n" + yaml.safe_dump(
        fill(INSTANCE_CONFIG), sort_keys=False)


def instance_for(s: Settings) -> dg.DagsterInstance:
    """The Dagster instance under ``<home>/dagster`` (created on first use, its ``dagster.yaml``
    rewritten when it is not :func:`instance_yaml`'s)."""
    home = s.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    cfg = s.paths.dagster_config
    text = instance_yaml(home)
    if not cfg.exists() or cfg.read_text() != text:
        cfg.write_text(text)
    os.environ["DAGSTER_HOME"] = str(home)
    return dg.DagsterInstance.from_config(str(home))


_IN_PROGRESS = ("NOT_STARTED", "STARTING", "STARTED", "CANCELING")


def _in_progress() -> list[dg.DagsterRunStatus]:
    return [getattr(dg.DagsterRunStatus, name) for name in _IN_PROGRESS]


def reclaim_dead_runs(s: Settings, instance: dg.DagsterInstance | None = None) -> dict[str, int]:
    """Settle runs whose process is gone: interrupted in brb.db, failed in Dagster, slots freed.

    A run killed with SIGKILL cannot say it ended. Left alone it stays "running" forever and
    keeps its ``brb_duckdb`` concurrency slot, and Dagster's executor waits for that slot in every
    later run. Only runs started by brb on this machine are judged (their tags name the process);
    slots held by runs that Dagster already records as finished are freed too.
    """
    settled = metadata.settle_dead_runs(s.brb_db)
    instance = instance or instance_for(s)
    host = socket.gethostname()
    failed = freed = 0
    runs = [r for source in ("cli", "ui")  # "ui": children of a backfill launched in the UI
            for r in instance.get_runs(filters=dg.RunsFilter(statuses=_in_progress(), tags={"brb/source": source}))]
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
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=_in_progress(), tags={"brb/pid": str(pid)})):
        instance.report_run_canceled(run, reason)
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
