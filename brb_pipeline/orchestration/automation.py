"""Declarative automation: which asset runs again, and why, said by Dagster's own conditions.

Every asset carries an ``AutomationCondition``; one sensor, :data:`AUTOMATION_SENSOR`, evaluates
them, and the UI shows each evaluation (Automation -> ``brb_automation``, or an asset's
Automation tab: which condition was true, which was not). The chain it drives:

1. ``message_sources`` (an observable source asset) is observed every minute
   (:data:`OBSERVE_SOURCES`); its data version is the sources' size/mtime fingerprint;
2. ``source_snapshot`` runs when that version changes (``eager``), or on the ``schedule_cron``
   tick (:func:`snapshot_condition`, e.g. to pick up AddressBook edits), and the rest of the
   ingestion assets follow it in the same run (``eager``);
3. ``contact_batches`` reports ``batch_content`` for each batch whose content or embedding
   settings changed: exactly those partitions of the per-batch assets run (``eager``), and a
   new batch runs because it is missing;
4. ``chunk_store`` waits until no batch is missing or in progress, then it, its indexes and the
   insights run (``eager``).

Two rules stay hand-written, because Dagster cannot express them: reading the source files'
sizes and mtimes (Dagster has no notion of a file outside its storage: the observation function
does it, Mail only when Mail is on), and which contact batch changed (the batches are partitions
of assets downstream of one unpartitioned asset, whose data version is one for all of them: the
per-batch decision is ``stages.incremental.pending_work``'s, reported as ``batch_content``).

Privacy: nothing reads messages in the background unless the user turned it on. The sensor is
created STOPPED and covers every asset (so Dagster makes no default sensor of its own); a user
starts it in the UI under Automation, and the instance remembers it, or sets ``schedule_enabled``
(``config.json`` or ``BRB_SCHEDULE_ENABLED=1``), which makes it start RUNNING.
"""

from __future__ import annotations

import dagster as dg

from brb_pipeline.config.settings import Settings

#: How often the sources' fingerprint is read while automation is on.
SOURCES_CRON = "* * * * *"

#: Re-run when an upstream asset (or partition) updates or a partition appears; never while an
#: upstream is missing or running.
EAGER = dg.AutomationCondition.eager()

OBSERVE_SOURCES = dg.AutomationCondition.cron_tick_passed(SOURCES_CRON).with_label("every minute")


def _schedule_cron() -> str:
    try:
        return Settings.load().schedule_cron
    except Exception:  # a broken config.json must not break loading the UI
        return Settings.schedule_cron


def snapshot_condition(cron: str | None = None) -> dg.AutomationCondition:
    """``eager`` (the sources changed) or the ``schedule_cron`` tick passed since last handled."""
    cron = cron or _schedule_cron()
    scheduled = (dg.AutomationCondition.cron_tick_passed(cron).since_last_handled()
                 & ~dg.AutomationCondition.in_progress()).with_label(f"schedule_cron {cron}")
    return (EAGER | scheduled).with_label("sources changed, or the schedule")


def _automation_on() -> bool:
    """The ``schedule_enabled`` setting of the home (``config.json`` or ``BRB_SCHEDULE_ENABLED``)."""
    try:
        return bool(Settings.load().schedule_enabled)
    except Exception:  # a broken config.json must not break loading the UI; off is the safe side
        return False


def automation_sensor(enabled: bool | None = None) -> dg.AutomationConditionSensorDefinition:
    """The one automation sensor: STOPPED unless the user set ``schedule_enabled`` (``enabled``
    None reads it). It is Dagster's *default* status: a choice made in the UI is stored in the
    instance and wins over it."""
    on = _automation_on() if enabled is None else enabled
    return dg.AutomationConditionSensorDefinition(
        "brb_automation",
        target=dg.AssetSelection.all(include_sources=True),  # the observable source too
        default_status=dg.DefaultSensorStatus.RUNNING if on else dg.DefaultSensorStatus.STOPPED,
        minimum_interval_seconds=30,
        run_tags={"brb/source": "automation"},
        description="Evaluates every asset's automation condition: re-ingests when the message sources change and "
                    "carries the changed batches through embedding, the store and the map (off by default: "
                    "nothing reads your messages in the background until you turn it on here, or set "
                    "schedule_enabled).",
    )


AUTOMATION_SENSOR = automation_sensor()
