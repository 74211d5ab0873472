"""Cost of the map's sub-topic labels at scale: :func:`~brb_pipeline.core.insights.subtopics.subtopics`
on ``--points`` synthetic chunks (the 40 blobs of ``bench_map.py``; each chunk 8 messages of 10
words from a small vocabulary, with sender prefixes as the store writes them; no real data).

With ``--embedder model`` the sub-labels are re-ranked with the pipeline's default embedding model
(as ``brb insights`` does), against synthetic stored embeddings (one direction per blob plus noise,
384-d); ``hash`` uses the fast hash embedder; ``none`` (or a ``brb_pipeline`` whose ``subtopics``
takes no re-rank: the same script times an older checkout) is c-TF-IDF only.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_subtopics.py --points 64000 --embedder model
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_map import WORDS, synthetic_points  # noqa: E402

from brb_pipeline.core.insights import subtopics as mod  # noqa: E402


def chunks(points: pl.DataFrame, seed: int = 11) -> list[str]:
    """One 8-message chunk per point, words drawn from ``WORDS``."""
    rng = np.random.default_rng(seed)
    words = rng.choice(WORDS, size=(points.height, 8, 10))
    return ["\n".join(f"Person {j} (10:{j:02d}): " + " ".join(line) for j, line in enumerate(msgs))
            for msgs in words]


def embeddings(points: pl.DataFrame, dim: int = 384, seed: int = 12) -> np.ndarray:
    rng = np.random.default_rng(seed)
    cid = points["cluster_id"].to_numpy()
    dirs = rng.normal(size=(int(cid.max()) + 2, dim)).astype(np.float32)
    v = dirs[cid + 1] + 0.8 * rng.normal(size=(points.height, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=64000)
    ap.add_argument("--embedder", choices=("none", "hash", "model"), default="model")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    pts = synthetic_points(a.points)
    pts = pts.with_columns(pl.Series("content", chunks(pts)))
    kwargs: dict = {}
    takes_rerank = "rerank" in inspect.signature(mod.subtopics).parameters
    if a.embedder != "none" and takes_rerank:
        from brb_pipeline.core.embedding.models import EmbedderSpec, load_embedder
        from brb_pipeline.core.insights.labels import EmbeddingLabeler

        spec = EmbedderSpec(model="hash") if a.embedder == "hash" else EmbedderSpec()
        t0 = time.perf_counter()
        emb = load_embedder(spec)
        load = time.perf_counter() - t0
        vecs = embeddings(pts, dim=int(np.asarray(emb.embed(["probe"])).shape[1]))
        kwargs = {"rerank": EmbeddingLabeler(emb, label_terms=mod.LABEL_TERMS), "embeddings": vecs,
                  "embedding_model": emb.model_id}
    t0 = time.perf_counter()
    out = mod.subtopics(pts, **kwargs)
    seconds = time.perf_counter() - t0
    result = {"points": a.points, "embedder": a.embedder if kwargs else "none", "seconds": round(seconds, 2),
              "model_load_seconds": round(load, 2) if kwargs else None, "parts": len(out),
              "clusters": len({t["cluster_id"] for t in out})}
    print(json.dumps(result))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
