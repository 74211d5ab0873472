"""Asset checks: thin wrappers over ``core.checks`` with the severity a user would want.

ERROR means the store is wrong (duplicates, broken vectors, mixed models, missing index);
WARN means the result is usable but worth a look (undecodable messages, lots of noise).
"""

import dagster as dg
import polars as pl

from brb_pipeline.orchestration.assets.ingest import parsed_messages
from brb_pipeline.orchestration.assets.insights import clusters
from brb_pipeline.orchestration.resources import BrbSettings
from brb_pipeline.orchestration.results import checked
from brb_pipeline.orchestration.assets.store import chunk_store, text_index, vector_index
from brb_pipeline.core import checks
from brb_pipeline.core.crypto import files
from brb_pipeline.core.store import duck
from brb_pipeline.stages import embed

_CEILING_COLUMNS = {"contact_id": pl.Utf8, "chat_id": pl.Utf8, "ts": pl.Datetime("us", "UTC"),
                    "source_rowid": pl.Int64, "text": pl.Utf8}


@dg.asset_check(asset=parsed_messages,
                description="At most 1% of messages have an attributedBody that decoded to nothing.")
def undecodable_messages(brb: BrbSettings) -> dg.AssetCheckResult:
    s = brb.load()
    return checked(s, *checks.undecodable_share(s.paths.parsed_messages), dg.AssetCheckSeverity.WARN)


def _store_check(brb: BrbSettings, fn, severity=dg.AssetCheckSeverity.ERROR):
    s = brb.load()
    # a load's checks look at the copy it wrote (published only once its indexes are built)
    target = s.paths.store_next if s.paths.store_next.exists() else s.duckdb_path
    con = duck.connect(target, read_only=True)
    try:
        return checked(s, *fn(s, con), severity)
    finally:
        con.close()


@dg.asset_check(asset=chunk_store, blocking=True,
                description="No duplicate chunk ids; no more chunks than the messages' conversations can make.")
def chunk_count_sanity(brb: BrbSettings) -> dg.AssetCheckResult:
    def fn(s, con):
        src = s.paths.messages
        messages = files.scan_parquet(src) if src.exists() else pl.LazyFrame(schema=_CEILING_COLUMNS)
        return checks.chunk_count_sane(con, messages, embed.chunk_params(s))

    return _store_check(brb, fn)


@dg.asset_check(asset=chunk_store, blocking=True,
                description="Every embedding is finite and unit-length (no NaN or zero vectors).")
def vectors_are_valid(brb: BrbSettings) -> dg.AssetCheckResult:
    return _store_check(brb, lambda s, con: checks.vectors_valid(con))


@dg.asset_check(asset=chunk_store, blocking=True,
                description="One embedding model across the whole store.")
def single_embedding_model(brb: BrbSettings) -> dg.AssetCheckResult:
    return _store_check(brb, lambda s, con: checks.single_model(con))


@dg.asset_check(asset=vector_index,
                description="The HNSW index exists and covers every stored chunk.")
def hnsw_covers_store(brb: BrbSettings) -> dg.AssetCheckResult:
    return _store_check(brb, lambda s, con: checks.index_complete(con, "hnsw"))


@dg.asset_check(asset=text_index,
                description="The BM25 index exists and covers every stored chunk.")
def bm25_covers_store(brb: BrbSettings) -> dg.AssetCheckResult:
    return _store_check(brb, lambda s, con: checks.index_complete(con, "fts"))


@dg.asset_check(asset=clusters,
                description="At most 35% of chunks stay unclustered after noise reassignment.")
def cluster_noise_share(brb: BrbSettings) -> dg.AssetCheckResult:
    s = brb.load()
    return checked(s, *checks.noise_share(s.paths.clusters), dg.AssetCheckSeverity.WARN)


ALL_CHECKS = [undecodable_messages, chunk_count_sanity, vectors_are_valid, single_embedding_model,
              hnsw_covers_store, bm25_covers_store, cluster_noise_share]
