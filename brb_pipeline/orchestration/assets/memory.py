"""Per contact-batch memory assets: topics from the local model, then the people's profiles."""


import dagster as dg

from brb_pipeline.orchestration.assets.batches import batch_chunks
from brb_pipeline.orchestration.automation import EAGER
from brb_pipeline.orchestration.assets.groups import PER_BATCH, contact_batches_partitions
from brb_pipeline.orchestration.resources import BrbSettings, Runtime
from brb_pipeline.orchestration.results import materialized
from brb_pipeline.stages import memory


@dg.asset(group_name=PER_BATCH, partitions_def=contact_batches_partitions, deps=[batch_chunks],
          kinds={"mlx", "parquet"}, automation_condition=EAGER)
def batch_topics(context: dg.AssetExecutionContext, brb: BrbSettings,
                 runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """Monthly batches of each person's messages split into topics (label, summary, message span)
    by the local model, in ``staging/topics/batch=<key>.parquet``; skipped, with the reason,
    when no model is configured."""
    runtime.cancel.check()
    s = brb.load()
    return materialized(s, memory.run_topics(s, context.partition_key, runtime.generator(s)))


@dg.asset(group_name=PER_BATCH, partitions_def=contact_batches_partitions, deps=[batch_topics],
          kinds={"polars", "parquet"}, automation_condition=EAGER)
def person_profiles(context: dg.AssetExecutionContext, brb: BrbSettings,
                    runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """Each person's profile (relationship, tone, recurring topics, explicit commitments) derived
    from their topics only, in ``staging/profiles/batch=<key>.parquet``."""
    s = brb.load()
    return materialized(s, memory.run_profiles(s, context.partition_key, runtime.generator(s)))
