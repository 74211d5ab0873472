"""Per-contact stats on a tiny example computed by hand."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl

from brb_pipeline.core.contacts.stats import STATS_SCHEMA, contact_stats

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)

# (contact_id, chat_id, message_id, is_from_me, seconds after T0)
ROWS = [
    ("c1", "A", "m1", False, 0),  # them
    ("c1", "A", "m2", False, 10),  # them again: not a reply
    ("c1", "A", "m3", True, 40),  # my reply: 30 s after m2 (the immediately previous message)
    ("c1", "A", "m4", False, 100),  # their reply: 60 s
    ("c1", "A", "m5", True, 100),  # same second, later id: my reply after 0 s
    ("c1", "A", "m6", False, 100_000),  # 99,900 s later: beyond 12 h, a new conversation
    ("c1", "A", "m7", True, 100_030),  # my reply: 30 s
    ("c1", "B", "b1", True, 5),  # other chat of the same person: shifts never cross chats
    ("c1", "B", "b2", False, 25),  # their reply: 20 s (m1 at t=0 in chat A does not count)
    ("c2", "G", "g1", True, 0),  # only me: no replies either way
    ("c2", "G", "g2", True, 50),
    ("c3", "D", "d1", False, 7),  # one incoming message
]


def _frame(rows=ROWS) -> pl.DataFrame:
    return pl.DataFrame(
        [(c, chat, mid, me, T0 + timedelta(seconds=s)) for c, chat, mid, me, s in rows],
        schema={
            "contact_id": pl.Utf8, "chat_id": pl.Utf8, "message_id": pl.Utf8,
            "is_from_me": pl.Boolean, "ts": pl.Datetime("us", "UTC"),
        },
        orient="row",
    )


def test_hand_computed_stats():
    # Input order must not matter: shuffle it.
    out = contact_stats(_frame().sample(fraction=1.0, shuffle=True, seed=3))
    assert out.schema == STATS_SCHEMA
    s = timedelta(seconds=1)
    assert out.rows() == [
        # c1: 9 messages, 4 mine; my replies 30, 0, 30 -> 20 s; theirs 60, 20 -> 40 s
        ("c1", 9, 4, 5, T0, T0 + 100_030 * s, 20.0, 40.0),
        # c2: only my messages -> no averages
        ("c2", 2, 2, 0, T0, T0 + 50 * s, None, None),
        # c3: one message from them
        ("c3", 1, 0, 1, T0 + 7 * s, T0 + 7 * s, None, None),
    ]


def test_max_gap_is_respected():
    out = contact_stats(_frame(), max_response_gap_s=25)
    c1 = out.filter(pl.col("contact_id") == "c1").row(0, named=True)
    assert c1["avg_response_s_me"] == 0.0  # only the 0 s reply is within 25 s
    assert c1["avg_response_s_them"] == 20.0  # 60 s is too slow, 20 s counts


def test_subsecond_delays_are_exact():
    rows = [("c", "A", "a", False, 0), ("c", "A", "b", True, 0.25)]
    out = contact_stats(_frame(rows))
    assert out.item(0, "avg_response_s_me") == 0.25


def test_empty_and_extra_columns():
    assert contact_stats(_frame([])).schema == STATS_SCHEMA
    extra = _frame().with_columns(pl.lit("x").alias("text"))  # other columns are ignored
    assert contact_stats(extra).equals(contact_stats(_frame()))
