"""The ``topics`` and ``profiles`` tables beside the chunks, and their load from the partitions.

Both tables are replaced as a whole from every batch's partition file, inside the caller's
staging copy of the store (so they are published with the chunks, atomically). They exist, empty,
even when nothing was distilled, so readers never miss them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from brb_pipeline.core.crypto import files

TOPICS_DDL = (
    "CREATE TABLE IF NOT EXISTS topics (topic_id VARCHAR PRIMARY KEY, contact_id VARCHAR, batch VARCHAR, "
    "month VARCHAR, language VARCHAR, label VARCHAR, summary VARCHAR, chat_id VARCHAR, first_ts TIMESTAMPTZ, "
    "last_ts TIMESTAMPTZ, first_message_id VARCHAR, last_message_id VARCHAR, model_id VARCHAR, "
    "prompt_version INTEGER)"
)
PROFILES_DDL = (
    "CREATE TABLE IF NOT EXISTS profiles (contact_id VARCHAR PRIMARY KEY, relationship VARCHAR, tone VARCHAR, "
    "recurring_topics VARCHAR[], commitments JSON, n_topics INTEGER, model_id VARCHAR, prompt_version INTEGER)"
)
_TOPIC_COLS = ("topic_id, contact_id, batch, month, language, label, summary, chat_id, first_ts, last_ts, "
               "first_message_id, last_message_id, model_id, prompt_version")


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
