"""Give MLX's Linux CPU backend an optimized BLAS.

The Linux ``mlx[cpu]`` wheel links the slow reference BLAS (``mlx_cpu.libs/libblas-*.so``): a
1024x1024 fp32 matmul runs at ~4 GFLOP/s. MLX resolves ``cblas_sgemm`` through the dynamic
linker, so an optimized OpenBLAS loaded into the *global* symbol scope before ``mlx.core`` is
imported wins the lookup (~117 GFLOP/s on the 2-core dev machine). This must happen before the
first ``import mlx.core`` in the process; afterwards the symbols are already bound.

macOS needs none of this (MLX uses Accelerate), so the function is a no-op there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

MISSING_WARNING = (
    "Embedding - optimized BLAS not found (install libopenblas0-pthread): "
    "MLX will use its reference BLAS, ~25x slower GEMMs"
)
TOO_LATE_WARNING = (
    "Embedding - mlx.core was imported before ensure_fast_blas(): "
    "MLX may keep its reference BLAS, ~25x slower GEMMs"
)

# Debian's libopenblas0-pthread; the multiarch dirs cover x86_64 and aarch64.
_CANDIDATES = (
    "libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
)

_state: dict[str, object] = {"done": False, "path": None}


def ensure_fast_blas() -> str | None:
    """Load an optimized OpenBLAS with global symbols so MLX's CPU GEMMs use it.

    Idempotent: the first call does the work, later calls return the same result. Set
    ``BRB_NO_FAST_BLAS=1`` to skip (used by the benchmark's reference-BLAS row).

    Returns:
        The path of the loaded library, or ``None`` when none was found, when skipped, or on
        platforms that do not need it (macOS).
    """
    if _state["done"]:
        return _state["path"]  # type: ignore[return-value]
    _state["done"] = True
    if not sys.platform.startswith("linux") or os.environ.get("BRB_NO_FAST_BLAS") == "1":
        return None
    if "mlx.core" in sys.modules:
        log.warning(TOO_LATE_WARNING)
    for name in _CANDIDATES:
        try:
            lib = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        if not hasattr(lib, "cblas_sgemm"):
            continue
        _state["path"] = _library_path(name)
        log.debug("Embedding - using %s for MLX GEMMs", _state["path"])
        return _state["path"]  # type: ignore[return-value]
    log.warning(MISSING_WARNING)
    return None


def _library_path(name: str) -> str:
    """Resolve the file the dynamic linker actually mapped for ``name`` (best effort)."""
    if os.path.isabs(name):
        return os.path.realpath(name)
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "libopenblas" in line and "/" in line:
                    return os.path.realpath(line[line.index("/") :].strip())
    except OSError:
        pass
    return name


def set_blas_threads(n: int) -> bool:
    """Set the loaded OpenBLAS's thread count (process-wide). Returns False when not possible."""
    path = ensure_fast_blas()
    if not path:
        return False
    try:
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        lib.openblas_set_num_threads(int(n))
    except (OSError, AttributeError):
        return False
    return True


def blas_threads() -> int | None:
    """The loaded OpenBLAS's current thread count, or None."""
    path = ensure_fast_blas()
    if not path:
        return None
    try:
        return int(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL).openblas_get_num_threads())
    except (OSError, AttributeError):
        return None
