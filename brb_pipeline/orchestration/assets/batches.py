"""Per contact-batch assets: chunk, then embed to a Parquet partition."""


import dagster as dg

from brb_pipeline.orchestration.automation import EAGER
from brb_pipeline.orchestration.assets.groups import PER_BATCH, contact_batches_partitions
from brb_pipeline.orchestration.assets.ingest import batch_content
from brb_pipeline.orchestration.resources import BrbSettings, Runtime
from brb_pipeline.orchestration.results import materialized
from brb_pipeline.core import faults
from brb_pipeline.stages import embed


@dg.asset(group_name=PER_BATCH, partitions_def=contact_batches_partitions, deps=[batch_content],
          kinds={"polars", "parquet"}, automation_condition=EAGER)
def batch_chunks(context: dg.AssetExecutionContext, brb: BrbSettings,
                 runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """Overlapping conversation windows for the contacts of one batch."""
    runtime.cancel.check()
    s = brb.load()
    prefix = runtime.embedder(s).document_prefix
    meta = embed.run_chunk(s, context.partition_key, prefix, progress=runtime.batches)
    faults.point("chunks_written")
    return materialized(s, meta)


@dg.asset(group_name=PER_BATCH, partitions_def=contact_batches_partitions, deps=[batch_chunks],
          kinds={"mlx", "parquet"}, automation_condition=EAGER)
def batch_embeddings(context: dg.AssetExecutionContext, brb: BrbSettings,
                     runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """The batch's chunks embedded with MLX, written to ``staging/chunks/batch=<key>.parquet``."""
    s = brb.load()
    key = context.partition_key
    meta = embed.run_embed(s, key, runtime.embedder(s), progress=runtime.batches.embedding(key),
                           cancel=runtime.cancel, reuse=not runtime.reembed)
    return materialized(s, meta)
