"""Schedule and sensors: re-ingest on a cron or when chat.db changes, then chain the changed
batches and the finalize job, so the UI path is as incremental as `brb ingest`.

All of them are off by default (nothing ingests because the UI was opened); a user turns them on
in the Dagster UI under Automation, and the instance remembers it."""

import dagster as dg

from brb_pipeline.orchestration.assets.groups import contact_batches_partitions
from brb_pipeline.stages.incremental import pending_work
from brb_pipeline.config.settings import Settings
from brb_pipeline.sources.snapshot import mail_fingerprint, source_fingerprint


def _settings() -> Settings:
    return Settings.load()


_NOTHING_INGESTED = "nothing ingested yet: run ingest_job (or turn on source_change_sensor)"


def _batches(n: int) -> str:
    return f"{n} batch" if n == 1 else f"{n} batches"


def reingest_schedule(ingest_job) -> dg.ScheduleDefinition:
    try:
        cron = _settings().schedule_cron
    except Exception:  # a broken config.json must not break loading the UI
        cron = Settings.schedule_cron
    return dg.ScheduleDefinition(
        name="reingest_schedule", job=ingest_job, cron_schedule=cron,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Re-ingest on a schedule (off by default; cron from the schedule_cron setting).",
    )


def source_change_sensor(ingest_job) -> dg.SensorDefinition:
    @dg.sensor(name="source_change_sensor", job=ingest_job, minimum_interval_seconds=60,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description="Requests an ingestion when chat.db or its WAL (or an enabled WhatsApp or Mail store) changes "
                           "(off by default).")
    def _sensor(context: dg.SensorEvaluationContext):
        s = _settings()
        if not s.chat_db:
            return dg.SkipReason("no chat.db configured: run `brb ingest --chat-db PATH` once")
        parts = [source_fingerprint(s.chat_db)]
        if s.whatsapp_enabled and s.whatsapp_db:
            parts.append(source_fingerprint(s.whatsapp_db))
        if s.mail_enabled and s.mail_dir:  # Mail is never looked at unless it is on
            parts.append("mail=" + mail_fingerprint(s.mail_dir))
        fp = "|".join(parts)
        if context.cursor == fp:
            return dg.SkipReason("the sources are unchanged since the last ingestion this sensor requested")
        context.update_cursor(fp)
        return dg.RunRequest(run_key=fp, tags={"brb/trigger": "source_change"})

    return _sensor


def batches_sensor(batch_job) -> dg.SensorDefinition:
    @dg.sensor(name="changed_batches_sensor", job=batch_job, minimum_interval_seconds=30,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description="Runs the per-batch job for every contact batch whose messages changed (off by default).")
    def _sensor(context: dg.SensorEvaluationContext):
        s = _settings()
        if not s.brb_db.exists():
            return dg.SkipReason(_NOTHING_INGESTED)
        work = pending_work(s)
        known = set(context.instance.get_dynamic_partitions(contact_batches_partitions.name))
        todo = [b for b in work["to_embed"] if b in known]
        if not todo and work["to_embed"]:
            return dg.SkipReason(f"{_batches(len(work['to_embed']))} to embed but not registered as partitions yet: "
                                 "run ingest_job (or materialize contact_batches) first")
        if not todo:
            return dg.SkipReason("every batch is embedded: nothing to run")
        return [dg.RunRequest(run_key=f"{work['state']}:{b}", partition_key=b) for b in todo]

    return _sensor


def finalize_sensor(finalize_job) -> dg.SensorDefinition:
    @dg.sensor(name="finalize_sensor", job=finalize_job, minimum_interval_seconds=30,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description="Loads the store, rebuilds indexes and the map once all changed batches are embedded "
                           "(off by default).")
    def _sensor(context: dg.SensorEvaluationContext):
        s = _settings()
        if not s.brb_db.exists():
            return dg.SkipReason(_NOTHING_INGESTED)
        work = pending_work(s)
        if work["to_embed"]:
            return dg.SkipReason(f"{_batches(len(work['to_embed']))} still to embed (changed_batches_sensor "
                                 "or batch_job runs them); the store waits for all of them")
        if not work["to_load"]:
            return dg.SkipReason("the store is up to date: every embedded batch is loaded")
        return dg.RunRequest(run_key=work["state"])

    return _sensor
