"""Stages: the whole pipeline as plain functions over a Settings object.

Owns: what each stage does and the files it writes under the home (through ``config.home``).
Each stage reads its inputs from the home dir (snapshot, staging Parquet, brb.db, brb.duckdb),
writes its outputs there and returns a dict of text-free metadata. Every progress update comes
from the ``run_*`` functions, one module per group of the six progress stages:

- ``snapshot``, ``parsing``: :mod:`.ingest` (``run_snapshot``, ``run_parse``; then ``run_contacts``
  and ``run_batches``, which report no bar);
- ``chunking``, ``embedding``: :mod:`.embed` (``run_chunk``, ``run_embed``), as one bar over the
  run's batches through :mod:`.batch_progress`; :mod:`.incremental` decides which batches run;
- ``saving``: :mod:`.store` (``run_load``, ``run_vector_index``, ``run_text_index``);
- ``analyzing``: :mod:`.insights` (``run_projection``, ``run_clusters``, ``run_labels``, ``run_map``).

:mod:`.memory` (``run_topics``, ``run_profiles``) distils each batch with a local model when one is
configured. :mod:`.homelock` serialises writers of one home; :mod:`.repair` rebuilds what a crash
or a damaged file left.

Must not import: dagster, ``orchestration``, ``cli``. Keys are not installed here: an entry point
(``cli``, ``orchestration.definitions``, a test's conftest) calls :func:`brb_pipeline.keys.install`.
"""
