"""Declarative automation: the conditions Dagster evaluates say what runs and why.

Nothing runs by itself: the one automation sensor is off until a user turns it on in the UI, and
it covers every asset, so Dagster adds no default sensor of its own. Under it, a change in
chat.db makes the ingestion assets run, then exactly the changed batch's partitions, then the
store; every tick is evaluated for real (``dg.evaluate_automation_conditions``) against the
Dagster instance of a home a real ingestion built, and the runs it asks for are executed for
real in between.
"""

from __future__ import annotations

import os
import warnings
from datetime import datetime, timedelta, timezone

import dagster as dg
import polars as pl
import pytest

from brb_pipeline.config.settings import Settings
from brb_pipeline.core import metadata
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline.orchestration.assets.ingest import message_sources, sources_fingerprint
from brb_pipeline.orchestration.definitions import defs
from brb_pipeline.orchestration.graph import resources
from brb_pipeline.orchestration.instance import instance_for
from brb_pipeline.orchestration.runner import run_ingest
from brb_pipeline.stages.incremental import pending_work

warnings.filterwarnings("ignore", category=dg.BetaWarning)

INGEST = {"source_snapshot", "parsed_messages", "contacts", "contact_batches"}
PER_BATCH = {"batch_chunks", "batch_embeddings", "batch_topics", "person_profiles"}
FINALIZE = {"chunk_store", "vector_index", "text_index", "projection", "clusters", "cluster_labels",
            "insights_map"}


def test_automation_is_off_until_the_user_turns_it_on():
    """One sensor, STOPPED, targeting every asset and the source: no schedule, no other sensor
    (Dagster would add a default automation sensor for any asset left out of it)."""
    repo = defs.get_repository_def()
    assert [(s.name, s.default_status) for s in repo.sensor_defs] == [
        ("brb_automation", dg.DefaultSensorStatus.STOPPED)]
    assert list(repo.schedule_defs) == []
    sensor = defs.get_sensor_def("brb_automation")
    assert isinstance(sensor, dg.AutomationConditionSensorDefinition)
    graph = defs.resolve_asset_graph()
    with_condition = {k for k in graph.get_all_asset_keys() if graph.get(k).automation_condition is not None}
    assert with_condition >= {dg.AssetKey(n) for n in INGEST | PER_BATCH | FINALIZE} | {message_sources.key}
    targeted = sensor.asset_selection.resolve(graph, allow_missing=False)
    assert with_condition <= targeted


def test_schedule_enabled_starts_the_sensor_running(tmp_path, monkeypatch):
    """The one switch a user can set outside the UI: ``schedule_enabled`` (config.json or
    BRB_SCHEDULE_ENABLED) makes the sensor's default RUNNING; unset, or a config that does not
    read, it stays STOPPED."""
    from brb_pipeline.orchestration import automation

    monkeypatch.setenv("BRB_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BRB_SCHEDULE_ENABLED", raising=False)
    assert automation.automation_sensor().default_status == dg.DefaultSensorStatus.STOPPED
    monkeypatch.setenv("BRB_SCHEDULE_ENABLED", "1")
    sensor = automation.automation_sensor()
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING and sensor.name == "brb_automation"
    monkeypatch.delenv("BRB_SCHEDULE_ENABLED")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "config.json").write_text('{"schedule_enabled": true}')
    assert automation.automation_sensor().default_status == dg.DefaultSensorStatus.RUNNING
    (tmp_path / "home" / "config.json").write_text("{not json")
    assert automation.automation_sensor().default_status == dg.DefaultSensorStatus.STOPPED
    assert automation.automation_sensor(enabled=False).default_status == dg.DefaultSensorStatus.STOPPED


def test_the_sources_version_watches_mail_only_when_it_is_on(tmp_path, make_chatdb, monkeypatch):
    from brb_pipeline.demo.mail_writer import OWNER, MailRecord, rfc822, write_mail_store

    from brb_pipeline_tests.helpers import T0

    ana = ("Ana", "ana@example.org")
    index = write_mail_store(tmp_path / "Mail", [MailRecord(1, "INBOX", ana, [OWNER], "Hi", T0,
                                                            rfc822(ana, [OWNER], "Hi", T0, "Lunch?"))])
    b = make_chatdb()
    h = b.add_handle("+16175550100")
    b.add_message(b.add_chat([h]), h, "hello", ts=T0)
    chat_db = b.close()
    on = Settings(home=tmp_path / "on", chat_db=chat_db, mail_dir=tmp_path / "Mail", mail_enabled=True)
    off = Settings(home=tmp_path / "off", chat_db=chat_db, mail_dir=tmp_path / "Mail", mail_enabled=False)
    first_on, first_off = sources_fingerprint(on), sources_fingerprint(off)
    assert "mail=" in first_on and "mail=" not in first_off and str(tmp_path) not in first_on
    assert sources_fingerprint(on) == first_on  # nothing changed, same version
    con = __import__("sqlite3").connect(index)
    con.execute("INSERT INTO subjects (subject) VALUES ('a new message arrived')")
    con.commit()
    con.close()
    assert sources_fingerprint(on) != first_on and sources_fingerprint(off) == first_off
    index.unlink()  # a Mail folder that lost its index reads as missing, not as an error
    assert sources_fingerprint(on).endswith("mail=missing")
    # the observation records that version in the instance, as the sensor's observe run does
    off.save()
    monkeypatch.setenv("BRB_HOME", str(off.home))
    instance = instance_for(off)
    from dagster._core.definitions.observe import observe

    observe([message_sources], instance=instance)
    event = instance.get_latest_data_version_record(message_sources.key)
    assert event is not None and event.asset_observation.data_version == first_off


def _requested(result) -> dict[str, list[str | None]]:
    """Asset -> the partitions the tick asks for (None: unpartitioned), only those asked for."""
    out = {}
    for key in defs.resolve_asset_graph().get_all_asset_keys():
        if result.get_num_requested(key):
            out[key.to_user_string()] = sorted(result.get_requested_partitions(key), key=str)
    return out


class Ticks:
    """The automation sensor's ticks, one minute apart, against one instance."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self.instance, self.cursor = instance, None
        self.now = datetime(2026, 1, 1, 10, 0, 30, tzinfo=timezone.utc)

    def tick(self) -> dict[str, list[str | None]]:
        """What the tick asks to materialize; whether it asks to observe the sources is kept in
        ``observes`` (every tick but the first: the cron is every minute)."""
        self.now += timedelta(minutes=1)
        result = dg.evaluate_automation_conditions(defs=defs, instance=self.instance, cursor=self.cursor,
                                                   evaluation_time=self.now)
        self.cursor = result.cursor
        requested = _requested(result)
        self.observes = requested.pop(message_sources.key.to_user_string(), None) == [None]
        return requested


def _run(instance, job: str, s: Settings, partition: str | None = None) -> None:
    result = defs.resolve_job_def(job).execute_in_process(instance=instance, partition_key=partition,
                                                          resources=resources(home=str(s.home)))
    assert result.success


@pytest.fixture
def home(tmp_path, monkeypatch):
    archive = build_demo_archive(tmp_path / "archive", messages=400, seed=5)
    s = Settings.load(tmp_path / "home", chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir,
                      embedding_model="hash", hdbscan_min_cluster_size=8, umap_neighbors=10)
    run_ingest(s)
    monkeypatch.setenv("BRB_HOME", str(s.home))
    return s, archive


@pytest.mark.slow  # e2e: three automation ticks over real ingests
def test_a_source_change_runs_the_ingestion_then_only_the_changed_batch_then_the_store(home):
    from dagster._core.definitions.observe import observe

    from brb_pipeline_tests.helpers.pipeline import append_messages

    s, archive = home
    instance = instance_for(s)
    ticks = Ticks(instance)
    assert ticks.tick() == {} and not ticks.observes  # up to date: nothing missing, nothing changed
    assert ticks.tick() == {} and ticks.observes  # the minute passed: look at the sources
    observe([message_sources], instance=instance)
    assert ticks.tick() == {n: [None] for n in INGEST}  # first version seen: one ingestion
    _run(instance, "ingest_job", s)
    assert pending_work(s)["to_embed"] == []
    assert ticks.tick() == {}  # no batch changed: no batch runs, the store is not rebuilt
    observe([message_sources], instance=instance)
    assert ticks.tick() == {}  # same version: nothing
    # a new message in one person's chat
    target = metadata.read_contacts(s.brb_db).filter(pl.col("kind") == "direct").sort("rank").row(1, named=True)
    chat = pl.read_parquet(s.paths.messages).filter(pl.col("contact_id") == target["contact_id"])["chat_id"][0]
    append_messages(archive.chat_db, chat.split(":", 1)[1], ["the ferry leaves at nine"] * 3,
                     datetime(2024, 6, 1, 9, tzinfo=timezone.utc))
    assert ticks.tick() == {} and ticks.observes  # not seen before it is observed
    observe([message_sources], instance=instance)
    assert ticks.tick() == {n: [None] for n in INGEST}
    _run(instance, "ingest_job", s)
    assert pending_work(s)["to_embed"] == [target["batch"]]
    assert ticks.tick() == {n: [target["batch"]] for n in PER_BATCH}  # that batch only, not the store yet
    _run(instance, "batch_job", s, target["batch"])
    assert ticks.tick() == {n: [None] for n in FINALIZE}  # every batch embedded: store, indexes, map
    _run(instance, "finalize_job", s)
    assert pending_work(s) == {"to_embed": [], "to_load": []}
    assert ticks.tick() == {}
    assert os.environ["BRB_HOME"] == str(s.home)
