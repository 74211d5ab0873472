"""Contact batches: counts and sizes, ranking, and content fingerprints."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

from brb_pipeline.core.contacts.batching import ASSIGNMENT_SCHEMA, assign_batches, batch_fingerprints, batch_keys
from brb_pipeline.core.records import REACTION, UNKNOWN_CONTACT_ID

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def _stats(n: int) -> pl.DataFrame:
    # contact i has n - i messages, so rank == i; the last one is the unknown bucket
    ids = [f"c:{i:05d}" for i in range(n - 1)] + ([UNKNOWN_CONTACT_ID] if n else [])
    return pl.DataFrame({"contact_id": ids, "messages": list(range(n, 0, -1))}, schema={"contact_id": pl.Utf8, "messages": pl.UInt32})


@pytest.mark.parametrize(
    "n, sizes",
    [
        (0, []),  # nobody: no batches
        (1, [1]),  # only the unknown bucket
        (50, [10] * 5),  # exactly the top block
        (51, [10] * 5 + [1]),  # one contact spills into the first rest batch
        (1315, [10] * 5 + [50] * 25 + [15]),  # the chitchat corpus: 1,265 after the top 50
    ],
)
def test_batch_counts_and_sizes(n, sizes):
    a = assign_batches(_stats(n))
    assert a.schema == ASSIGNMENT_SCHEMA
    assert a.height == n and a.get_column("contact_id").is_unique().all()  # exactly one batch each
    keys = batch_keys(a)
    assert keys == [f"batch-{i:03d}" for i in range(len(sizes))]
    counts = a.group_by("batch").len().sort("batch").get_column("len").to_list()
    assert counts == sizes
    if n:
        assert a.filter(pl.col("contact_id") == UNKNOWN_CONTACT_ID).height == 1


def test_rank_order_and_ties():
    stats = pl.DataFrame(
        {"contact_id": ["b", "a", "c", UNKNOWN_CONTACT_ID, "d"], "messages": [5, 5, 9, 1, 0]}
    )
    a = assign_batches(stats, top_n=2, top_size=1, rest_size=2)
    assert a.rows() == [
        ("c", "batch-000", 0),  # most messages
        ("a", "batch-001", 1),  # tie on 5: contact_id order
        ("b", "batch-002", 2),  # first rest batch
        (UNKNOWN_CONTACT_ID, "batch-002", 3),
        ("d", "batch-003", 4),  # zero messages still gets a batch
    ]


def test_top_n_not_a_multiple_of_top_size():
    a = assign_batches(_stats(30), top_n=15, top_size=10, rest_size=10)
    # top block: 10 + 5, then the rest starts a fresh batch
    assert a.group_by("batch").len().sort("batch").get_column("len").to_list() == [10, 5, 10, 5]


def test_bad_sizes():
    with pytest.raises(ValueError):
        assign_batches(_stats(3), top_size=0)


def _msgs() -> pl.DataFrame:
    love = {"kind": "love", "sender": "+15550102233", "is_from_me": False, "ts": T0, "emoji": None}
    rows = [
        # (batch, contact_id, message_id, seconds, text, edited, reactions)
        ("batch-000", "c:a", "m1", 0, "hello", False, []),
        ("batch-000", "c:a", "m2", 10, "how are you", False, [love]),
        ("batch-000", "c:b", "m3", 20, None, False, []),
        ("batch-001", "c:c", "m4", 30, "other batch", False, []),
    ]
    return pl.DataFrame(
        [(b, c, m, T0 + timedelta(seconds=s), t, e, r) for b, c, m, s, t, e, r in rows],
        schema={
            "batch": pl.Utf8, "contact_id": pl.Utf8, "message_id": pl.Utf8, "ts": pl.Datetime("us", "UTC"),
            "text": pl.Utf8, "edited": pl.Boolean, "reactions": pl.List(REACTION),
        },
        orient="row",
    )


def _set(df: pl.DataFrame, mid: str, **values) -> pl.DataFrame:
    return df.with_columns(
        [pl.when(pl.col("message_id") == mid).then(pl.lit(v, dtype=df.schema[k])).otherwise(pl.col(k)).alias(k) for k, v in values.items()]
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda d: pl.concat([d, _set(d.filter(pl.col("message_id") == "m1"), "m1", message_id="m9")]),  # new message
        lambda d: _set(d, "m1", text="hello!", edited=True),  # edited
        lambda d: _set(d, "m1", edited=True),  # only the edited flag
        lambda d: _set(d, "m1", text=None),  # unsent
        lambda d: d.filter(pl.col("message_id") != "m1"),  # deleted
        lambda d: _set(d, "m2", reactions=[]),  # reaction removed
        lambda d: _set(d, "m1", contact_id="c:b"),  # message moved to another contact
        lambda d: _set(d, "m1", ts=T0 + timedelta(microseconds=1)),  # timestamp
    ],
)
def test_fingerprint_changes_only_for_the_touched_batch(change):
    base = _msgs()
    before, after = batch_fingerprints(base), batch_fingerprints(change(base))
    assert before["batch-000"] != after["batch-000"]
    assert before["batch-001"] == after["batch-001"]


def test_fingerprint_is_stable_and_order_free():
    base = _msgs()
    fp = batch_fingerprints(base)
    assert set(fp) == {"batch-000", "batch-001"} and all(len(v) == 64 for v in fp.values())
    assert batch_fingerprints(base.reverse()) == fp
    assert batch_fingerprints(base.select(reversed(base.columns))) == fp
    assert batch_fingerprints(base.head(0)) == {}


def test_fingerprint_is_identical_in_another_process(tmp_path):
    path = tmp_path / "msgs.parquet"
    _msgs().write_parquet(path)
    code = (
        "import json, sys, polars as pl; from brb_pipeline.core.contacts.batching import batch_fingerprints;"
        "print(json.dumps(batch_fingerprints(pl.read_parquet(sys.argv[1]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
        cwd=Path(__file__).resolve().parents[1], env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert json.loads(out.stdout) == batch_fingerprints(_msgs())
