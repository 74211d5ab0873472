"""The one Definitions object (the code location ``workspace.yaml`` loads): the asset graph, the
jobs, and the automation sensor."""

from __future__ import annotations

import dagster as dg

from brb_pipeline import keys
from brb_pipeline.orchestration.automation import AUTOMATION_SENSOR
from brb_pipeline.orchestration.checks import ALL_CHECKS
from brb_pipeline.orchestration.graph import ALL_ASSETS, resources
from brb_pipeline.orchestration.jobs import ALL_JOBS

keys.install()  # the code location's entry point: an encrypted home's files open with its key

defs = dg.Definitions(
    assets=ALL_ASSETS,
    asset_checks=ALL_CHECKS,
    jobs=ALL_JOBS,
    sensors=[AUTOMATION_SENSOR],
    resources=resources(),
)
