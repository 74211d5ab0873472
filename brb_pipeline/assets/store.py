"""Unpartitioned store assets: the DuckDB chunk store and its two indexes."""


import dagster as dg

from brb_pipeline.assets.batches import batch_embeddings
from brb_pipeline.assets.groups import DUCKDB_POOL, STORE
from brb_pipeline.pipeline import paths, store


def _progress(context: dg.AssetExecutionContext, percent: float, message: str) -> None:
    context.resources.runtime.progress_for(context).update("saving", percent, message)


def _index_done(context: dg.AssetExecutionContext, s, name: str) -> None:
    """The two index assets run in either order: saving is done once no unpublished copy is left."""
    if paths.store_next(s).exists():
        _progress(context, 70, f"{name} built, waiting for the other index")
    else:
        _progress(context, 100, "indexes ready")


@dg.asset(group_name=STORE, deps=[batch_embeddings], pool=DUCKDB_POOL, kinds={"duckdb"},
          required_resource_keys={"brb", "runtime"})
def chunk_store(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """The changed partitions loaded into a copy of brb.duckdb (``brb.duckdb.next``) with set-based
    INSERT ... read_parquet; the copy replaces the store once both indexes are built in it."""
    context.resources.runtime.cancel.check()
    _progress(context, 5, "loading partitions")
    meta = store.run_load(context.resources.brb.load())
    _progress(context, 40, f"{meta.get('chunks', 0):,} chunks stored")
    return dg.MaterializeResult(metadata=meta)


@dg.asset(group_name=STORE, deps=[chunk_store], pool=DUCKDB_POOL, kinds={"duckdb"},
          required_resource_keys={"brb", "runtime"})
def vector_index(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """HNSW (cosine) index over the embeddings, built once after the load (in the copy; the second
    index to finish publishes it)."""
    _progress(context, 45, "building HNSW index")
    s = context.resources.brb.load()
    meta = store.run_vector_index(s)
    _index_done(context, s, "HNSW")
    return dg.MaterializeResult(metadata=meta)


@dg.asset(group_name=STORE, deps=[chunk_store], pool=DUCKDB_POOL, kinds={"duckdb"},
          required_resource_keys={"brb", "runtime"})
def text_index(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """BM25 full-text index over chunk text, keeping digits and non-Latin letters."""
    _progress(context, 45, "building BM25 index")
    s = context.resources.brb.load()
    meta = store.run_text_index(s)
    _index_done(context, s, "BM25")
    return dg.MaterializeResult(metadata=meta)
