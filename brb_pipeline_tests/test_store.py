"""Chunk store: Parquet partitions, one-transaction loads, model guard, deletes, connect errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from brb_pipeline.core.store import duck
from brb_pipeline.core.store import index
from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.errors import StoreError
from brb_pipeline_tests.helpers import T0
from brb_pipeline_tests.helpers.store import DIM, make_chunks, make_vectors, write


def test_chunk_arrow_schema_types():
    s = store.chunk_arrow_schema(384)
    assert s.field("embedding").type == pa.list_(pa.float32(), 384)
    assert s.field("start_ts").type == pa.timestamp("us", tz="UTC")
    assert s.field("position").type == pa.int32()
    assert s.field("dim").type == pa.int32()
    assert s.field("embedding_model").type == pa.string()


# The table text of every store written so far: `CREATE TABLE IF NOT EXISTS` must keep matching it.
STORED_DDL_384 = (
    "CREATE TABLE IF NOT EXISTS chunks ("
    "chunk_id VARCHAR NOT NULL, batch VARCHAR NOT NULL, contact_id VARCHAR, chat_id VARCHAR, "
    "channel VARCHAR, conversation INTEGER, position INTEGER, "
    "first_message_id VARCHAR, last_message_id VARCHAR, "
    "start_ts TIMESTAMPTZ, end_ts TIMESTAMPTZ, message_count INTEGER, "
    "content VARCHAR, embedding_text VARCHAR, lexical_extra VARCHAR, "
    "embedding FLOAT[384] NOT NULL, embedding_model VARCHAR NOT NULL)"
)


def test_chunk_layout_is_derived_from_one_declaration(tmp_path):
    from brb_pipeline.core import chunking
    from brb_pipeline.core.store import schema

    assert schema.table_ddl(384) == STORED_DDL_384
    arrow = schema.chunk_arrow_schema(384)
    # partition files: the declaration's columns in order; the frame: its chunking columns
    assert arrow.names == [c.name for c in schema.COLUMNS]
    assert schema.CHUNK_COLUMNS == [c.name for c in schema.COLUMNS if c.made_by == "chunking"]
    assert chunking.CHUNK_SCHEMA is schema.CHUNK_SCHEMA
    assert schema.CHUNK_COLUMNS == arrow.names[: len(schema.CHUNK_COLUMNS)]
    assert schema.TABLE_COLUMNS == [*schema.CHUNK_COLUMNS, "lexical_extra", "embedding", "embedding_model"]
    # the polars frame has the partition's Arrow types column for column (polars writes large strings)
    frame_arrow = pl.DataFrame(schema=schema.CHUNK_SCHEMA).to_arrow().schema
    for name in schema.CHUNK_COLUMNS:
        want = arrow.field(name).type
        assert frame_arrow.field(name).type == (pa.large_string() if want == pa.string() else want), name
    # the table DuckDB creates from the DDL has the table columns, and reads a partition file as is
    con = duck.connect(tmp_path / "s.duckdb")
    con.execute(schema.table_ddl(DIM))
    cols = con.execute("SELECT column_name, is_nullable FROM duckdb_columns() WHERE table_name = 'chunks' "
                       "ORDER BY column_index").fetchall()
    assert [c for c, _ in cols] == schema.TABLE_COLUMNS
    assert [c for c, nullable in cols if not nullable] == [c.name for c in schema.COLUMNS if c.not_null]
    p = write(tmp_path, "batch-001", "a", 3)
    cols_sql = ", ".join(schema.TABLE_COLUMNS)
    con.execute(f"INSERT INTO chunks ({cols_sql}) SELECT {cols_sql} FROM read_parquet(?)", [str(p)])
    assert con.execute("SELECT count(*), any_value(len(embedding)) FROM chunks").fetchone() == (3, DIM)
    con.close()


def test_write_partition_roundtrip_and_atomic(tmp_path):
    emb = make_vectors(5, 1)
    p = store.write_partition(tmp_path, "batch-001", make_chunks("batch-001", "a", 5), emb, "m@abc")
    assert p == tmp_path / "chunks" / "batch=batch-001.parquet"
    assert [f.name for f in p.parent.iterdir()] == [p.name]  # no temp file left behind
    t = pq.read_table(p)
    assert t.schema.metadata[b"brb.embedding_model"] == b"m@abc"
    assert t.num_rows == 5
    back = np.stack(t.column("embedding").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(back, emb)
    assert t.column("dim").to_pylist() == [DIM] * 5


def test_write_empty_partition_is_valid(tmp_path):
    p = store.write_partition(tmp_path, "batch-009", make_chunks("batch-009", "z", 0), np.zeros((0, DIM), np.float32), "m@1")
    t = pq.read_table(p)
    assert t.num_rows == 0 and t.schema.field("embedding").type == pa.list_(pa.float32(), DIM)


@pytest.mark.parametrize(
    ("batch", "n_rows", "emb_shape", "match"),
    [
        ("batch-001", 3, (2, DIM), "3 chunks but 2 embedding rows"),  # row mismatch
        ("batch-001", 3, (3 * DIM,), "must be \\(n, dim\\)"),  # 1-D vectors
        ("../evil", 3, (3, DIM), "not a safe partition name"),  # path traversal in the key
    ],
)
def test_write_partition_rejects_bad_input(tmp_path, batch, n_rows, emb_shape, match):
    with pytest.raises(ValueError, match=match):
        store.write_partition(tmp_path, batch, make_chunks("batch-001", "a", n_rows), np.zeros(emb_shape, np.float32), "m")


def test_load_rerun_replaces_rows_without_duplicates(tmp_path):
    p1, p2 = write(tmp_path, "batch-001", "a", 10), write(tmp_path, "batch-002", "b", 7)
    con = duck.connect(tmp_path / "brb.duckdb")
    r = store.load_partitions(con, {"batch-001": p1, "batch-002": p2})
    assert (r.inserted, r.deleted) == (17, 0)
    r = store.load_partitions(con, {"batch-001": p1})  # rerun of one partition
    assert (r.inserted, r.deleted) == (10, 10)
    stats = store.store_stats(con)
    assert stats["chunks"] == 17 and stats["batches"] == {"batch-001": 10, "batch-002": 7}
    assert con.execute("SELECT count(*) = count(DISTINCT chunk_id) FROM chunks").fetchone()[0]
    p1 = write(tmp_path, "batch-001", "a", 4)  # the partition shrank
    store.load_partitions(con, {"batch-001": p1})
    assert store.store_stats(con)["batches"] == {"batch-001": 4, "batch-002": 7}
    r = store.load_partitions(con, {}, remove_batches=["batch-002"])
    assert r.deleted == 7 and store.store_stats(con)["batches"] == {"batch-001": 4}
    # Timestamps and ints survive with their types.
    row = con.execute("SELECT start_ts, position, embedding_model FROM chunks ORDER BY position LIMIT 1").fetchone()
    assert row == (T0, 0, "test@1")
    con.close()


def test_empty_partition_clears_its_batch_whatever_its_dim(tmp_path):
    con = duck.connect(tmp_path / "brb.duckdb")
    store.load_partitions(con, {"batch-001": write(tmp_path, "batch-001", "a", 5), "batch-002": write(tmp_path, "batch-002", "b", 3)})
    empty = store.write_partition(tmp_path / "staging", "batch-002", make_chunks("batch-002", "b", 0), np.zeros((0, 24), np.float32), "other@9")
    r = store.load_partitions(con, {"batch-002": empty})
    assert (r.inserted, r.deleted) == (0, 3)
    stats = store.store_stats(con)
    assert stats["batches"] == {"batch-001": 5} and stats["embedding_model"] == "test@1" and stats["dim"] == DIM
    con.close()


def test_contact_moving_to_another_batch_is_not_duplicated(tmp_path):
    con = duck.connect(tmp_path / "brb.duckdb")
    store.load_partitions(con, {"batch-001": write(tmp_path, "batch-001", "a", 5)})
    store.load_partitions(con, {"batch-002": write(tmp_path, "batch-002", "a", 5)})
    assert store.store_stats(con)["batches"] == {"batch-002": 5}
    con.close()


def test_corrupt_partition_keeps_previous_rows(tmp_path):
    con = duck.connect(tmp_path / "brb.duckdb")
    store.load_partitions(con, {"batch-001": write(tmp_path, "batch-001", "a", 6)})
    bad = write(tmp_path, "batch-001", "a", 9)
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])  # truncated, e.g. disk full
    with pytest.raises(StoreError, match="corrupt: rerun that partition"):
        store.load_partitions(con, {"batch-001": bad})
    assert store.store_stats(con)["chunks"] == 6
    con.close()


def test_failure_inside_the_transaction_rolls_back_rows_and_indexes(tmp_path):
    con = duck.connect(tmp_path / "brb.duckdb")
    store.load_partitions(con, {"batch-001": write(tmp_path, "batch-001", "a", 6)})
    index.build_indexes(con)
    # A footer that looks like ours over data that cannot be cast: the INSERT fails mid-load.
    good = pq.read_table(write(tmp_path, "batch-002", "b", 3))
    cols = {n: good.column(n) for n in good.schema.names}
    cols["position"] = pa.array(["x", "y", "z"])
    bad_table = pa.table(cols).replace_schema_metadata(good.schema.metadata)
    bad = tmp_path / "staging" / "chunks" / "batch=batch-002.parquet"
    pq.write_table(bad_table, bad)
    with pytest.raises(StoreError, match="failed, previous chunks kept"):
        store.load_partitions(con, {"batch-002": bad, "batch-001": write(tmp_path, "batch-001", "a", 2)})
    assert store.store_stats(con)["batches"] == {"batch-001": 6}
    status = index.index_status(con)
    assert status["hnsw"]["present"] and status["fts"]["present"] and status["ready"]
    con.close()


def test_model_mismatch_refused_unless_replace_all(tmp_path):
    con = duck.connect(tmp_path / "brb.duckdb")
    store.load_partitions(con, {"batch-001": write(tmp_path, "batch-001", "a", 5, model="minilm@1")})
    other = write(tmp_path, "batch-002", "b", 3, model="nomic@2")
    with pytest.raises(StoreError, match="re-embed everything"):
        store.load_partitions(con, {"batch-002": other})
    assert store.store_stats(con)["models"] == {"minilm@1": 5}
    # A different dimension is refused as well.
    p768 = store.write_partition(tmp_path / "s2", "batch-003", make_chunks("batch-003", "c", 2), make_vectors(2, 0, 24), "minilm@1")
    with pytest.raises(StoreError, match="24-d"):
        store.load_partitions(con, {"batch-003": p768})
    r = store.load_partitions(con, {"batch-002": other}, replace_all=True)
    assert r.replaced_all and r.deleted == 5
    stats = store.store_stats(con)
    assert stats["models"] == {"nomic@2": 3} and stats["embedding_model"] == "nomic@2"
    con.close()


def test_mixed_models_among_partitions_refused(tmp_path):
    con = duck.connect(tmp_path / "brb.duckdb")
    a = write(tmp_path, "batch-001", "a", 2, model="m@1")
    b = write(tmp_path, "batch-002", "b", 2, model="m@2")
    with pytest.raises(StoreError, match="different models"):
        store.load_partitions(con, {"batch-001": a, "batch-002": b})
    con.close()


def test_missing_partition_file(tmp_path):
    con = duck.connect(None)
    with pytest.raises(StoreError, match="missing"):
        store.load_partitions(con, {"batch-001": tmp_path / "nope.parquet"})


def test_delete_contacts_rebuilds_indexes_without_their_text(tmp_path):
    con = duck.connect(tmp_path / "brb.duckdb")
    a = write(tmp_path, "batch-001", "a", 4, texts=["zanzibar trip"] * 4)
    b = write(tmp_path, "batch-001b", "b", 3, texts=["grocery list"] * 3)
    store.load_partitions(con, {"batch-001": a, "batch-001b": b})
    index.build_indexes(con)
    assert store.delete_contacts(con, ["a"]) == 4
    assert store.store_stats(con)["chunks"] == 3
    status = index.index_status(con)
    assert status["ready"] and status["hnsw"]["rows"] == 3
    terms = {t for (t,) in con.execute("SELECT term FROM fts_main_chunks.dict").fetchall()}
    assert "zanzibar" not in terms and "grocery" in terms
    assert store.delete_batches(con, ["batch-001b"]) == 3
    store.clear(con)
    assert store.store_stats(con)["chunks"] == 0
    con.close()


def test_connect_loads_extensions_offline_and_reopens(tmp_path):
    path = tmp_path / "brb.duckdb"
    con = duck.connect(path)
    loaded = {n for (n,) in con.execute("SELECT extension_name FROM duckdb_extensions() WHERE loaded").fetchall()}
    assert {"vss", "fts"} <= loaded
    assert con.execute("SELECT current_setting('autoinstall_known_extensions')").fetchone()[0] is False
    store.load_partitions(con, {"batch-001": write(tmp_path, "batch-001", "a", 3)})
    con.close()
    ro = duck.connect(path, read_only=True)
    assert store.store_stats(ro)["chunks"] == 3
    ro.close()


def test_load_commits_durably_and_restores_the_checkpoint_threshold(tmp_path):
    """The load commits as a checkpoint (no WAL round trip): rows survive a process that dies
    right after the load without closing, and the connection's threshold is put back."""
    path = tmp_path / "brb.duckdb"
    part = write(tmp_path, "batch-001", "a", 5)
    loader = textwrap.dedent(
        f"""
        import os, pathlib
        from brb_pipeline import keys
        keys.install()  # a script is an entry point
        from brb_pipeline.core.store import duck
        from brb_pipeline.core.store import chunks as store
        con = duck.connect(pathlib.Path({str(path)!r}))
        con.execute("SET checkpoint_threshold = '1GiB'")
        store.load_partitions(con, {{"batch-001": pathlib.Path({str(part)!r})}})
        print(con.execute("SELECT current_setting('checkpoint_threshold')").fetchone()[0], flush=True)
        os._exit(0)  # no close, no final checkpoint
        """
    )
    out = subprocess.run([sys.executable, "-c", loader], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0 GiB"  # not the load's 0 bytes
    ro = duck.connect(path, read_only=True)
    assert store.store_stats(ro)["chunks"] == 5
    ro.close()


def test_connect_errors(tmp_path):
    con = duck.connect(tmp_path / "new" / "home" / "brb.duckdb")  # a fresh home is created
    con.close()
    assert (tmp_path / "new" / "home" / "brb.duckdb").exists()
    with pytest.raises(StoreError, match="no search store at .*run `brb ingest` first"):
        duck.connect(tmp_path / "absent.duckdb", read_only=True)
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(StoreError) as exc:
        duck.connect(junk)
    assert str(exc.value) == f"{junk} is not a DuckDB database (damaged?): run `brb reindex` to rebuild it from staging"


def test_locked_store_gives_one_line_error(tmp_path):
    path = tmp_path / "brb.duckdb"
    holder = textwrap.dedent(
        f"""
        import sys, time
        from brb_pipeline import keys
        keys.install()  # a script is an entry point
        from brb_pipeline.core.store import duck
        con = duck.connect(__import__("pathlib").Path({str(path)!r}))
        print("ready", flush=True)
        time.sleep(30)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1])
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError) as exc:
            duck.connect(path)
        msg = str(exc.value)
        assert msg == f"brb.duckdb is in use by another brb process (pid {proc.pid}) — wait for it or stop it"
    finally:
        proc.kill()
        proc.wait()
