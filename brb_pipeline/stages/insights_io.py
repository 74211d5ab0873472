"""What the analyzing stages read and write: the store's rows and vectors (read-only), and
Parquet files that carry what they were made from in their key-value metadata."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from brb_pipeline.core.crypto import files
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.store import duck
from brb_pipeline.core.store.parquet_files import atomic_write_parquet
from brb_pipeline.stages.store import GENERATION
from brb_pipeline.config.settings import Settings

log = logging.getLogger("brb")

META_KEY = "brb.insights"  # Parquet key-value metadata: what the file was made from (JSON)
FORMAT = 1


def load_store(s: Settings, columns: tuple[str, ...] = ("chunk_id",),
               vectors: bool = True) -> tuple[pl.DataFrame, np.ndarray, int]:
    """(chunk rows, (n, dim) float32 embeddings, store generation) from brb.duckdb, in chunk_id
    order. Only the asked ``columns`` (and the vectors when asked) are read: at 64K chunks the
    texts and the vectors are ~100 MB each, and most stages need one of them or neither."""
    rows, emb, gen, _ = load_store_with_model(s, columns, vectors)
    return rows, emb, gen


def load_store_with_model(s: Settings, columns: tuple[str, ...] = ("chunk_id",),
                          vectors: bool = True) -> tuple[pl.DataFrame, np.ndarray, int, str | None]:
    """:func:`load_store` plus the store's embedding model id (None for an empty store)."""
    if not s.duckdb_path.exists():
        raise StoreError(f"no search store at {s.duckdb_path}: run `brb ingest` first")
    cols = list(dict.fromkeys(("chunk_id", *columns)))
    con = duck.connect(s.duckdb_path, read_only=True, memory_limit=s.duckdb_load_memory_limit)
    try:
        if not duck.table_exists(con, "chunks"):
            return pl.DataFrame(), np.zeros((0, 0), np.float32), 0, None
        tbl = con.execute(f"SELECT rowid AS _rowid, {', '.join(cols)} FROM chunks ORDER BY chunk_id").fetch_arrow_table()
        emb = _read_vectors(con, tbl.column("_rowid").to_numpy()) if vectors else np.zeros((0, 0), np.float32)
        gen = int(duck.get_meta(con, GENERATION, 0) or 0)
        model = duck.get_meta(con, "embedding_model")
    finally:
        con.close()
    frame = pl.from_arrow(tbl.drop_columns(["_rowid"]))
    return frame, emb, gen, None if model is None else str(model)


def _read_vectors(con: Any, rowids: np.ndarray, block: int = 8192) -> np.ndarray:
    """The embeddings as one (n, dim) float32 array whose row i belongs to ``rowids[i]``.

    Streamed in table order in blocks and copied into place, so the peak is the array plus one
    block: fetching the column whole and converting it held ~3.5 copies (64K chunks: +321 MB
    for 90 MB of vectors), and sorting it by chunk_id in SQL would make DuckDB hold another.
    """
    n = rowids.size
    if n == 0:
        return np.zeros((0, 0), np.float32)
    order = np.argsort(rowids, kind="stable")
    sorted_ids = rowids[order]
    emb: np.ndarray | None = None
    reader = con.execute("SELECT rowid, embedding FROM chunks").fetch_record_batch(block)
    for rb in reader:
        k = rb.num_rows
        if k == 0:
            continue
        vec = rb.column(1)
        flat = vec.flatten().to_numpy(zero_copy_only=False)
        if emb is None:
            emb = np.empty((n, flat.size // k), np.float32)
        at = order[np.searchsorted(sorted_ids, rb.column(0).to_numpy())]
        emb[at] = flat.reshape(k, -1)
    assert emb is not None
    return emb


def write_with_info(frame: pl.DataFrame, path: Path, info: dict[str, Any]) -> None:
    """Write ``frame`` with ``info`` as its :data:`META_KEY` metadata, via a temp file and rename
    (sealed in an encrypted home)."""
    atomic_write_parquet(frame, path, metadata={META_KEY: json.dumps(info, sort_keys=True)})


def read_with_info(path: Path) -> tuple[pl.DataFrame | None, dict[str, Any]]:
    """(frame, its :data:`META_KEY` metadata) of a file written by :func:`write_with_info`; (None, {}) when
    it is missing or unreadable, ({...}, {}) for a file written before the metadata existed."""
    if not path.exists():
        return None, {}
    try:
        pf = files.parquet_file(path)  # one read (one decryption) for the metadata and the rows
        raw = (pf.metadata.metadata or {}).get(META_KEY.encode())
        info = json.loads(raw) if raw else {}
        frame = pl.from_arrow(pf.read())
    except (OSError, ValueError, pa.ArrowException, pl.exceptions.PolarsError) as e:
        log.warning("Insights - %s unreadable (%s), recomputing it", path.name, type(e).__name__)
        return None, {}
    return frame, info if isinstance(info, dict) else {}
