"""The chunk layout, declared once: the ``chunks`` table, its partition files and the chunk frame.

:data:`COLUMNS` is the one ordered declaration. Chunking produces the ``chunking`` columns (the
polars :data:`CHUNK_SCHEMA`); :func:`~brb_pipeline.core.store.chunks.write_partition` adds the
``store`` columns and ``dim`` (partition files only, :func:`chunk_arrow_schema`); the table holds
every column but ``dim`` (:func:`table_ddl`, :data:`TABLE_COLUMNS`).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import pyarrow as pa


@dataclass(frozen=True)
class Column:
    """One chunk column.

    Attributes:
        name: column name (frame, Parquet and SQL alike).
        kind: ``text``, ``int``, ``time`` (UTC microseconds) or ``vector`` (``dim`` float32).
        made_by: ``chunking`` (in the chunk frame), ``store`` (added when a partition is written)
            or ``file`` (partition files only, not in the table).
        not_null: the table refuses NULL here.
    """

    name: str
    kind: str
    made_by: str = "chunking"
    not_null: bool = False


COLUMNS: tuple[Column, ...] = (
    Column("chunk_id", "text", not_null=True),
    Column("batch", "text", not_null=True),
    Column("contact_id", "text"),
    Column("chat_id", "text"),
    Column("channel", "text"),
    Column("conversation", "int"),
    Column("position", "int"),
    Column("first_message_id", "text"),
    Column("last_message_id", "text"),
    Column("start_ts", "time"),
    Column("end_ts", "time"),
    Column("message_count", "int"),
    Column("content", "text"),
    Column("embedding_text", "text"),
    Column("lexical_extra", "text", made_by="store"),
    Column("embedding", "vector", made_by="store", not_null=True),
    Column("embedding_model", "text", made_by="store", not_null=True),
    Column("dim", "int", made_by="file"),
)

# kind -> (polars, Arrow, DuckDB) type; a vector's types are built from the store's dimension.
_TYPES = {
    "text": (pl.Utf8, pa.string(), "VARCHAR"),
    "int": (pl.Int32, pa.int32(), "INTEGER"),
    "time": (pl.Datetime("us", "UTC"), pa.timestamp("us", tz="UTC"), "TIMESTAMPTZ"),
}


def _arrow_type(col: Column, dim: int) -> pa.DataType:
    return pa.list_(pa.float32(), int(dim)) if col.kind == "vector" else _TYPES[col.kind][1]


def _sql_type(col: Column, dim: int) -> str:
    return f"FLOAT[{int(dim)}]" if col.kind == "vector" else _TYPES[col.kind][2]


#: The chunk frame handed over by chunking, in table order.
CHUNK_SCHEMA = pl.Schema({c.name: _TYPES[c.kind][0] for c in COLUMNS if c.made_by == "chunking"})
#: Columns of the chunk frame, in table order.
CHUNK_COLUMNS: list[str] = CHUNK_SCHEMA.names()
#: Columns of the ``chunks`` table, in order (what a load inserts).
TABLE_COLUMNS: list[str] = [c.name for c in COLUMNS if c.made_by != "file"]


def chunk_arrow_schema(dim: int) -> pa.Schema:
    """Arrow schema of one partition file.

    Args:
        dim: embedding dimension; ``embedding`` is a fixed-size list of ``dim`` float32.
    """
    return pa.schema([(c.name, _arrow_type(c, dim)) for c in COLUMNS])


def table_ddl(dim: int) -> str:
    """``CREATE TABLE IF NOT EXISTS chunks (...)`` for vectors of ``dim`` float32."""
    cols = ", ".join(
        f"{c.name} {_sql_type(c, dim)}{' NOT NULL' if c.not_null else ''}" for c in COLUMNS if c.made_by != "file"
    )
    return f"CREATE TABLE IF NOT EXISTS chunks ({cols})"
