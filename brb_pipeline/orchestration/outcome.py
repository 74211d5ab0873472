"""What a headless run's Dagster result means for brb: its assets' metadata, its failed checks
(ERROR ones fail the ingestion, WARN ones become warnings) and the library error a failed step
raised, with Dagster's trace written to ``<home>/logs/ingest-<run>.log`` instead of the terminal."""

from __future__ import annotations

from typing import Any

import dagster as dg

from brb_pipeline.config.settings import Settings
from brb_pipeline.core import errors as errors_mod
from brb_pipeline.core.errors import BrbError
from brb_pipeline.core.progress import Progress

#: Library errors by class name, to give back the error a failed step raised.
BRB_ERRORS = {name: cls for name, cls in vars(errors_mod).items()
              if isinstance(cls, type) and issubclass(cls, BrbError)}


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


def asset_metadata(result: dg.ExecuteInProcessResult, asset: dg.AssetsDefinition) -> dict[str, Any]:
    """The metadata ``asset`` was materialized with in ``result`` (empty if it was not)."""
    for ev in result.get_asset_materialization_events():
        mat = ev.event_specific_data.materialization
        if mat.asset_key == asset.key:
            return {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return {}


def _numbers(metadata_: Any) -> str:
    return ", ".join(f"{k} {getattr(v, 'value', v)}" for k, v in list(metadata_.items())[:6])


def read_checks(result: dg.ExecuteInProcessResult, run_log: RunLog, progress: Progress) -> list[str]:
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


def step_failure(result: dg.ExecuteInProcessResult, run_log: RunLog) -> BrbError:
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
