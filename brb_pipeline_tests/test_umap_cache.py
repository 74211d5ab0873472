"""umap-learn's numba kernels are cached on disk, so a second process loads them instead of compiling.

Slow: the first process compiles UMAP's fit path into an empty cache (~20 s).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent("""
    import json, numba, numpy as np
    njit = numba.njit
    from brb_pipeline.core.insights.umap_cache import import_umap
    umap = import_umap()
    from umap.umap_ import smooth_knn_dist
    x = np.random.default_rng(0).normal(size=(60, 8)).astype("float32")
    umap.UMAP(n_components=2, n_neighbors=5, random_state=1, init="random", n_epochs=20).fit_transform(x)
    print(json.dumps({"restored": numba.njit is njit,
                      "cache": type(smooth_knn_dist._cache).__name__,
                      "hits": sum(smooth_knn_dist.stats.cache_hits.values()),
                      "misses": sum(smooth_knn_dist.stats.cache_misses.values())}))
""")


def _run(env_dir) -> dict:
    env = {"NUMBA_CACHE_DIR": str(env_dir), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", SCRIPT], capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_umaps_kernels_from_the_cache(tmp_path):
    first = _run(tmp_path)
    assert first["restored"], "numba.njit must be numba's own again after umap is imported"
    assert first["cache"] == "FunctionCache"
    second = _run(tmp_path)
    assert second["hits"] >= 1 and second["misses"] == 0, second
