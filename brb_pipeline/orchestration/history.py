"""What ``brb forget`` takes out of the home's Dagster storage: the history of assets whose
metadata is derived from message text or names people, and the runs of jobs whose config names
a person."""

from __future__ import annotations

import shutil
import sqlite3

import dagster as dg

from brb_pipeline.config.settings import Settings
from brb_pipeline.core.errors import BrbError
from brb_pipeline.orchestration.assets.ingest import contact_batches
from brb_pipeline.orchestration.assets.insights import cluster_labels, clusters, insights_map
from brb_pipeline.orchestration.instance import instance_for

#: Assets whose metadata is derived from message text (cluster labels, the cluster table).
DERIVED_TEXT_ASSETS = (cluster_labels, insights_map, clusters)
#: Assets whose metadata names people (``contact_batches``' table of who is in which batch).
PEOPLE_ASSETS = (contact_batches,)
#: Jobs whose run config names a person (``jobs.contact_backfill_job`` takes this name).
CONTACT_BACKFILL_JOB = "contact_backfill_job"
PERSON_JOBS = (CONTACT_BACKFILL_JOB,)


def wipe_derived_events(s: Settings) -> int:
    """Delete from ``<home>/dagster`` what ``brb forget`` must not leave there: the event history
    of :data:`DERIVED_TEXT_ASSETS` and :data:`PEOPLE_ASSETS`, and the runs of
    :data:`PERSON_JOBS`, compute logs included.

    Dagster's ``wipe_assets`` keeps the run-sharded copies of the events (and the step output
    events carrying the same metadata) and plain SQLite deletes keep the bytes in free pages, so
    those rows are deleted here too and every database touched is vacuumed.

    Returns:
        The number of asset keys wiped.

    Raises:
        BrbError: Dagster's databases are locked (``brb ui`` running).
    """
    if not s.paths.dagster_config.exists():
        return 0
    instance = instance_for(s)
    keys = [a.key for a in (*DERIVED_TEXT_ASSETS, *PEOPLE_ASSETS)]
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
    try:
        for db in sorted(shards.glob("*.db")) + [history / "runs.db"]:
            _delete_events(db, keys)
    except sqlite3.OperationalError as e:
        raise BrbError(f"could not clean Dagster's history in {s.dagster_home} ({e}): "
                       "close `brb ui` and run `brb forget` again") from None
    return len(keys)


def _delete_events(db, keys: list[dg.AssetKey]) -> None:
    """Delete the events of ``keys`` (and their steps' outputs) from one event database, vacuumed."""
    steps = [k.to_user_string() for k in keys]  # an asset's step is named after it
    marks = ",".join("?" * len(keys))
    con = sqlite3.connect(db, timeout=10)
    try:
        deleted = 0
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'event_logs'").fetchone():
            deleted = con.execute(
                f"DELETE FROM event_logs WHERE asset_key IN ({marks}) OR (step_key IN ({marks}) "
                "AND dagster_event_type IN ('STEP_OUTPUT', 'ASSET_MATERIALIZATION'))",
                [k.to_string() for k in keys] + steps).rowcount
            con.commit()
        if deleted or db.name in ("index.db", "runs.db"):  # wiped rows and deleted runs' bytes
            con.execute("VACUUM")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()
