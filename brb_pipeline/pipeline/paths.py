"""Where each stage keeps its files under the home dir (keyed by partition where relevant)."""

from __future__ import annotations

from pathlib import Path

from brb_pipeline.settings import Settings


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


def embedded_dir(s: Settings) -> Path:
    """The per-partition Parquet files with embeddings (written by core.store.write_partition)."""
    return s.staging_dir


def snapshot_manifest(s: Settings) -> Path:
    return s.snapshot_dir / "manifest.json"


def atomic_write_parquet(frame, path: Path) -> None:
    """Write a polars frame to ``path`` via a temp file and rename (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    frame.write_parquet(tmp, compression="zstd", statistics=True)
    tmp.replace(path)
