"""What selects an embedder (the spec) and which MLX device it runs on.

An :class:`EmbedderSpec` is the one description of "the configured embedder": the pipeline,
the Dagster runtime, search and labels all build it with ``Settings.embedding`` and load it
through :func:`brb_pipeline.core.embedding.models.load_embedder`, which keeps one loaded
embedder per spec in the process.

Devices: ``"auto"`` takes MLX's default device when it is a GPU (Metal on a Mac, CUDA with
``mlx[cuda12]``/``mlx[cuda13]``), else the CPU; ``"cpu"`` and ``"gpu"`` force one
(``BRB_EMBEDDING_DEVICE``). This module does not import MLX until a device is resolved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from brb_pipeline.core.embedding.blas import ensure_fast_blas
from brb_pipeline.core.errors import BrbError

DEVICES = ("auto", "cpu", "gpu")


class DeviceNotAvailableError(BrbError):
    """The embedding device asked for does not exist here (or is not a known device)."""


#: The embedding model when none is set: the one a package ships (see DESIGN.md).
DEFAULT_MODEL = "bundled:all-MiniLM-L6-v2"
#: Truncation length of one chunk, in tokens.
MAX_TOKENS = 256


@dataclass(frozen=True)
class EmbedderSpec:
    """Everything that decides which embedder a process loads (hashable: the cache key).

    Attributes:
        model: ``hash`` / ``hash-<dim>``, ``bundled:<name>``, a model directory or a repo id.
        backend: ``"fast"`` or ``"reference"`` (see :class:`~.models.MLXEmbedder`).
        max_tokens: truncation length in tokens.
        token_budget: max rows x padded length per forward on the CPU (a GPU sizes its own).
        device: ``"auto"``, ``"cpu"`` or ``"gpu"`` as asked for; the embedder's ``device``
            attribute says which one it got.
    """

    model: str = DEFAULT_MODEL
    backend: str = "fast"
    max_tokens: int = MAX_TOKENS
    token_budget: int = 8192
    device: str = "auto"


def resolve_device(requested: str) -> str:
    """``"cpu"`` or ``"gpu"``: the device an embedder asked for ``requested`` runs on.

    Raises:
        DeviceNotAvailableError: ``requested`` is not auto/cpu/gpu, or is gpu where MLX has none.
    """
    req = str(requested).strip().lower()
    if req not in DEVICES:
        raise DeviceNotAvailableError(
            f"Embedding - unknown embedding_device {requested!r}: use auto, cpu or gpu")
    if req == "cpu":
        return "cpu"
    mx = _mx()
    if req == "gpu":
        if not mx.is_available(mx.gpu):
            raise DeviceNotAvailableError(
                "Embedding - embedding_device is gpu but MLX has no GPU here (install mlx[cuda12] "
                "on an NVIDIA machine, or use auto/cpu)")
        return "gpu"
    return "gpu" if mx.default_device().type == mx.DeviceType.gpu else "cpu"


def mlx_device(name: str) -> Any:
    """The ``mlx.core`` device object for ``"cpu"`` / ``"gpu"``."""
    mx = _mx()
    return mx.gpu if name == "gpu" else mx.cpu


def gpu_token_budget(configured: int, bytes_per_token: int) -> int:
    """Rows x padded length per forward on the GPU: an eighth of its memory for activations
    (``bytes_per_token`` from the model), never less than ``configured``, at most 2**17.

    A pipeline ``embed`` call holds at most 256 chunks of at most ``max_tokens`` each, so
    the cap only matters for direct callers."""
    mx = _mx()
    info = mx.device_info(mx.gpu)
    memory = int(info.get("memory_size") or info.get("total_memory") or 0)
    if memory <= 0 or bytes_per_token <= 0:
        return configured
    return int(max(configured, min(1 << 17, memory // 8 // bytes_per_token)))


def _mx() -> Any:
    ensure_fast_blas()  # before the process's first mlx.core import (see blas.py)
    import mlx.core as mx

    return mx
