"""Contact batches (the dynamic partitions) and their content fingerprints.

Contacts are ranked by message count (descending; ties by contact_id); the ``top_n`` busiest form
the top tier, ``top_size`` to a batch (keys ``batch-000`` .. ``batch-<ceil(top_n/top_size)-1>``),
everyone else the rest tier, ``rest_size`` to a batch (keys right after the top tier's).

On a first run keys follow rank order. Later runs pass the previous assignment and it is sticky:
a contact keeps its batch while that batch belongs to its current tier and has room, so a contact
that gains messages moves only itself (and, when it enters the top tier, the contact it pushes
out), not every contact ranked below it. Contacts without a valid batch fill free slots of
existing batches of their tier, lowest key first, before a new key is opened.

A batch's fingerprint is a SHA-256 over the sorted per-message hashes of its messages (id,
timestamp, text, reactions, edited flag, contact). It changes when a message of the batch is
added, edited, unsent, deleted, gains a reaction or moves to another contact, and is identical
across processes for the same data (polars' hash with fixed seeds, not Python's salted
``hash()``; polars documents that it may change between polars versions, which only costs one
re-embedding after an upgrade).
"""

from __future__ import annotations


import hashlib
import heapq
import re
from collections.abc import Mapping

import numpy as np
import polars as pl

from brb_pipeline.core.contacts.params import BatchParams

BATCH_PREFIX = "batch-"
_KEY_RE = re.compile(r"^batch-(\d{3,})$")
FINGERPRINT_VERSION = b"brb-batch-fp-v1"
_SEEDS = dict(seed=0x42524231)

ASSIGNMENT_SCHEMA = pl.Schema({"contact_id": pl.Utf8, "batch": pl.Utf8, "rank": pl.UInt32})


def assign_batches(
    stats: pl.DataFrame,
    *,
    top_n: int = BatchParams.top_n,
    top_size: int = BatchParams.top_size,
    rest_size: int = BatchParams.rest_size,
    previous: Mapping[str, str] | None = None,
) -> pl.DataFrame:
    """Give every contact exactly one batch.

    Args:
        stats: at least ``contact_id`` and ``messages`` (one row per contact, UNKNOWN included).
        top_n: how many of the busiest contacts get small batches.
        top_size: contacts per batch among the top ``top_n``.
        rest_size: contacts per batch for everyone else.
        previous: contact_id -> batch key of the last run; a contact keeps that key while it
            belongs to the contact's current tier and the batch has room. ``None`` or empty:
            keys in rank order.

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
    if previous:
        idx = pl.lit(pl.Series(_sticky_indexes(ranked.get_column("contact_id").to_list(), previous, top_n=top_n,
                                               top_size=top_size, rest_size=rest_size), dtype=pl.Int64))
    else:
        r = pl.col("rank").cast(pl.Int64)
        idx = pl.when(r < top_n).then(r // top_size).otherwise(top_batches + (r - top_n) // rest_size)
    out = ranked.with_columns(
        (pl.lit(BATCH_PREFIX) + idx.cast(pl.Utf8).str.zfill(3)).alias("batch"),
    )
    return out.select("contact_id", "batch", "rank").cast(dict(ASSIGNMENT_SCHEMA))


def _sticky_indexes(ids: list[str], previous: Mapping[str, str], *, top_n: int, top_size: int,
                    rest_size: int) -> list[int]:
    """Batch index per contact in rank order, keeping previous batches where they still fit.

    Args:
        ids: contact ids sorted by rank (position = rank).
        previous: contact_id -> batch key of the last run.

    Returns:
        One batch index per entry of ``ids``.
    """
    top_batches = -(-top_n // top_size)
    members: dict[int, int] = {}
    out: list[int | None] = [None] * len(ids)
    # Keepers first, in rank order: when a batch is over its size (the sizes changed), the
    # busiest of its contacts stay.
    for rank, cid in enumerate(ids):
        top = rank < top_n
        idx = _key_index(previous.get(cid))
        if idx is None or (idx < top_batches) != top:
            continue
        if members.get(idx, 0) < (top_size if top else rest_size):
            out[rank] = idx
            members[idx] = members.get(idx, 0) + 1
    newcomers = [rank for rank, idx in enumerate(out) if idx is None]
    for top, size in ((True, top_size), (False, rest_size)):
        ranks = [r for r in newcomers if (r < top_n) == top]
        if not ranks:
            continue
        open_ = [b for b, n in members.items() if (b < top_batches) == top and n < size]
        heapq.heapify(open_)
        for rank in ranks:
            if not open_:
                heapq.heappush(open_, _new_index(members, top, top_batches))
            b = open_[0]
            out[rank] = b
            members[b] = members.get(b, 0) + 1
            if members[b] >= size:
                heapq.heappop(open_)
    return [int(i) for i in out]  # type: ignore[arg-type]  # every rank was filled above


def _new_index(members: Mapping[int, int], top: bool, top_batches: int) -> int:
    """The index a new batch of the tier gets: the lowest unused top index, or after the highest rest index."""
    if top:
        return next(i for i in range(top_batches) if not members.get(i))
    return max((b + 1 for b in members if b >= top_batches), default=top_batches)


def _key_index(key: str | None) -> int | None:
    m = _KEY_RE.match(key) if key else None
    return int(m.group(1)) if m else None


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
