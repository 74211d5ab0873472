"""Orchestration: the Dagster side, and only it imports dagster.

- :mod:`.assets` (thin software-defined assets over ``stages``), :mod:`.checks`,
  :mod:`.resources`, :mod:`.results` (metadata an encrypted home may store);
- :mod:`.graph`: every asset and check, the resources, the jobs' selections;
- :mod:`.automation`: the automation conditions and the one automation sensor (off by default);
- :mod:`.jobs`: the jobs the UI lists, ``contact_backfill_job`` (one person) among them;
- :mod:`.definitions`: the one ``Definitions`` object (the code location ``workspace.yaml`` loads);
- :mod:`.runner`: headless runs of the same graph for the ``brb`` command;
  :mod:`.outcome`: what a headless run's result means (checks, the error a step raised);
- :mod:`.instance`: the home's Dagster instance, its ``dagster.yaml`` declared once, dead runs;
- :mod:`.history`: what ``brb forget`` deletes from Dagster's storage;
- :mod:`.ui`: ``brb ui`` (webserver and daemon on the home's instance).

Imports go one way: assets -> graph -> runner -> jobs -> definitions (no module imports
``definitions``). Must not import: ``cli``.
"""

import warnings

import dagster as dg

# Dagster's beta and preview notices (observable sources, ``include_sources``) are for us, not for
# a person running `brb`: every line on a user's stderr is brb's own.
for _notice in (dg.BetaWarning, dg.PreviewWarning):
    warnings.filterwarnings("ignore", category=_notice)
