"""Orchestration: the Dagster side, and only it imports dagster.

- :mod:`.assets` (thin software-defined assets over ``stages``), :mod:`.checks`, :mod:`.jobs`,
  :mod:`.automation` (schedule and sensors), :mod:`.resources`, :mod:`.results`;
- :mod:`.definitions`: the one ``Definitions`` object (the code location ``workspace.yaml`` loads);
- :mod:`.runner`: headless runs of the same graph for the ``brb`` command;
- :mod:`.ui`: ``brb ui`` (webserver and daemon on the home's instance).

Must not import: ``cli``.
"""
