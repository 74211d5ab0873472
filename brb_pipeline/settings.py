"""One settings object for the whole pipeline.

Precedence: explicit arguments (CLI flags) > environment (``BRB_*``) > ``<home>/config.json``
(written by ``brb ingest`` so the Dagster UI, schedule and sensor ingest the same sources)
> defaults. The home dir is ``BRB_HOME`` or ``~/.brb``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "bundled:all-MiniLM-L6-v2"


def default_home() -> Path:
    return Path(os.environ.get("BRB_HOME") or Path.home() / ".brb").expanduser()


@dataclass
class Settings:
    home: Path = field(default_factory=default_home)
    # Sources. Read-only; WhatsApp is never opened unless whatsapp_enabled.
    chat_db: Path | None = None
    addressbook_dir: Path | None = None
    whatsapp_db: Path | None = None
    imessage_enabled: bool = True
    whatsapp_enabled: bool = False
    default_region: str = "US"  # for phone numbers typed without a country code
    # Contact batches (dynamic partitions).
    top_contacts: int = 50
    top_batch_size: int = 10
    rest_batch_size: int = 50
    # Chunking.
    conversation_gap_s: int = 6 * 3600
    window: int = 8
    stride: int = 4
    min_chars: int = 20
    # Embedding.
    embedding_model: str = DEFAULT_MODEL  # "bundled:..." | local path | repo id in the HF cache
    embedding_backend: str = "fast"  # "fast" (packed BERT on MLX) | "reference" (mlx-embeddings)
    max_tokens: int = 256  # truncation length of one chunk
    token_budget: int = 8192  # rows x padded length per batch
    # Saving. DuckDB memory limit of the connection that loads partitions into brb.duckdb:
    # uncommitted rows beyond it spill to <home>/brb.duckdb.tmp instead of staying in RAM, so a
    # load's working set stays flat as the store grows (a load whose rows are too wide for it is
    # retried without it). "" = DuckDB's default (80% of RAM). 256MB: on the full demo corpus
    # (64K chunks) reloading a 30K-chunk partition set took 1.9 s at 256MB and 128MB, while at
    # 64MB it spilled for 44 s and then failed (and was retried).
    duckdb_load_memory_limit: str = "256MB"
    # Indexes and search.
    hnsw_m: int = 16
    hnsw_ef_construction: int = 128
    hnsw_ef_search: int = 256  # dev half: 64 -> 256 raised vector hit@5 0.551 -> 0.571 (HNSW recall), p50 58 -> 55 ms
    rrf_k: int = 60
    # Hybrid fusion and the relevance floor (core/fusion.py), chosen on the dev half of
    # benchmarks/questions/ with benchmarks/bench_retrieval.py (its results hold every variant).
    search_fusion: str = "score"  # "score" (min-max convex combination) | "rrf" (weighted)
    search_lexical_weight: float = 0.05
    search_specific_lexical_weight: float = 0.7  # for a query with a rare name, number or quoted phrase
    search_rare_df_share: float = 0.0001  # a name or number in at most this share of chunks is rare
    search_min_similarity: float = 0.39  # below it (best candidate's cosine) "confident" is false; 0 = off
    # Insights.
    pca_dim: int = 50
    umap_neighbors: int = 15
    umap_min_dist: float = 0.05
    umap_sample: int = 20000
    hdbscan_min_cluster_size: int = 25
    hdbscan_min_samples: int = 5
    merge_threshold: float = 0.92
    noise_reassign_threshold: float = 0.5
    labeler_model_path: Path | None = None
    # Share of the store that may be placed next to existing chunks instead of refitting the
    # layout (new chunks now, and placed since the last refit in total).
    insights_refit_share: float = 0.05
    seed: int = 42
    # Operations.
    schedule_cron: str = "0 3 * * *"
    schedule_enabled: bool = False

    # Derived locations -------------------------------------------------------------------
    @property
    def brb_db(self) -> Path:
        return self.home / "brb.db"

    @property
    def duckdb_path(self) -> Path:
        return self.home / "brb.duckdb"

    @property
    def snapshot_dir(self) -> Path:
        return self.home / "snapshot"

    @property
    def staging_dir(self) -> Path:
        return self.home / "staging"

    @property
    def insights_dir(self) -> Path:
        return self.home / "insights"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @property
    def config_path(self) -> Path:
        return self.home / "config.json"

    # Loading and saving -------------------------------------------------------------------
    @classmethod
    def load(cls, home: str | Path | None = None, **overrides: Any) -> "Settings":
        """Build settings from defaults, ``<home>/config.json``, ``BRB_*`` env and overrides.

        ``None`` overrides are ignored so CLI flags that were not given do not erase config.
        """
        home_path = Path(home).expanduser() if home else default_home()
        values: dict[str, Any] = {}
        cfg = home_path / "config.json"
        if cfg.exists():
            values.update(json.loads(cfg.read_text()))
        names = {f.name: f for f in dataclasses.fields(cls)}
        for name, f in names.items():
            env = os.environ.get("BRB_" + name.upper())
            if env is not None and name != "home":
                values[name] = env
        values.update({k: v for k, v in overrides.items() if v is not None})
        values["home"] = home_path
        unknown = set(values) - set(names)
        if unknown:
            raise ValueError(f"unknown settings: {sorted(unknown)}")
        return cls(**{k: _coerce(names[k].type, v) for k, v in values.items()})

    def save(self) -> None:
        """Persist the non-default, non-home settings to ``<home>/config.json``."""
        self.home.mkdir(parents=True, exist_ok=True)
        defaults = Settings(home=self.home)
        data = {
            f.name: _jsonable(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name != "home" and getattr(self, f.name) != getattr(defaults, f.name)
        }
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
        tmp.replace(self.config_path)

    def channels(self) -> dict[str, bool]:
        return {"imessage": self.imessage_enabled, "whatsapp": self.whatsapp_enabled}


def _jsonable(v: Any) -> Any:
    return str(v) if isinstance(v, Path) else v


def _coerce(typ: Any, v: Any) -> Any:
    t = str(typ)
    if v is None:
        return None
    if "Path" in t:
        return Path(v).expanduser()
    if t == "bool":
        return v if isinstance(v, bool) else str(v).strip().lower() in ("1", "true", "yes", "on")
    if t == "int":
        return int(v)
    if t == "float":
        return float(v)
    return v
