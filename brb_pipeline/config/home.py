"""Where every file lives under the home dir and in its Dagster instance: :class:`Home` is the
one place that spells a path (``Settings.paths`` is the home's).

Partitioned files are keyed by contact batch (``batch=<key>``). One layout is not spelled here:
the embedded chunk partitions under the staging dir, which ``core.store.chunks`` writes and loads
itself (its tests and the store load take a staging dir); Home names them through its
:func:`~brb_pipeline.core.store.chunks.partition_path`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: The folder of the home that `brb demo` builds its archive in.
DEMO_ARCHIVE = "demo-archive"


@dataclass(frozen=True)
class Home:
    """The file layout of one home dir (``root``)."""

    root: Path

    # The home's top level ---------------------------------------------------------------
    @property
    def brb_db(self) -> Path:
        return self.root / "brb.db"

    @property
    def duckdb_path(self) -> Path:
        return self.root / "brb.duckdb"

    @property
    def store_next(self) -> Path:
        """The staging copy of brb.duckdb a load and its index builds write; it replaces the store
        only when both indexes are built in it (``stages.store.publish``)."""
        return self.root / "brb.duckdb.next"

    @property
    def lines_resume(self) -> Path:
        """The message-line vectors a discarded staging copy had embedded (no text), taken by the
        next index build (``core.store.line_index.save_for_resume``); deleted once it has served."""
        return self.root / "brb.duckdb.lines"

    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    @property
    def snapshot_dir(self) -> Path:
        return self.root / "snapshot"

    @property
    def snapshot_manifest(self) -> Path:
        return self.snapshot_dir / "manifest.json"

    @property
    def staging_dir(self) -> Path:
        return self.root / "staging"

    @property
    def insights_dir(self) -> Path:
        """The map pages and images the analyzing stage draws."""
        return self.root / "insights"

    @property
    def demo_archive_dir(self) -> Path:
        return self.root / DEMO_ARCHIVE

    @property
    def ingest_lock(self) -> Path:
        """Held by the one process that writes the home (``stages.homelock``)."""
        return self.root / "ingest.lock"

    @property
    def forgotten_copy(self) -> Path:
        """A copy of the forgotten list's keyed digests beside brb.db (``privacy.forgotten``)."""
        return self.root / "forgotten-digests.json"

    def run_log(self, run_id: str) -> Path:
        """Where a headless run writes the traces of its failed steps."""
        return self.root / "logs" / f"ingest-{run_id}.log"

    # Staging ------------------------------------------------------------------------------
    @property
    def parsed_messages(self) -> Path:
        return self.staging_dir / "parsed_messages.parquet"

    @property
    def parsed_chats(self) -> Path:
        return self.staging_dir / "parsed_chats.parquet"

    @property
    def people(self) -> Path:
        return self.staging_dir / "addressbook_people.json"

    @property
    def messages(self) -> Path:
        """Messages with contact_id and batch: the input of every per-batch stage."""
        return self.staging_dir / "messages.parquet"

    def chunks(self, batch: str) -> Path:
        return self.staging_dir / "chunked" / f"batch={batch}.parquet"

    @property
    def retired_dir(self) -> Path:
        """Vectors a rewritten partition dropped, kept until the next store load for other batches
        to reuse (a contact that moved batch). Holds message text: removed by forget."""
        return self.staging_dir / "retired"

    def retired(self, batch: str) -> Path:
        return self.retired_dir / f"batch={batch}.parquet"

    def partition(self, batch: str) -> Path:
        """One batch's chunks with their embeddings, ``staging/chunks/batch=<key>.parquet``."""
        from brb_pipeline.core.store.chunks import partition_path  # duckdb and pyarrow: only when asked

        return partition_path(self.staging_dir, batch)

    @property
    def topics_dir(self) -> Path:
        """Per-batch topics the local model distilled (``staging/topics/batch=<key>.parquet``)."""
        return self.staging_dir / "topics"

    def topics(self, batch: str) -> Path:
        return self.topics_dir / f"batch={batch}.parquet"

    @property
    def profiles_dir(self) -> Path:
        """Per-batch person profiles derived from the topics (``staging/profiles/batch=<key>.parquet``)."""
        return self.staging_dir / "profiles"

    def profiles(self, batch: str) -> Path:
        return self.profiles_dir / f"batch={batch}.parquet"

    def staged_batch_files(self) -> dict[str, list[Path]]:
        """batch key -> its staged files (chunk texts, embeddings and their ``.embedcfg``, topics,
        profiles), as on disk."""
        out: dict[str, list[Path]] = {}
        for d in (self.staging_dir / "chunked", self.staging_dir / "chunks", self.topics_dir, self.profiles_dir):
            for f in sorted(d.glob("batch=*.parquet*")) if d.is_dir() else []:
                key = f.name[len("batch="):].split(".parquet", 1)[0]
                out.setdefault(key, []).append(f)
        return out

    @property
    def insights_staging(self) -> Path:
        """The analyzing stages' intermediate files (projection, clusters, labels, label cache)."""
        return self.staging_dir / "insights"

    @property
    def projection(self) -> Path:
        return self.insights_staging / "projection.parquet"

    @property
    def clusters(self) -> Path:
        return self.insights_staging / "clusters.parquet"

    @property
    def cluster_labels(self) -> Path:
        return self.insights_staging / "labels.parquet"

    @property
    def label_cache(self) -> Path:
        return self.insights_staging / "label_cache.json"

    # Dagster's instance -------------------------------------------------------------------
    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster"

    @property
    def dagster_config(self) -> Path:
        """The Dagster instance's ``dagster.yaml`` (written by brb on first use)."""
        return self.dagster_home / "dagster.yaml"

    @property
    def dagster_history(self) -> Path:
        """Dagster's SQLite run and event storage: ``runs.db``, ``index.db`` and ``runs/<run_id>.db``."""
        return self.dagster_home / "history"

    def dagster_run_files(self, run_id: str) -> Path:
        """What Dagster keeps on disk for one run (compute logs, outputs)."""
        return self.dagster_home / "storage" / run_id
