"""Where each stage keeps its files under the home dir (keyed by partition where relevant)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from brb_pipeline.core.crypto import files
from brb_pipeline.settings import Settings

if TYPE_CHECKING:  # a one-shot search asks where files are without loading polars
    import polars as pl


def parsed_messages(s: Settings) -> Path:
    return s.staging_dir / "parsed_messages.parquet"


def parsed_chats(s: Settings) -> Path:
    return s.staging_dir / "parsed_chats.parquet"


def people(s: Settings) -> Path:
    return s.staging_dir / "addressbook_people.json"


def messages(s: Settings) -> Path:
    """Messages with contact_id and batch: the input of every per-batch stage."""
    return s.staging_dir / "messages.parquet"


def chunks(s: Settings, batch: str) -> Path:
    return s.staging_dir / "chunked" / f"batch={batch}.parquet"


def retired_dir(s: Settings) -> Path:
    """Vectors a rewritten partition dropped, kept until the next store load for other batches
    to reuse (a contact that moved batch). Holds message text: removed by forget."""
    return s.staging_dir / "retired"


def retired(s: Settings, batch: str) -> Path:
    return retired_dir(s) / f"batch={batch}.parquet"


def partition(s: Settings, batch: str) -> Path:
    """One batch's chunks with their embeddings, ``staging/chunks/batch=<key>.parquet`` (the
    layout is ``core.store.chunks``', which writes and loads these files)."""
    from brb_pipeline.core.store.chunks import partition_path  # loads polars: not on a search's path

    return partition_path(s.staging_dir, batch)


def staged_batch_files(s: Settings) -> dict[str, list[Path]]:
    """batch key -> its staged files (chunk texts, embeddings and their ``.embedcfg``, topics,
    profiles), as on disk."""
    out: dict[str, list[Path]] = {}
    for d in (s.staging_dir / "chunked", s.staging_dir / "chunks", topics_dir(s), profiles_dir(s)):
        for f in sorted(d.glob("batch=*.parquet*")) if d.is_dir() else []:
            key = f.name[len("batch="):].split(".parquet", 1)[0]
            out.setdefault(key, []).append(f)
    return out


def topics_dir(s: Settings) -> Path:
    """Per-batch topics the local model distilled (``staging/topics/batch=<key>.parquet``)."""
    return s.staging_dir / "topics"


def topics(s: Settings, batch: str) -> Path:
    return topics_dir(s) / f"batch={batch}.parquet"


def profiles_dir(s: Settings) -> Path:
    """Per-batch person profiles derived from the topics (``staging/profiles/batch=<key>.parquet``)."""
    return s.staging_dir / "profiles"


def profiles(s: Settings, batch: str) -> Path:
    return profiles_dir(s) / f"batch={batch}.parquet"


def insights_staging(s: Settings) -> Path:
    """The analyzing stages' intermediate files (projection, clusters, labels, label cache)."""
    return s.staging_dir / "insights"


def projection(s: Settings) -> Path:
    return insights_staging(s) / "projection.parquet"


def clusters(s: Settings) -> Path:
    return insights_staging(s) / "clusters.parquet"


def cluster_labels(s: Settings) -> Path:
    return insights_staging(s) / "labels.parquet"


def label_cache(s: Settings) -> Path:
    return insights_staging(s) / "label_cache.json"


def store_next(s: Settings) -> Path:
    """The staging copy of brb.duckdb a load and its index builds write; it replaces the store
    only when both indexes are built in it (``pipeline.store.publish``)."""
    return s.home / "brb.duckdb.next"


def snapshot_manifest(s: Settings) -> Path:
    return s.snapshot_dir / "manifest.json"


def run_log(s: Settings, run_id: str) -> Path:
    """Where a headless run writes the traces of its failed steps."""
    return s.home / "logs" / f"ingest-{run_id}.log"


def dagster_config(s: Settings) -> Path:
    """The Dagster instance's ``dagster.yaml`` (written by brb on first use)."""
    return s.dagster_home / "dagster.yaml"


def dagster_history(s: Settings) -> Path:
    """Dagster's SQLite run and event storage: ``runs.db``, ``index.db`` and ``runs/<run_id>.db``."""
    return s.dagster_home / "history"


def dagster_run_files(s: Settings, run_id: str) -> Path:
    """What Dagster keeps on disk for one run (compute logs, outputs)."""
    return s.dagster_home / "storage" / run_id


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
    import polars as pl

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
