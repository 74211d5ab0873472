"""The ``topics`` and ``profiles`` tables beside the chunks, and their load from the partitions.

Both tables are replaced as a whole from every batch's partition file, inside the caller's
staging copy of the store (so they are published with the chunks, atomically). They exist, empty,
even when nothing was distilled, so readers never miss them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa

from brb_pipeline.core.crypto import files
from brb_pipeline.core.memory.profile import PROFILE_SCHEMA
from brb_pipeline.core.memory.topics import TOPIC_SCHEMA

#: DuckDB's type of each polars type the two schemas use.
_DUCK = {pl.Utf8: "VARCHAR", pl.Int32: "INTEGER", pl.Datetime("us", "UTC"): "TIMESTAMPTZ",
         pl.List(pl.Utf8): "VARCHAR[]"}
#: Columns whose table type says more than the file's (``commitments`` is a JSON text).
_AS = {"commitments": "JSON"}


def _ddl(table: str, schema: pl.Schema, key: str) -> str:
    """``CREATE TABLE`` of a staged file's schema: the columns are declared once, by the stage
    that writes the files (``TOPIC_SCHEMA``, ``PROFILE_SCHEMA``)."""
    cols = ", ".join(f"{c} {_AS.get(c, _DUCK[t])}{' PRIMARY KEY' if c == key else ''}" for c, t in schema.items())
    return f"CREATE TABLE IF NOT EXISTS {table} ({cols})"


TOPICS_DDL = _ddl("topics", TOPIC_SCHEMA, "topic_id")
PROFILES_DDL = _ddl("profiles", PROFILE_SCHEMA, "contact_id")
_TOPIC_COLS = ", ".join(TOPIC_SCHEMA.names())


def create_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(TOPICS_DDL)
    con.execute(PROFILES_DDL)


def _staged(con: duckdb.DuckDBPyConnection, name: str, paths: Sequence[Path]) -> None:
    """Register the rows of ``paths`` as the view ``name``, with each row's ``filename``.

    The files are read through :mod:`brb_pipeline.core.crypto.files` (DuckDB cannot open a sealed
    file); they are small (one batch's topics or profiles each).
    """
    tables = [t.append_column("filename", pa.array([str(p)] * t.num_rows, pa.string()))
              for p in paths for t in [files.read_arrow(p)]]
    con.register(name, pa.concat_tables(tables, promote_options="permissive"))


def load_memory(con: duckdb.DuckDBPyConnection, topic_files: Sequence[Path],
                profile_files: Sequence[Path]) -> dict[str, int]:
    """Replace both tables with the rows of these partition files, in one transaction.

    A contact found in two files (it moved batch and the old batch is not distilled again yet)
    keeps one profile row; a duplicate topic id keeps one row.

    Returns:
        ``{"topics", "profiles"}``: rows now in each table.
    """
    con.execute("BEGIN TRANSACTION")
    try:
        create_tables(con)
        con.execute("DELETE FROM topics")
        con.execute("DELETE FROM profiles")
        if topic_files:
            _staged(con, "_staged_topics", topic_files)
            con.execute(f"INSERT INTO topics SELECT {_TOPIC_COLS} FROM _staged_topics "
                        "QUALIFY row_number() OVER (PARTITION BY topic_id) = 1")
        if profile_files:
            _staged(con, "_staged_profiles", profile_files)
            con.execute(
                "INSERT INTO profiles SELECT contact_id, relationship, tone, recurring_topics, commitments::JSON, "
                "n_topics, model_id, prompt_version FROM _staged_profiles "
                "QUALIFY row_number() OVER (PARTITION BY contact_id ORDER BY filename DESC) = 1")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    finally:
        for view in ("_staged_topics", "_staged_profiles"):
            con.unregister(view)
    return memory_counts(con)


def memory_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Rows in ``topics`` and ``profiles`` (0 for a table that does not exist yet)."""
    out = {}
    for table in ("topics", "profiles"):
        exists = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                             "AND table_name = ?", [table]).fetchone()[0]
        out[table] = int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]) if exists else 0
    return out
