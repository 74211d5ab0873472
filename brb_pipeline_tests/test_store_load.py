"""Loading partitions file by file in one transaction, under a DuckDB memory limit."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from brb_pipeline.core import metadata
from brb_pipeline.core.store import duck
from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.store.chunks import LoadMemoryError
from brb_pipeline.stages.store import run_load
from brb_pipeline.config.settings import Settings
from brb_pipeline_tests.helpers.store import write


def test_a_failing_later_file_leaves_no_earlier_file_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "INSERT_GROUP_ROWS", 1)  # one INSERT per file: the failure comes later
    con = duck.connect(tmp_path / "brb.duckdb")
    store.load_partitions(con, {"batch-001": write(tmp_path, "batch-001", "a", 4)})
    good = write(tmp_path, "batch-002", "b", 5)
    fine = pq.read_table(write(tmp_path, "batch-003", "c", 3))
    cols = {n: fine.column(n) for n in fine.schema.names}
    cols["position"] = pa.array(["x", "y", "z"])  # cannot be cast: the third INSERT fails
    pq.write_table(pa.table(cols).replace_schema_metadata(fine.schema.metadata), fine_path := good.with_name("batch=batch-003.parquet"))
    with pytest.raises(StoreError, match="previous chunks kept"):
        # batch-001 is replaced and batch-002 inserted before batch-003 fails
        store.load_partitions(con, {"batch-001": write(tmp_path, "batch-001", "a", 2), "batch-002": good,
                                    "batch-003": fine_path})
    assert store.store_stats(con)["batches"] == {"batch-001": 4}
    con.close()


@pytest.mark.parametrize("group_rows", [1, 5, 9, 10_000])
def test_files_are_inserted_in_row_bounded_groups_with_every_row_loaded(tmp_path, monkeypatch, group_rows):
    monkeypatch.setattr(store, "INSERT_GROUP_ROWS", group_rows)
    parts = {f"batch-{i:03d}": write(tmp_path, f"batch-{i:03d}", f"c{i}", n) for i, n in enumerate([4, 5, 3, 6])}
    con = duck.connect(tmp_path / "brb.duckdb")
    report = store.load_partitions(con, parts)
    assert report.inserted == 18
    assert store.store_stats(con)["batches"] == {"batch-000": 4, "batch-001": 5, "batch-002": 3, "batch-003": 6}
    assert con.execute("SELECT count(DISTINCT chunk_id) FROM chunks").fetchone()[0] == 18
    con.close()


def _wide_partitions(root: Path, rows: int, chars: int) -> dict[str, Path]:
    """Four partitions under ``root/staging`` of ``rows`` chunks with distinct ``chars``-long texts."""
    text = ("a chunk of conversation about the weekend plans and the horror movie marathon " * (chars // 78 + 1))[:chars]
    return {f"batch-{i:03d}": write(root, f"batch-{i:03d}", f"c{i}", rows, texts=[f"{i}{j:05d}{text}" for j in range(rows)])
            for i in range(4)}


def test_load_larger_than_the_memory_limit_spills_beside_the_store(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    path = tmp_path / "home" / "brb.duckdb"
    parts = _wide_partitions(tmp_path, 8000, 600)  # ~80 MB of text (content and embedding_text)
    con = duck.connect(path, memory_limit="32MB")
    limit, tmp_dir = con.execute("SELECT current_setting('memory_limit'), current_setting('temp_directory')").fetchone()
    assert limit.replace(" ", "").startswith("30.5MiB") and tmp_dir == str(path) + ".tmp"
    r = store.load_partitions(con, parts)
    assert r.inserted == 32000
    assert con.execute("SELECT count(DISTINCT content), min(length(content)) FROM chunks").fetchone() == (32000, 606)
    con.close()
    assert list(cwd.iterdir()) == []  # nothing spilled into the working directory


def test_run_load_retries_without_the_limit_when_rows_do_not_fit(tmp_path, caplog):
    s = Settings(home=tmp_path / "home", duckdb_load_memory_limit="16MB")
    parts = _wide_partitions(s.home, 1500, 8000)  # rows too wide for 16 MB per vector
    con = duck.connect(s.duckdb_path, memory_limit="16MB")
    with pytest.raises(LoadMemoryError, match="previous chunks kept"):
        store.load_partitions(con, parts)
    assert store.store_stats(con)["chunks"] == 0
    con.close()
    metadata.sync_batches(s.brb_db, pl.DataFrame({"batch": list(parts), "contacts": [1] * 4, "messages": [9] * 4,
                                                  "fingerprint": [f"fp{b}" for b in parts]}))
    for b in parts:
        metadata.mark_embedded(s.brb_db, b, f"fp{b}", "test@1", 1500)
    meta = run_load(s)
    assert meta["rows_inserted"] == meta["chunks"] == 6000
    assert any("loading without it" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("bad", ["lots", "64", "64 MB; DROP TABLE chunks", "-1GB"])
def test_memory_limit_must_be_a_size(bad):
    with pytest.raises(StoreError, match="not a size"):
        duck.connect(None, memory_limit=bad)


def test_load_memory_limit_setting_from_the_environment(tmp_path, monkeypatch):
    assert Settings(home=tmp_path).duckdb_load_memory_limit == "256MB"
    monkeypatch.setenv("BRB_DUCKDB_LOAD_MEMORY_LIMIT", "")
    assert Settings.load(tmp_path).duckdb_load_memory_limit == ""  # DuckDB's default
