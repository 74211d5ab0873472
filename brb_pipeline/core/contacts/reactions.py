"""Tapbacks counted per person: the reactions each person gave, by kind, and those their messages got.

Reactions are already folded onto the message they react to (``reactions``, a list of
:data:`brb_pipeline.core.records.REACTION`, final state: a removed tapback is gone). Classic kinds
(love, like, dislike, laugh, emphasize, question) count under their name; an emoji tapback counts
under its emoji ("😂"), or "emoji" when the database did not say which; a sticker tapback counts
under "sticker". Only counts leave this module.
"""

from __future__ import annotations

import json

import polars as pl

REACTION_STATS_SCHEMA = pl.Schema(
    {
        "person_id": pl.Utf8,
        "reactions_sent": pl.UInt32,  # tapbacks they gave, any chat
        "reactions_received": pl.UInt32,  # tapbacks anyone (me included) gave their messages
        "reactions_json": pl.Utf8,  # {"love": 3, "😂": 2, "sticker": 1}: theirs, by kind, most first
    }
)


def person_reactions(messages: pl.DataFrame, handle_person: pl.DataFrame) -> pl.DataFrame:
    """REACTION_STATS_SCHEMA rows, one per person who gave or got a tapback, sorted by person_id.

    Args:
        messages: ``sender, reactions`` per message (``reactions`` may be missing: no rows).
        handle_person: ``handle, person_id``.
    """
    if "reactions" not in messages.columns or messages.height == 0:
        return pl.DataFrame(schema=REACTION_STATS_SCHEMA)
    rx = messages.select("sender", "reactions").filter(pl.col("reactions").list.len() > 0)
    hp = handle_person.select("handle", "person_id")
    got = (rx.filter(pl.col("sender").is_not_null())
           .select("sender", pl.col("reactions").list.len().alias("n"))
           .join(hp, left_on="sender", right_on="handle", how="inner")
           .group_by("person_id").agg(pl.col("n").sum().alias("reactions_received")))
    given = (rx.select(pl.col("reactions").explode()).unnest("reactions")
             .filter(pl.col("sender").is_not_null())
             .with_columns(pl.when(pl.col("kind") == "emoji").then(pl.coalesce("emoji", pl.lit("emoji")))
                           .otherwise(pl.col("kind")).alias("_k"))
             .join(hp, left_on="sender", right_on="handle", how="inner")
             .group_by("person_id", "_k").len())
    kinds: dict[str, dict[str, int]] = {}
    for pid, k, n in given.sort(["person_id", "len", "_k"], descending=[False, True, False]).iter_rows():
        kinds.setdefault(pid, {})[k] = int(n)
    sent = pl.DataFrame({"person_id": list(kinds), "reactions_sent": [sum(d.values()) for d in kinds.values()],
                         "reactions_json": [json.dumps(d, ensure_ascii=False) for d in kinds.values()]},
                        schema={"person_id": pl.Utf8, "reactions_sent": pl.UInt32, "reactions_json": pl.Utf8})
    out = sent.join(got, on="person_id", how="full", coalesce=True).with_columns(
        pl.col("reactions_sent").fill_null(0), pl.col("reactions_received").fill_null(0))
    return out.select(list(REACTION_STATS_SCHEMA.names())).cast(dict(REACTION_STATS_SCHEMA)).sort("person_id")
