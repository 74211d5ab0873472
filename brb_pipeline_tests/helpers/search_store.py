"""A two-contact chunk store whose vectors sit at opposite poles of the first axis, both indexes built."""

from __future__ import annotations

import numpy as np

from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.store import duck, index
from brb_pipeline_tests.helpers.store import DIM, make_chunks, make_vectors


def near_far_store(tmp_path, *, near_n=300, far_n=12):
    """Contact "near" has vectors close to +e0; contact "far" has vectors close to -e0."""
    near = make_vectors(near_n, 1) * 0.2
    near[:, 0] += 1.0
    far = make_vectors(far_n, 2) * 0.2
    far[:, 0] -= 1.0
    p1 = store.write_partition(tmp_path / "st", "batch-001", make_chunks("batch-001", "near", near_n), near, "m@1")
    far_texts = [f"far chunk {i} about sailing" for i in range(far_n)]
    p2 = store.write_partition(tmp_path / "st", "batch-002", make_chunks("batch-002", "far", far_n, texts=far_texts), far, "m@1")
    con = duck.connect(tmp_path / "brb.duckdb")
    store.load_partitions(con, {"batch-001": p1, "batch-002": p2})
    index.build_indexes(con, m=8, ef_construction=64)
    return con, near, far


def query_e0():
    q = np.zeros(DIM, np.float32)
    q[0] = 1.0
    return q
