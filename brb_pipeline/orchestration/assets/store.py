"""Unpartitioned store assets: the DuckDB chunk store and its two indexes."""


import dagster as dg

from brb_pipeline.orchestration.assets.batches import batch_embeddings
from brb_pipeline.orchestration.automation import EAGER
from brb_pipeline.orchestration.assets.groups import DUCKDB_POOL, STORE
from brb_pipeline.orchestration.assets.memory import batch_topics, person_profiles
from brb_pipeline.orchestration.resources import BrbSettings, Runtime
from brb_pipeline.orchestration.results import materialized
from brb_pipeline.stages import store


@dg.asset(group_name=STORE, deps=[batch_embeddings, batch_topics, person_profiles], pool=DUCKDB_POOL,
          kinds={"duckdb"}, automation_condition=EAGER)
def chunk_store(context: dg.AssetExecutionContext, brb: BrbSettings,
                runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """The changed partitions loaded into a copy of brb.duckdb (``brb.duckdb.next``) with set-based
    INSERT ... read_parquet, with the topics and profiles tables; the copy replaces the store once
    both indexes are built in it."""
    runtime.cancel.check()
    s = brb.load()
    return materialized(s, store.run_load(s, runtime.progress_for(context)))


@dg.asset(group_name=STORE, deps=[chunk_store], pool=DUCKDB_POOL, kinds={"duckdb"}, automation_condition=EAGER)
def vector_index(context: dg.AssetExecutionContext, brb: BrbSettings,
                 runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """HNSW (cosine) index over the embeddings, built once after the load (in the copy; the second
    index to finish publishes it)."""
    s = brb.load()
    return materialized(s, store.run_vector_index(s, progress=runtime.progress_for(context), embedder=runtime.embedder))


@dg.asset(group_name=STORE, deps=[chunk_store], pool=DUCKDB_POOL, kinds={"duckdb"}, automation_condition=EAGER)
def text_index(context: dg.AssetExecutionContext, brb: BrbSettings,
               runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """BM25 full-text index over chunk text, keeping digits and non-Latin letters."""
    s = brb.load()
    return materialized(s, store.run_text_index(s, progress=runtime.progress_for(context)))
