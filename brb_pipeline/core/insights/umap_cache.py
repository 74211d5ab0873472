"""Import umap-learn with its numba kernels cached on disk, so a new process does not recompile them.

umap-learn and pynndescent declare ~470 ``@numba.njit`` kernels without ``cache=True``, so every
new ``brb`` process compiled UMAP's fit path again: 8 s of a 700-message ingest's 19 s on this
2-core machine (15 s idle to 200 s loaded at full size), every ingest. While umap is imported
(which imports pynndescent), ``numba.njit``/``numba.jit`` default to ``cache=True``; after it they
are numba's own again. The compiled code lands in numba's usual cache (the package's
``__pycache__``, or the user's cache folder when that is read-only); it is machine code for these
kernels only, keyed by each source file's path and timestamp, and holds no data of ours.

If numba can place no cache anywhere (it raises at decoration time), umap is imported again the
plain way and compiles per process as before: slower, never broken.
"""

from __future__ import annotations

import functools
import sys
import threading
from types import ModuleType

_LOCK = threading.Lock()


def _caching(decorator):
    """``decorator`` (numba.njit or numba.jit) with ``cache=True`` unless the caller says otherwise."""

    @functools.wraps(decorator)
    def wrapper(*args, **kwargs):
        kwargs.setdefault("cache", True)
        if len(args) == 1 and callable(args[0]):  # bare @numba.njit
            return decorator(args[0], **kwargs)
        return decorator(*args, **kwargs)

    return wrapper


def _forget(prefixes: tuple[str, ...]) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] in prefixes]:
        del sys.modules[name]


def import_umap() -> ModuleType:
    """The ``umap`` module, its kernels cached across processes where numba can cache them."""
    if "umap" in sys.modules:
        return sys.modules["umap"]
    import numba

    with _LOCK:
        if "umap" in sys.modules:
            return sys.modules["umap"]
        njit, jit = numba.njit, numba.jit
        numba.njit, numba.jit = _caching(njit), _caching(jit)
        try:
            import umap
        except RuntimeError:  # "cannot cache function ...: no locator available"
            numba.njit, numba.jit = njit, jit
            _forget(("umap", "pynndescent"))
            import umap
        finally:
            numba.njit, numba.jit = njit, jit
    return umap
