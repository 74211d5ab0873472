"""Per-contact statistics: message counts, date range and average response times.

A response is a message whose previous message in the same chat (ordered by ``ts``, then
``message_id`` for ties) came from the other side, within ``max_response_gap_s``. Its delay is
measured from that immediately previous message: when they send three messages and I answer,
my delay counts from their third. Longer silences are new conversations, not slow replies.
"""

from __future__ import annotations

import polars as pl

STATS_SCHEMA = pl.Schema(
    {
        "contact_id": pl.Utf8,
        "messages": pl.UInt32,
        "sent": pl.UInt32,
        "received": pl.UInt32,
        "first_ts": pl.Datetime("us", "UTC"),
        "last_ts": pl.Datetime("us", "UTC"),
        "avg_response_s_me": pl.Float64,  # seconds; null when I never replied
        "avg_response_s_them": pl.Float64,  # seconds; null when they never replied
    }
)


def contact_stats(messages: pl.DataFrame, *, max_response_gap_s: int = 12 * 3600) -> pl.DataFrame:
    """Counts, first/last timestamps and average reply delays per contact.

    Args:
        messages: rows with at least ``contact_id``, ``chat_id``, ``message_id``, ``is_from_me``
            and ``ts`` (Datetime UTC), shape (n_messages, >=5).
        max_response_gap_s: a side switch further apart than this (seconds) is not a reply.

    Returns:
        Frame with STATS_SCHEMA, one row per contact_id, sorted by contact_id.
        ``avg_response_s_me``: mean seconds from their message to my next message in the same
        chat; ``avg_response_s_them``: the converse.
    """
    if messages.height == 0:
        return pl.DataFrame(schema=STATS_SCHEMA)
    me = pl.col("is_from_me").fill_null(False)
    # Sort by time only (ties by id); ``over("chat_id")`` keeps that order inside each chat, which
    # is much cheaper than a sort on the chat_id string first.
    # Window keys as integers are cheaper to group than strings: number the chats once.
    chat_no = messages.select(pl.col("chat_id").unique()).with_row_index("_chat")
    df = (
        messages.select("contact_id", "chat_id", "message_id", me.alias("is_from_me"), "ts")
        .join(chat_no, on="chat_id", how="left")
        .drop("chat_id")
        .rename({"_chat": "chat_id"})
        .sort(["ts", "message_id"])
    )
    # Materialize the two windows once; referencing a window expression several times in eager
    # mode recomputes it each time.
    df = df.with_columns(
        pl.col("is_from_me").shift(1).over("chat_id").alias("_prev_me"),
        ((pl.col("ts") - pl.col("ts").shift(1).over("chat_id")).dt.total_microseconds() / 1_000_000).alias("_gap_s"),
    )
    is_reply = (
        pl.col("_prev_me").is_not_null()
        & (pl.col("_prev_me") != pl.col("is_from_me"))
        & (pl.col("_gap_s") <= max_response_gap_s)
    )
    df = df.with_columns(is_reply.alias("_reply")).with_columns(
        pl.when(pl.col("_reply") & pl.col("is_from_me")).then(pl.col("_gap_s")).alias("_me"),
        pl.when(pl.col("_reply") & ~pl.col("is_from_me")).then(pl.col("_gap_s")).alias("_them"),
    )
    out = df.group_by("contact_id").agg(
        pl.len().alias("messages"),
        pl.col("is_from_me").sum().alias("sent"),
        (~pl.col("is_from_me")).sum().alias("received"),
        pl.col("ts").min().alias("first_ts"),
        pl.col("ts").max().alias("last_ts"),
        pl.col("_me").mean().alias("avg_response_s_me"),
        pl.col("_them").mean().alias("avg_response_s_them"),
    )
    return out.cast(dict(STATS_SCHEMA)).select(list(STATS_SCHEMA.names())).sort("contact_id")
