"""Data-quality checks over the stores, as plain functions (Dagster asset checks wrap them).

Each returns ``(passed, details)`` where details are counts and ratios only, never text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from brb_pipeline.core.crypto import files
from brb_pipeline.core.store.duck import table_exists
from brb_pipeline.core.store.index import index_status

Result = tuple[bool, dict[str, Any]]


def undecodable_share(parsed_messages: Path, *, max_share: float = 0.01) -> Result:
    """Share of messages whose attributedBody yielded no text (a decoder regression shows here)."""
    df = files.scan_parquet(parsed_messages).select(
        pl.len().alias("n"), pl.col("undecodable").sum().alias("bad")).collect()
    n, bad = int(df["n"][0]), int(df["bad"][0] or 0)
    share = bad / n if n else 0.0
    return share <= max_share, {"messages": n, "undecodable": bad, "share": round(share, 5), "max_share": max_share}


def chunk_count_sane(con: duckdb.DuckDBPyConnection, messages: int, stride: int) -> Result:
    """Chunks exist when messages do, and there are not more than ~messages/stride + chats.

    With window w and stride s a conversation of n >= w messages gives ceil((n - w) / s) + 1
    chunks, so the total is at most messages / s plus one per conversation; we allow twice
    messages / stride as a generous ceiling that still catches duplicated loads.
    """
    chunks = int(con.execute("SELECT count(*) FROM chunks").fetchone()[0]) if table_exists(con, "chunks") else 0
    dupes = int(con.execute("SELECT count(*) - count(DISTINCT chunk_id) FROM chunks").fetchone()[0]) if chunks else 0
    ceiling = 2 * messages / max(1, stride) + 10
    ok = dupes == 0 and (messages == 0 or 0 < chunks <= ceiling)
    return ok, {"chunks": chunks, "messages": messages, "duplicate_ids": dupes, "ceiling": int(ceiling)}


def vectors_valid(con: duckdb.DuckDBPyConnection) -> Result:
    """No NaN, zero or un-normalized embedding (all rows should have unit length)."""
    if not table_exists(con, "chunks"):
        return True, {"chunks": 0}
    n, bad = con.execute(
        """SELECT count(*), count(*) FILTER (WHERE NOT isfinite(sq) OR sq < 0.98 OR sq > 1.02)
           FROM (SELECT array_inner_product(embedding, embedding) AS sq FROM chunks)"""
    ).fetchone()
    return bad == 0, {"chunks": int(n), "invalid_vectors": int(bad)}


def single_model(con: duckdb.DuckDBPyConnection) -> Result:
    """Every stored vector comes from the same embedding model."""
    if not table_exists(con, "chunks"):
        return True, {"models": 0}
    models = [r[0] for r in con.execute("SELECT DISTINCT embedding_model FROM chunks ORDER BY 1").fetchall()]
    return len(models) <= 1, {"models": len(models), "model": models[0] if len(models) == 1 else ", ".join(models)}


def index_complete(con: duckdb.DuckDBPyConnection, kind: str) -> Result:
    """The index exists and covers exactly the stored rows."""
    st = index_status(con)
    info = st.get(kind, {})
    ok = st["store_rows"] == 0 or (bool(info.get("present")) and not info.get("stale"))
    return ok, {"store_rows": int(st["store_rows"]), "indexed_rows": int(info.get("rows") or 0),
                "present": bool(info.get("present"))}


def noise_share(clusters: Path, *, max_share: float = 0.35) -> Result:
    """Share of chunks left unclustered after noise reassignment."""
    df = files.read_parquet(clusters)
    n = df.height
    noise = int((df["cluster_id"] < 0).sum()) if n else 0
    share = noise / n if n else 0.0
    return share <= max_share, {"chunks": n, "noise": noise, "share": round(share, 4), "max_share": max_share}
