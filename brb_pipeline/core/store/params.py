"""The store's index parameters, apart from :mod:`.index` so that reading settings imports no
duckdb."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IndexParams:
    """HNSW parameters (the ``hnsw_m``, ``hnsw_ef_construction`` and ``hnsw_ef_search`` settings).

    Attributes:
        m: graph degree.
        ef_construction: candidate list while building.
        ef_search: candidate list at query time (recall vs speed); chosen on the dev half.
        metric: distance (cosine over L2-normalized embeddings).
    """

    m: int = 16
    ef_construction: int = 128
    ef_search: int = 256
    metric: str = "cosine"


#: Chunks whose message lines are embedded (and saved) together at ingest (the
#: ``line_batch_chunks`` setting, :func:`.line_index.index_lines`): memory per batch, and what a
#: killed run can lose before its lines are kept for the next one.
LINE_BATCH_CHUNKS = 512
