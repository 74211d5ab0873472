"""A one-shot `brb search` imports only what a search uses: the pipeline's heavy libraries
(polars, pyarrow, Dagster, the map's UMAP/scikit-learn, the labelers) cost it hundreds of
milliseconds of start-up. A new interpreter imports the command's modules and runs the query
cleaning that once pulled in the chunker (and polars) behind the search's back."""

from __future__ import annotations

import json
import subprocess
import sys

UNUSED_BY_SEARCH = ("polars", "pyarrow", "pandas", "dagster", "umap", "sklearn", "hdbscan", "selenium", "mlx_lm")

_PROBE = """
import json, sys
import brb_pipeline.cli
import brb_pipeline.search.query
import brb_pipeline.core.embedding.models
from brb_pipeline.core.store.index import fts_query_text
from brb_pipeline.core.store.topic_index import topic_text
fts_query_text("horror movie \\u200b marathon")
topic_text("label", "summary")
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules if sys.modules[m] is not None})))
"""


def test_the_search_path_imports_none_of_the_pipeline_libraries():
    r = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    loaded = set(json.loads(r.stdout.splitlines()[-1]))
    assert {"brb_pipeline", "duckdb", "numpy"} <= loaded  # the probe did import the search path
    assert loaded.isdisjoint(UNUSED_BY_SEARCH), sorted(loaded & set(UNUSED_BY_SEARCH))
