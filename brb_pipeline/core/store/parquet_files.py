"""Staged Parquet files written whole or block by block, always through a temp file and a rename
(readers never see half a file), sealed when the home is encrypted (``core.crypto.files``)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl

from brb_pipeline.core.crypto import files


def atomic_write_parquet(frame: pl.DataFrame, path: Path, metadata: dict[str, str] | None = None) -> None:
    """Write a polars frame to ``path`` via a temp file and rename (readers never see half a
    file), sealed when the home is encrypted (:func:`brb_pipeline.core.crypto.files.write_bytes`).

    Polars' own writer makes the bytes: a plaintext home's files stay what they were (pyarrow's
    writer made a 200K-message file 19% larger and 30% slower to write).

    Args:
        metadata: Parquet key-value metadata to store with the file.
    """
    buf = io.BytesIO()
    frame.write_parquet(buf, compression="zstd", statistics=True, metadata=metadata)
    files.write_bytes(path, buf.getbuffer())


@contextmanager
def atomic_parquet_writer(path: Path, schema: pl.Schema) -> Iterator[Callable[[pl.DataFrame], None]]:
    """Write a Parquet file block by block, one row group per block, through a temp file.

    The file appears only when the with-block ends normally (sealed in an encrypted home); on an
    error an earlier file at ``path`` stays as it was.

    Args:
        path: the final file.
        schema: the polars schema of every block (column order included).

    Yields:
        ``write(frame)``: appends one block (empty blocks are skipped).
    """
    arrow_schema = pl.DataFrame(schema=schema).to_arrow().schema
    with files.parquet_writer(path, arrow_schema, compression="zstd") as write_table:
        def write(frame: pl.DataFrame) -> None:
            if frame.height:
                table = frame.to_arrow()
                write_table(table if table.schema == arrow_schema else table.cast(arrow_schema))

        yield write


#: Rows per row group of a grouped file at most (see :func:`write_grouped`).
GROUP_ROWS = 50_000


def write_grouped(write: Callable[[pl.DataFrame], None], frame: pl.DataFrame, column: str,
                  max_rows: int = GROUP_ROWS) -> None:
    """Append ``frame`` through an :func:`atomic_parquet_writer`'s ``write``, one row group per
    run of equal ``column`` values (a long run in slices of ``max_rows``).

    With the frame sorted by ``column``, a reader of one value decodes only its row groups
    (:func:`brb_pipeline.core.crypto.files.read_parquet_where`): ``messages`` is kept so, one
    contact batch per row group.
    """
    for part in frame.partition_by(column, maintain_order=True):
        for lo in range(0, part.height, max_rows):
            write(part.slice(lo, max_rows))
