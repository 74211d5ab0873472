"""The staged partition files a load reads (``staging/chunks/batch=<key>.parquet``).

DuckDB's ``read_parquet`` reads a plain file straight from disk, in parallel; it cannot read a
sealed one (an encrypted home), which :mod:`brb_pipeline.core.crypto.files` decrypts into an
Arrow table that the load registers and inserts from instead. The checks that every load runs
first (the embedding model and dimension in a file's footer, its batch and contact ids) read
only those columns, so a sealed file is decrypted twice but decoded in full once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from brb_pipeline.core.crypto import files as sealed_files
from brb_pipeline.core.errors import StoreError

#: Parquet footer keys :func:`~brb_pipeline.core.store.chunks.write_partition` writes.
META_MODEL = b"brb.embedding_model"
META_DIM = b"brb.dim"
#: The columns a load checks before it inserts (kept from the first read of a sealed file).
KEY_COLUMNS = ["batch", "contact_id"]


@dataclass
class Staged:
    """The non-empty partition files of a load: DuckDB reads plain ones from disk; sealed ones
    (an encrypted home) are decrypted by :mod:`~brb_pipeline.core.crypto.files` into Arrow."""

    paths: list[str] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    keys: dict[str, pa.Table] = field(default_factory=dict)  # a sealed file's batch and contact_id

    def __bool__(self) -> bool:
        return bool(self.paths)


def partition_facts(paths: Mapping[str, Path]) -> tuple[str | None, int | None, Staged]:
    """Embedding model and dim shared by the non-empty partition files (read from Parquet
    footers), and those files. Empty partitions only delete their batch's rows, so an empty
    file cannot veto a load whatever dimension it was written with."""
    facts: set[tuple[str, int]] = set()
    staged = Staged()
    for batch, p in paths.items():
        p = Path(p)
        if not p.exists():
            raise StoreError(f"partition file for {batch} is missing ({p}): rerun that partition")
        keys = None
        try:
            if sealed_files.sealed(p):
                keys = sealed_files.read_arrow(p, columns=KEY_COLUMNS)
                md, rows = keys.schema.metadata or {}, keys.num_rows
            else:
                pf = pq.ParquetFile(p)
                md, rows = pf.schema_arrow.metadata or {}, pf.metadata.num_rows
        except (pa.ArrowException, OSError):
            raise StoreError(f"partition file {p.name} is corrupt: rerun that partition") from None
        if META_MODEL not in md or META_DIM not in md:
            raise StoreError(f"partition file {p.name} was not written by brb: rerun that partition")
        if rows:
            facts.add((md[META_MODEL].decode(), int(md[META_DIM])))
            staged.paths.append(str(p))
            staged.rows.append(rows)
            if keys is not None:
                staged.keys[str(p)] = keys
    if len(facts) > 1:
        raise StoreError(
            f"partitions were embedded with different models {sorted(facts)}: re-embed them all"
        )
    model, dim = next(iter(facts)) if facts else (None, None)
    return model, dim, staged


@contextmanager
def scan(con: duckdb.DuckDBPyConnection, staged: Staged, group: list[str] | None = None,
         columns: list[str] | None = None) -> Iterator[tuple[str, list]]:
    """``(FROM clause, its parameters)`` over ``group`` (default every file): ``read_parquet`` of
    the paths, or, when any is sealed, their ``columns`` as a registered Arrow table."""
    group = staged.paths if group is None else group
    if not any(f in staged.keys for f in group):
        yield "read_parquet(?::VARCHAR[], hive_partitioning = false)", [group]
        return
    use_keys = columns == KEY_COLUMNS
    parts = [staged.keys[f] if use_keys and f in staged.keys else sealed_files.read_arrow(f, columns=columns)
             for f in group]
    con.register("_brb_staged", pa.concat_tables([part.replace_schema_metadata(None) for part in parts]))
    try:
        yield "_brb_staged", []
    finally:
        con.unregister("_brb_staged")
