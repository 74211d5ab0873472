"""Stage functions: the whole pipeline as plain functions over a Settings object.

Each stage reads its inputs from the home dir (snapshot, staging Parquet, brb.db, brb.duckdb),
writes its outputs there, and returns a dict of text-free metadata. Dagster assets are thin
wrappers around these functions; nothing here imports dagster. Every progress update comes from
the ``run_*`` functions, one module per group of the six progress stages:

- ``snapshot``, ``parsing``: :mod:`.ingest` (``run_snapshot``, ``run_parse``; then ``run_contacts``
  and ``run_batches``, which report no bar);
- ``chunking``, ``embedding``: :mod:`.embed` (``run_chunk``, ``run_embed``), as one bar over the
  run's batches through :mod:`.batch_progress`; :mod:`.incremental` decides which batches run;
- ``saving``: :mod:`.store` (``run_load``, ``run_vector_index``, ``run_text_index``);
- ``analyzing``: :mod:`.insights` (``run_projection``, ``run_clusters``, ``run_labels``, ``run_map``).

:mod:`.memory` (``run_topics``, ``run_profiles``) distils each batch with a local model when one is
configured, inside the per-batch loop, and reports no bar of its own.

:mod:`.paths` says where every stage keeps its files; :mod:`.query`, :mod:`.privacy` and
:mod:`.scrub` serve search and ``brb forget``.
"""

from brb_pipeline.pipeline import keys as _keys

_keys.install()  # the home's files open with the home's key (core.crypto asks pipeline.keys)
