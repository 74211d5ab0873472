"""The home's Dagster instance: its dagster.yaml is written from the one declaration
(``orchestration.instance.INSTANCE_CONFIG``), an outdated one is replaced, and the instance
Dagster opens from it has the settings declared (one writer per pool, two runs at a time)."""

import dagster as dg
import yaml

from brb_pipeline.config.settings import Settings
from brb_pipeline.orchestration.instance import INSTANCE_CONFIG, instance_for, instance_yaml


def test_the_instance_is_configured_from_the_one_declaration(tmp_path):
    s = Settings(home=tmp_path / "home")
    instance = instance_for(s)
    cfg = s.dagster_home / "dagster.yaml"
    written = yaml.safe_load(cfg.read_text())
    assert written["storage"] == {"sqlite": {"base_dir": str(s.dagster_home)}}
    assert {k: v for k, v in written.items() if k not in ("storage", "local_artifact_storage")} == {
        k: v for k, v in INSTANCE_CONFIG.items() if k not in ("storage", "local_artifact_storage")}
    # what Dagster made of it
    concurrency = instance.get_concurrency_config()
    assert concurrency.pool_config.default_pool_limit == 1
    assert concurrency.run_queue_config.max_concurrent_runs == 2
    assert instance.run_monitoring_enabled and instance.auto_materialize_use_sensors
    assert not instance.telemetry_enabled
    instance.dispose()
    # a home written by an older brb (the repo's former keys) gets the declaration back
    cfg.write_text("telemetry:\n  enabled: true\nrun_queue:\n  max_concurrent_runs: 9\n")
    again = instance_for(s)
    assert cfg.read_text() == instance_yaml(s.dagster_home)
    assert again.get_concurrency_config().run_queue_config.max_concurrent_runs == 2 and not again.telemetry_enabled
    again.dispose()
    # a home copied elsewhere points its storage at its own folder
    moved = Settings(home=tmp_path / "moved")
    (moved.dagster_home).mkdir(parents=True)
    (moved.dagster_home / "dagster.yaml").write_text(cfg.read_text())
    inst = instance_for(moved)
    assert yaml.safe_load((moved.dagster_home / "dagster.yaml").read_text())["storage"]["sqlite"]["base_dir"] == str(
        moved.dagster_home)
    assert isinstance(inst, dg.DagsterInstance)
    inst.dispose()
