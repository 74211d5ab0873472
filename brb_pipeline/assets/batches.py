"""Per contact-batch assets: chunk, then embed to a Parquet partition."""


import dagster as dg

from brb_pipeline.assets.groups import PER_BATCH, contact_batches_partitions
from brb_pipeline.assets.ingest import contact_batches
from brb_pipeline.core import faults
from brb_pipeline.pipeline import embed


@dg.asset(group_name=PER_BATCH, partitions_def=contact_batches_partitions, deps=[contact_batches],
          kinds={"polars", "parquet"}, required_resource_keys={"brb", "runtime"})
def batch_chunks(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """Overlapping conversation windows for the contacts of one batch."""
    rt = context.resources.runtime
    rt.cancel.check()
    s = context.resources.brb.load()
    prefix = rt.embedder(s).document_prefix
    meta = embed.run_chunk(s, context.partition_key, prefix)
    faults.point("chunks_written")
    return dg.MaterializeResult(metadata=meta)


@dg.asset(group_name=PER_BATCH, partitions_def=contact_batches_partitions, deps=[batch_chunks],
          kinds={"mlx", "parquet"}, required_resource_keys={"brb", "runtime"})
def batch_embeddings(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """The batch's chunks embedded with MLX, written to ``staging/chunks/batch=<key>.parquet``."""
    rt = context.resources.runtime
    s = context.resources.brb.load()
    hook = getattr(rt, "embed_progress", None)
    meta = embed.run_embed(s, context.partition_key, rt.embedder(s),
                           progress=hook(context.partition_key) if hook else None, cancel=rt.cancel,
                           reuse=not getattr(rt, "reembed", False))
    return dg.MaterializeResult(metadata=meta)
