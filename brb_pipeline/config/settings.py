"""One settings object for the whole pipeline.

Precedence for the values of a run: explicit arguments (CLI flags) > environment (``BRB_*``) >
``<home>/config.json`` > defaults. ``config.json`` is written by ``brb ingest`` (and ``brb demo``)
so the Dagster UI, schedule and sensors ingest the same sources; it remembers what was given
explicitly and what it already held, never a ``BRB_*`` value (a variable applies to the process
that has it). Every path is made absolute against the working directory when it is loaded.
The home dir is ``BRB_HOME`` or ``~/.brb``; the demo's is ``BRB_DEMO_HOME`` or ``~/.brb-demo``.
On macOS, `brb ingest` with no source at all reads the user's own Messages and Contacts stores
(:func:`platform_default_sources`), and says to grant Full Disk Access when it may not.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brb_pipeline.config.home import Home
from brb_pipeline.core import DEFAULT_REGION, SEED
from brb_pipeline.core.chunk_params import ChunkParams
from brb_pipeline.core.contacts.params import BatchParams
from brb_pipeline.core.embedding.spec import DEFAULT_MODEL, EmbedderSpec
from brb_pipeline.core.errors import SettingsError, SourceMissingError
from brb_pipeline.core.insights.params import ClusterParams, ProjectionParams
from brb_pipeline.core.memory.params import MAX_TOKENS as LLM_MAX_TOKENS, WINDOW_CHARS
from brb_pipeline.core.search.fusion import Fusion
from brb_pipeline.core.store.params import LINE_BATCH_CHUNKS, IndexParams
_BOOKKEEPING = ("home", "env_values")  # fields that are not settings read from env or config.json
_FUSION = Fusion()  # the hybrid search defaults are Fusion's own


def absolute(p: str | Path) -> Path:
    """``p`` with ``~`` expanded, made absolute against the current directory (links kept)."""
    return Path(os.path.abspath(Path(p).expanduser()))


def default_home() -> Path:
    return absolute(os.environ.get("BRB_HOME") or Path.home() / ".brb")


def default_demo_home() -> Path:
    """``brb demo``'s home: never ``BRB_HOME``, so a demo cannot land on a real home by accident."""
    return absolute(os.environ.get("BRB_DEMO_HOME") or Path.home() / ".brb-demo")


@dataclass
class Settings:
    home: Path = field(default_factory=default_home)
    # Sources. Read-only; WhatsApp is never opened unless whatsapp_enabled.
    chat_db: Path | None = None
    addressbook_dir: Path | None = None
    whatsapp_db: Path | None = None
    imessage_enabled: bool = True
    whatsapp_enabled: bool = False
    # Mail is never opened unless mail_enabled: ~/Library/Mail (holding V10/MailData/Envelope Index).
    mail_enabled: bool = False
    mail_dir: Path | None = field(default_factory=lambda: default_mail_dir(sys.platform))
    # Where chat.db's "~/Library/Messages/Attachments/..." paths resolve (a copied archive names
    # its copy). Files there are only checked to exist, never opened or copied.
    attachments_dir: Path | None = field(default_factory=lambda: absolute(Path.home() / MAC_ATTACHMENTS))
    # Opt-in: a voice message's length is in no chat.db column, only in its .caf file's header,
    # which is then read (a few hundred bytes; the audio never). Off: no attachment file is opened.
    voice_lengths: bool = False
    mail_exclude_lists: bool = True  # drop mailing-list and automated mail (List-*, noreply, bulk)
    # Encryption at rest (keys.provider): fixed when a home is first ingested, then read from its
    # encryption.json. False (`--no-encryption`) makes a plaintext home.
    encryption: bool = True
    default_region: str = DEFAULT_REGION  # for phone numbers typed without a country code
    # Contact batches (dynamic partitions).
    top_contacts: int = BatchParams.top_n
    top_batch_size: int = BatchParams.top_size
    rest_batch_size: int = BatchParams.rest_size
    # Chunking.
    conversation_gap_s: int = ChunkParams.gap_s
    window: int = ChunkParams.window
    stride: int = ChunkParams.stride
    min_chars: int = ChunkParams.min_chars
    # IANA zone for the times and days shown in chunks ("Europe/Istanbul"); "" = this machine's.
    # Stored timestamps stay UTC.
    time_zone: str = ChunkParams.time_zone
    # Embedding.
    embedding_model: str = DEFAULT_MODEL  # "bundled:..." | local path | repo id in the HF cache
    embedding_backend: str = EmbedderSpec.backend  # "fast" (packed BERT on MLX) | "reference" (mlx-embeddings)
    embedding_device: str = EmbedderSpec.device  # "auto" (MLX's default device: a GPU when there is one) | "cpu" | "gpu"
    max_tokens: int = EmbedderSpec.max_tokens  # truncation length of one chunk
    token_budget: int = EmbedderSpec.token_budget  # rows x padded length per batch
    # Saving. DuckDB memory limit of the connection that loads partitions into brb.duckdb:
    # uncommitted rows beyond it spill to <home>/brb.duckdb.tmp instead of staying in RAM, so a
    # load's working set stays flat as the store grows (a load whose rows are too wide for it is
    # retried without it). "" = DuckDB's default (80% of RAM); docs/pipeline.md says why 256MB.
    duckdb_load_memory_limit: str = "256MB"
    # Indexes and search.
    hnsw_m: int = IndexParams.m
    hnsw_ef_construction: int = IndexParams.ef_construction
    hnsw_ef_search: int = IndexParams.ef_search  # HNSW recall at query time; chosen on the dev half (docs/search.md)
    rrf_k: int = _FUSION.rrf_k
    line_batch_chunks: int = LINE_BATCH_CHUNKS  # message lines embedded per batch of chunks at ingest
    # Hybrid fusion and the relevance floor (core/search/fusion.py), chosen on the dev half of
    # benchmarks/questions/ with benchmarks/bench_retrieval.py (its results hold every variant).
    search_fusion: str = _FUSION.method  # "score" (min-max convex combination) | "rrf" (weighted)
    search_lexical_weight: float = _FUSION.lexical_weight
    # for a query with a rare name, number or quoted phrase
    search_specific_lexical_weight: float = _FUSION.specific_lexical_weight
    search_rare_df_share: float = _FUSION.rare_df_share  # a name or number in at most this share of chunks is rare
    search_min_similarity: float = 0.39  # below it (best candidate's cosine) "confident" is false; 0 = off
    # Insights.
    pca_dim: int = ProjectionParams.pca_dim
    umap_neighbors: int = ProjectionParams.n_neighbors
    umap_min_dist: float = ProjectionParams.min_dist
    umap_sample: int = ProjectionParams.sample
    hdbscan_min_cluster_size: int = ClusterParams.min_cluster_size
    hdbscan_min_samples: int = ClusterParams.min_samples
    merge_threshold: float = ClusterParams.merge_threshold
    noise_reassign_threshold: float = ClusterParams.noise_threshold
    labeler_model_path: Path | None = None
    # Distilled memory: a local mlx-lm instruct model directory; without one, no topics or profiles.
    llm_model_path: Path | None = None
    llm_max_tokens: int = LLM_MAX_TOKENS  # generation cap per prompt
    memory_window_chars: int = WINDOW_CHARS  # message text per prompt; a longer month is cut into windows
    # Share of the store that may be placed next to existing chunks instead of refitting the
    # layout (new chunks now, and placed since the last refit in total).
    insights_refit_share: float = 0.05
    seed: int = SEED
    # Operations.
    schedule_cron: str = "0 3 * * *"
    schedule_enabled: bool = False
    # Bookkeeping, not a setting: field -> (value a BRB_* variable gave this run, value it
    # replaced) so save() writes the replaced one. An init field so dataclasses.replace keeps it.
    env_values: dict[str, tuple[Any, Any]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if "Path" in str(f.type) and v is not None:
                setattr(self, f.name, absolute(v))

    # Sections: each stage's parameters, typed, as the stage's own Params class declares them -
    # (the flat fields above are what flags, BRB_* variables and config.json name; each takes its
    # default from the section that owns it, so every default is declared once)
    @property
    def chunking(self) -> ChunkParams:
        return ChunkParams(window=self.window, stride=self.stride, gap_s=self.conversation_gap_s,
                           min_chars=self.min_chars, time_zone=self.time_zone)

    @property
    def embedding(self) -> EmbedderSpec:
        return EmbedderSpec(model=str(self.embedding_model), backend=self.embedding_backend,
                            max_tokens=self.max_tokens, token_budget=self.token_budget,
                            device=self.embedding_device)

    @property
    def index(self) -> IndexParams:
        return IndexParams(m=self.hnsw_m, ef_construction=self.hnsw_ef_construction, ef_search=self.hnsw_ef_search)

    @property
    def batching(self) -> BatchParams:
        return BatchParams(top_n=self.top_contacts, top_size=self.top_batch_size, rest_size=self.rest_batch_size)

    @property
    def projection(self) -> ProjectionParams:
        return ProjectionParams(pca_dim=self.pca_dim, n_neighbors=self.umap_neighbors,
                                min_dist=self.umap_min_dist, sample=self.umap_sample, seed=self.seed)

    @property
    def clustering(self) -> ClusterParams:
        return ClusterParams(min_cluster_size=self.hdbscan_min_cluster_size, min_samples=self.hdbscan_min_samples,
                             merge_threshold=self.merge_threshold, noise_threshold=self.noise_reassign_threshold,
                             seed=self.seed)

    # Locations: the home's layout is Home's; the ones most code reads have shortcuts here ---
    @property
    def paths(self) -> Home:
        """Where every file of this home lives."""
        return Home(self.home)

    brb_db = property(lambda self: self.paths.brb_db)
    duckdb_path = property(lambda self: self.paths.duckdb_path)
    snapshot_dir = property(lambda self: self.paths.snapshot_dir)
    staging_dir = property(lambda self: self.paths.staging_dir)
    insights_dir = property(lambda self: self.paths.insights_dir)
    dagster_home = property(lambda self: self.paths.dagster_home)
    config_path = property(lambda self: self.paths.config_path)
    demo_archive_dir = property(lambda self: self.paths.demo_archive_dir)

    # Loading and saving -------------------------------------------------------------------
    @classmethod
    def load(cls, home: str | Path | None = None, **overrides: Any) -> "Settings":
        """Build settings from defaults, ``<home>/config.json``, ``BRB_*`` env and overrides.

        ``None`` overrides are ignored so CLI flags that were not given do not erase config.

        Raises:
            SettingsError: the home is a file or under one, config.json cannot be read or holds
                unknown settings, or a value does not fit its setting's type.
            ValueError: an override names no setting (a programming error).
        """
        home_path = absolute(home) if home else default_home()
        check_home(home_path)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in _BOOKKEEPING}
        saved = _read_config(home_path / "config.json")
        saved.pop("home", None)
        unknown = set(saved) - set(fields)
        if unknown:
            raise SettingsError(f"{home_path / 'config.json'} holds unknown settings {sorted(unknown)}; "
                                "remove them or delete the file")
        explicit = {k: v for k, v in overrides.items() if v is not None}
        unknown = set(explicit) - set(fields)
        if unknown:
            raise ValueError(f"unknown settings: {sorted(unknown)}")

        def coerce(name: str, v: Any, origin: str) -> Any:
            try:
                return _coerce(fields[name].type, v)
            except (TypeError, ValueError):
                raise SettingsError(f"{origin}: {v!r} is not a valid {name} ({fields[name].type})") from None

        values = {k: coerce(k, v, str(home_path / "config.json")) for k, v in saved.items()}
        env_values: dict[str, tuple[Any, Any]] = {}
        for name, f in fields.items():
            env = os.environ.get("BRB_" + name.upper())
            if env is None or name in explicit:
                continue
            replaced = values[name] if name in values else _default(f)
            values[name] = coerce(name, env, "BRB_" + name.upper())
            env_values[name] = (values[name], replaced)
        values.update({k: coerce(k, v, k) for k, v in explicit.items()})
        return cls(home=home_path, env_values=env_values, **values)

    def remembered(self) -> dict[str, Any]:
        """What :meth:`save` writes: every setting that differs from its default, except that a
        value a ``BRB_*`` variable gave this run is replaced by the one it shadowed."""
        data: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in _BOOKKEEPING:
                continue
            v = getattr(self, f.name)
            if f.name in self.env_values and self.env_values[f.name][0] == v:
                v = self.env_values[f.name][1]
            if v != _default(f):
                data[f.name] = _jsonable(v)
        return data

    def check_writable(self) -> None:
        """Raise :class:`SettingsError` (one line naming the path) unless the home dir can be
        written, or created where it is missing. Creates nothing: a run still checks where the
        home is (e.g. not inside a source folder) before anything is written."""
        check_home(self.home, write=True)

    def save(self) -> None:
        """Persist :meth:`remembered` to ``<home>/config.json`` (atomically)."""
        self.check_writable()
        tmp = self.config_path.with_suffix(".tmp")
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(self.remembered(), indent=2, sort_keys=True))
            tmp.replace(self.config_path)
        except OSError as e:
            raise SettingsError(f"cannot write {self.config_path}: {e.strerror or e}") from None

    def real_ingestion(self) -> str | None:
        """What this home holds other than its own demo archive (``brb demo`` refuses to replace
        it), or None. Judged by the saved ``chat_db``; a store with none saved is of unknown origin."""
        chat_db = _read_config(self.config_path).get("chat_db")
        if chat_db:
            p = absolute(chat_db)
            return None if p.is_relative_to(self.demo_archive_dir) else f"an ingestion of {p}"
        return "a store of unknown sources" if self.brb_db.exists() else None

    def channels(self) -> dict[str, bool]:
        return {"imessage": self.imessage_enabled, "whatsapp": self.whatsapp_enabled, "mail": self.mail_enabled}


#: Where macOS keeps the signed-in user's Messages and Contacts stores, under their home dir.
MAC_CHAT_DB = Path("Library/Messages/chat.db")
MAC_ADDRESSBOOK = Path("Library/Application Support/AddressBook")
MAC_MAIL = Path("Library/Mail")


MAC_ATTACHMENTS = "Library/Messages/Attachments"


def default_mail_dir(platform: str) -> Path | None:
    """``~/Library/Mail`` on macOS, else None; only read when Mail is enabled."""
    return absolute(Path.home() / MAC_MAIL) if platform == "darwin" else None


def platform_default_sources(home_dir: Path, platform: str) -> dict[str, Path]:
    """The sources `brb ingest` reads when none is given, set or saved.

    Args:
        home_dir: the user's home (``Path.home()``; tests pass a fake one).
        platform: ``sys.platform``.

    Returns:
        On macOS (``"darwin"``) ``chat_db`` and ``addressbook_dir`` under ``home_dir``, each
        when present (a chat.db macOS keeps private without Full Disk Access counts as present:
        reading it then says to grant access); elsewhere nothing. WhatsApp and Mail never.
    """
    if platform != "darwin":
        return {}
    found = {}
    for name, rel in (("chat_db", MAC_CHAT_DB), ("addressbook_dir", MAC_ADDRESSBOOK)):
        p = absolute(Path(home_dir) / rel)
        try:
            os.stat(p)
        except PermissionError:
            pass  # there, but private to this process
        except OSError:
            continue
        found[name] = p
    return found


def with_platform_defaults(s: Settings, home_dir: Path | None = None, platform: str | None = None) -> Settings:
    """``s`` with :func:`platform_default_sources` filled in when it names no source at all (no
    flag, ``BRB_*`` variable or saved chat.db, AddressBook or WhatsApp store) and reads
    iMessage; otherwise ``s`` itself. A run saves what it used, so later runs and the sensors
    read the same files."""
    if s.chat_db or s.addressbook_dir or s.whatsapp_db or not s.imessage_enabled:
        return s
    found = platform_default_sources(home_dir or Path.home(), platform or sys.platform)
    return dataclasses.replace(s, **found) if found else s


def check_source_readable(path: Path | None, what: str = "chat.db") -> None:
    """Raise :class:`SourceMissingError` saying to grant Full Disk Access when ``path`` is there
    but this process may not read it (macOS privacy protection, file modes). A missing file, a
    folder or a non-database is left to the snapshot, which names the problem."""
    if path is None:
        return
    try:
        with open(path, "rb"):
            pass
    except PermissionError as e:
        raise SourceMissingError(
            f"{what} at {path} is not readable ({e.strerror}); on macOS grant Full Disk Access to your terminal"
        ) from None
    except OSError:
        return


def check_home(home: Path, write: bool = False) -> None:
    """Raise :class:`SettingsError` (naming the path) when ``home`` cannot be a home dir: it is a
    file, or a file stands where one of its folders should be; with ``write``, also when it (or
    the folder it would be created in) is not writable. Creates nothing."""
    # os.path.exists, not Path.exists: it is False (not an error) under a file or an unreadable folder
    if os.path.exists(home) and not os.path.isdir(home):
        raise SettingsError(f"home {home} is a file, not a folder; choose another --home")
    nearest = next((p for p in (home, *home.parents) if os.path.exists(p)), None)
    if nearest is not None and not os.path.isdir(nearest):
        raise SettingsError(f"home {home} cannot be a folder: {nearest} is a file; choose another --home")
    if not write:
        return
    if nearest is None or not os.access(nearest, os.W_OK | os.X_OK):
        raise SettingsError(f"home {home} is not writable: permission denied on {nearest or home.anchor}")


def _read_config(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as e:
        raise SettingsError(f"cannot read {path}: {e.strerror or e}") from None
    try:  # random bytes (a damaged disk, a bad copy) are not UTF-8, let alone JSON
        data = json.loads(raw.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError alike
        raise SettingsError(f"{path}: not valid JSON; fix or delete it") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path} is not a JSON object of settings; fix or delete it")
    return data


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _jsonable(v: Any) -> Any:
    return str(v) if isinstance(v, Path) else v


def _coerce(typ: Any, v: Any) -> Any:
    t = str(typ)
    if v is None:
        return None
    if "Path" in t:
        return absolute(v)
    if t == "bool":
        return v if isinstance(v, bool) else str(v).strip().lower() in ("1", "true", "yes", "on")
    if t == "int":
        return int(v)
    if t == "float":
        return float(v)
    return v
