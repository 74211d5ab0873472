"""Data-quality checks over the stores, as plain functions (Dagster asset checks wrap them).

Each returns ``(passed, details)`` where details are counts and ratios only, never text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from brb_pipeline.core.chunking import ChunkParams
from brb_pipeline.core.crypto import files
from brb_pipeline.core.store.duck import table_exists
from brb_pipeline.core.store.index import index_status

Result = tuple[bool, dict[str, Any]]


def undecodable_share(parsed_messages: Path, *, max_share: float = 0.01) -> Result:
    """Share of messages whose attributedBody yielded no text (a decoder regression shows here)."""
    df = files.scan_parquet(parsed_messages).select(
        pl.len().alias("n"), pl.col("undecodable").sum().alias("bad")).collect()
    n, bad = int(df["n"][0]), int(df["bad"][0] or 0)
    share = bad / n if n else 0.0
    return share <= max_share, {"messages": n, "undecodable": bad, "share": round(share, 5), "max_share": max_share}


def chunk_count_sane(con: duckdb.DuckDBPyConnection, messages: pl.LazyFrame, params: ChunkParams) -> Result:
    """Chunks exist when messages do, no chunk id repeats, and there are no more chunks than
    the windows the messages can make.

    The ceiling is counted per conversation, the way chunking splits them (a silence longer
    than ``params.gap_s`` starts one): a conversation of L lines gives at most
    ``ceil((L - window) / stride) + 1`` windows (1 when L <= window). So it fits any channel's
    density: an iMessage chat of hundreds of messages a day and a mail thread whose replies are
    days apart (one chunk each) alike. A line is a message, or more for a body longer than
    ``max_message_chars`` (counted generously); windows dropped as too short only lower the
    count. A second load of the same chunks shows as duplicate ids, a chunking that windows a
    conversation more than once as chunks over the ceiling. The ceiling allows 2% + 10 more
    (a batch kept from an earlier run while its messages moved on), far below a doubling.

    Args:
        messages: the staged messages (``contact_id``, ``chat_id``, ``ts``, ``source_rowid``, ``text``).
    """
    chunks = int(con.execute("SELECT count(*) FROM chunks").fetchone()[0]) if table_exists(con, "chunks") else 0
    dupes = int(con.execute("SELECT count(*) - count(DISTINCT chunk_id) FROM chunks").fetchone()[0]) if chunks else 0
    n, windows = chunk_ceiling(messages, params)
    ceiling = windows + windows // 50 + 10
    ok = dupes == 0 and (n == 0 or 0 < chunks <= ceiling)
    return ok, {"chunks": chunks, "messages": n, "duplicate_ids": dupes, "windows": windows, "ceiling": ceiling}


def chunk_ceiling(messages: pl.LazyFrame, params: ChunkParams) -> tuple[int, int]:
    """(messages, the most windows they can make): see :func:`chunk_count_sane`."""
    chat = ["contact_id", "chat_id"]
    piece = max(1, params.max_message_chars * 4 // 5)  # a split piece is at least 4/5 of the limit
    chars = pl.col("text").fill_null("").str.len_chars()
    per_conv = (
        messages.select(*chat, "ts", pl.col("source_rowid").fill_null(0).alias("rid"),
                        pl.when(chars > params.max_message_chars).then(chars // piece + 2).otherwise(1).alias("lines"))
        # an undated message joins the conversation of the message before it (by ROWID), as in chunking
        .sort([*chat, "rid"])
        .with_columns(pl.col("ts").forward_fill().backward_fill().over(chat).dt.epoch("us").alias("place"))
        .sort([*chat, "place"], nulls_last=True)
        .with_columns(((pl.col("place").diff().over(chat) > params.gap_s * 1_000_000).fill_null(False)
                       .cum_sum().over(chat)).alias("conv"))
        .group_by([*chat, "conv"]).agg(pl.col("lines").sum().alias("lines"), pl.len().alias("n"))
    )
    over = (pl.col("lines") - params.window).clip(lower_bound=0)
    windows = pl.when(pl.col("lines") <= params.window).then(1).otherwise((over + params.stride - 1) // params.stride + 1)
    row = per_conv.select(pl.col("n").sum(), windows.sum()).collect()
    return int(row.item(0, 0) or 0), int(row.item(0, 1) or 0)


def vectors_valid(con: duckdb.DuckDBPyConnection) -> Result:
    """No NaN, zero or un-normalized embedding (all rows should have unit length)."""
    if not table_exists(con, "chunks"):
        return True, {"chunks": 0}
    n, bad = con.execute(
        """SELECT count(*), count(*) FILTER (WHERE NOT isfinite(sq) OR sq < 0.98 OR sq > 1.02)
           FROM (SELECT array_inner_product(embedding, embedding) AS sq FROM chunks)"""
    ).fetchone()
    return bad == 0, {"chunks": int(n), "invalid_vectors": int(bad)}


def single_model(con: duckdb.DuckDBPyConnection) -> Result:
    """Every stored vector comes from the same embedding model."""
    if not table_exists(con, "chunks"):
        return True, {"models": 0}
    models = [r[0] for r in con.execute("SELECT DISTINCT embedding_model FROM chunks ORDER BY 1").fetchall()]
    return len(models) <= 1, {"models": len(models), "model": models[0] if len(models) == 1 else ", ".join(models)}


def index_complete(con: duckdb.DuckDBPyConnection, kind: str) -> Result:
    """The index exists and covers exactly the stored rows."""
    st = index_status(con)
    info = st.get(kind, {})
    ok = st["store_rows"] == 0 or (bool(info.get("present")) and not info.get("stale"))
    return ok, {"store_rows": int(st["store_rows"]), "indexed_rows": int(info.get("rows") or 0),
                "present": bool(info.get("present"))}


def noise_share(clusters: Path, *, max_share: float = 0.35) -> Result:
    """Share of chunks left unclustered after noise reassignment."""
    df = files.read_parquet(clusters)
    n = df.height
    noise = int((df["cluster_id"] < 0).sum()) if n else 0
    share = noise / n if n else 0.0
    return share <= max_share, {"chunks": n, "noise": noise, "share": round(share, 4), "max_share": max_share}
