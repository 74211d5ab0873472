"""Distilled memory: topics from a local model over a person's monthly messages, and a profile
derived from those topics.

This package owns the memory's logic, with no I/O of its own beyond loading a model and loading
the two DuckDB tables from the staged files (read through :mod:`brb_pipeline.core.crypto`): :mod:`.language` (which language a batch is in), :mod:`.prompts` (the
prompt per language, :data:`~.prompts.PROMPT_VERSION`), :mod:`.generate` (the ``(prompt) -> text``
protocol, the mlx-lm generator and a scripted fake), :mod:`.parse` (topics out of a reply, with
truncation recovery and per-field fallback, losses counted), :mod:`.topics` (monthly windows of a
person's messages to topic rows), :mod:`.profile` (a person's profile from their topics only) and
:mod:`.tables` (the ``topics`` and ``profiles`` tables and their load).
"""
