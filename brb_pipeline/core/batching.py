"""Contact batches (the dynamic partitions) and their content fingerprints.

Contacts are ranked by message count (descending; ties by contact_id); the ``top_n`` busiest go
``top_size`` to a batch, the rest ``rest_size`` to a batch. Keys are ``batch-000``,
``batch-001``, ... in rank order, so they stay put while the ranking is stable.

A batch's fingerprint is a SHA-256 over the sorted per-message hashes of its messages (id,
timestamp, text, reactions, edited flag, contact). It changes when a message of the batch is
added, edited, unsent, deleted, gains a reaction or moves to another contact, and is identical
across processes for the same data (polars' hash with fixed seeds, not Python's salted
``hash()``; polars documents that it may change between polars versions, which only costs one
re-embedding after an upgrade).
"""

from __future__ import annotations

import hashlib

import numpy as np
import polars as pl

BATCH_PREFIX = "batch-"
FINGERPRINT_VERSION = b"brb-batch-fp-v1"
_SEEDS = dict(seed=0x42524231)

ASSIGNMENT_SCHEMA = pl.Schema({"contact_id": pl.Utf8, "batch": pl.Utf8, "rank": pl.UInt32})


def assign_batches(stats: pl.DataFrame, *, top_n: int = 50, top_size: int = 10, rest_size: int = 50) -> pl.DataFrame:
    """Give every contact exactly one batch.

    Args:
        stats: at least ``contact_id`` and ``messages`` (one row per contact, UNKNOWN included).
        top_n: how many of the busiest contacts get small batches.
        top_size: contacts per batch among the top ``top_n``.
        rest_size: contacts per batch for everyone else.

    Returns:
        Frame (contact_id, batch, rank) with ASSIGNMENT_SCHEMA, rank 0 = most messages, sorted by rank.
    """
    if top_size < 1 or rest_size < 1 or top_n < 0:
        raise ValueError("batch sizes must be >= 1 and top_n >= 0")
    ranked = (
        stats.select("contact_id", pl.col("messages").fill_null(0))
        .unique("contact_id", keep="first")
        .sort(["messages", "contact_id"], descending=[True, False])
        .with_row_index("rank")
    )
    top_batches = -(-top_n // top_size)  # ceil: the top block's batch count
    r = pl.col("rank").cast(pl.Int64)
    idx = pl.when(r < top_n).then(r // top_size).otherwise(top_batches + (r - top_n) // rest_size)
    out = ranked.with_columns(
        (pl.lit(BATCH_PREFIX) + idx.cast(pl.Utf8).str.zfill(3)).alias("batch"),
    )
    return out.select("contact_id", "batch", "rank").cast(dict(ASSIGNMENT_SCHEMA))


def batch_keys(assignments: pl.DataFrame) -> list[str]:
    """The distinct batch keys in order (``["batch-000", "batch-001", ...]``)."""
    return sorted(assignments.get_column("batch").unique().to_list())


def batch_fingerprints(messages: pl.DataFrame) -> dict[str, str]:
    """Content hash per batch.

    Args:
        messages: rows with ``batch``, ``contact_id``, ``message_id``, ``ts``, ``text``,
            ``reactions`` and ``edited``, shape (n_messages, >=7).

    Returns:
        ``{batch: 64-hex SHA-256}`` for every batch that has messages.
    """
    if messages.height == 0:
        return {}
    row = pl.struct(
        pl.col("message_id"),
        pl.col("ts").dt.epoch("us"),
        pl.col("text"),
        pl.col("edited"),
        pl.col("contact_id"),
        pl.col("reactions"),  # list of structs (kind, sender, is_from_me, ts, emoji): hashed nested
    ).hash(**_SEEDS)
    # The batch's content is the multiset of its row hashes: sort the u64s (cheap) rather than
    # the message_id strings, so row order never matters.
    hashed = messages.select("batch", row.alias("h")).sort("h")
    out: dict[str, str] = {}
    for (batch,), part in sorted(hashed.partition_by("batch", as_dict=True, maintain_order=True).items()):
        digest = hashlib.sha256(FINGERPRINT_VERSION)
        digest.update(part.get_column("h").to_numpy().astype("<u8", copy=False).tobytes())
        digest.update(np.uint64(part.height).tobytes())
        out[str(batch)] = digest.hexdigest()
    return out
