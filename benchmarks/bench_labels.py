"""Label quality before/after the embedding re-rank, on the clusters of an existing home.

Reads a home (brb.duckdb, staging/insights/clusters.parquet, brb.db contacts) read-only, builds
the same cluster documents as ``run_labels`` and labels them twice, with no cache:

- **c-TF-IDF**: :class:`~brb_pipeline.core.insights.labels.TfidfLabeler` (contact names dropped);
- **refined**: :class:`~brb_pipeline.core.insights.labels.EmbeddingLabeler` over it (candidates re-ranked
  by cosine to the cluster centroid with the store's embedding model, MMR, names/filler dropped);

plus, when the home's ``labels.parquet`` exists, the **stored** labels (what the pipeline wrote
last, e.g. by an older labeler version), for the same cluster ids.

Metrics, per labeler: mean cosine between the label (embedded as text, "a, b, c") and its
cluster's centroid (mean of the members' stored vectors, normalized); how often the label's
nearest centroid among all clusters is its own (top-1) and its mean rank; labels with a word from
a fixed filler list or a contact's name. The refined labeler ranks terms by that same cosine, so
its cosine gain is partly by construction; the top-1 share and the label list are the checks
that it did not just pick words close to *every* chat. Nothing is written to the home.

    .venv/bin/python benchmarks/bench_labels.py --home /root/work/demo-labels
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from brb_pipeline.core import metadata  # noqa: E402
from brb_pipeline.core.embedding.models import load_embedder  # noqa: E402
from brb_pipeline.core.insights.labels import (  # noqa: E402
    ClusterDocs,
    EmbeddingLabeler,
    LabelChain,
    TfidfLabeler,
    name_tokens,
    normalize_case,
    representatives,
)
from brb_pipeline.stages.insights_io import load_store_with_model  # noqa: E402
from brb_pipeline.config.settings import Settings  # noqa: E402

# The brief's filler words plus a few more; fixed here so the count does not move with
# labels.CHAT_FILLER.
FILLER = frozenset("alrighty yeet lol haha omg lmao yeah okay ok gonna wanna yep yup hmm lmfao "
                   "jaja mdr ouais tamam".split())


def cluster_docs(s: Settings) -> tuple[list[ClusterDocs], np.ndarray, str | None, list[str]]:
    """(docs as run_labels builds them, (k, dim) unit centroids, store model id, direct contact
    display names)."""
    rows, emb, _, model = load_store_with_model(s, ("chunk_id", "content"))
    labels = pl.read_parquet(s.staging_dir / "insights" / "clusters.parquet")["cluster_id"].to_numpy()
    contents = rows["content"].to_list()
    docs, cents = [], []
    corpus_mean = emb.mean(axis=0)
    for cid in sorted({int(c) for c in labels if c >= 0}):
        idx = np.flatnonzero(labels == cid)
        reps = representatives(emb, labels, cid, 8, s.seed)
        cent = emb[idx].mean(axis=0)
        docs.append(ClusterDocs(cid, [contents[i] for i in idx], [contents[i] for i in reps],
                                centroid=cent, centroid_model=model, corpus_mean=corpus_mean))
        cents.append(cent / max(float(np.linalg.norm(cent)), 1e-12))
    contacts = metadata.read_contacts(s.brb_db)
    names = contacts.filter(pl.col("kind") == "direct")["display_name"].drop_nulls().to_list()
    return docs, np.asarray(cents, np.float32), model, names


def score(embedder, labels: list[str], cents: np.ndarray, names: frozenset[str]) -> dict[str, float]:
    """Cosine to own centroid, own-centroid top-1 share and mean rank, filler/name labels."""
    vecs = np.asarray(embedder.embed([lab.replace(" · ", ", ") for lab in labels]), np.float32)
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    sims = vecs @ cents.T  # (k labels, k centroids)
    own = np.diag(sims)
    ranks = 1 + (sims > own[:, None]).sum(axis=1)
    words = [set(normalize_case(lab).replace("·", " ").split()) for lab in labels]
    return {"cosine": float(own.mean()), "top1": float(np.mean(ranks == 1)),
            "rank": float(ranks.mean()), "filler": sum(bool(w & FILLER) for w in words),
            "names": sum(bool(w & names) for w in words)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--diversity", type=float, default=0.3)
    ap.add_argument("--candidates", type=int, default=30)
    args = ap.parse_args()
    s = Settings.load(args.home)
    embedder = load_embedder(s.embedding)
    docs, cents, model, names = cluster_docs(s)
    if model != embedder.model_id:
        sys.exit(f"brb: error: the store was embedded with {model}, the settings load {embedder.model_id}")
    columns: dict[str, list[str]] = {}
    seconds: dict[str, float] = {}
    stored = s.staging_dir / "insights" / "labels.parquet"
    if stored.exists():
        prev = dict(pl.read_parquet(stored).select("cluster_id", "label").iter_rows())
        if all(d.cluster_id in prev for d in docs):
            columns["stored"] = [prev[d.cluster_id] for d in docs]
    t0 = time.perf_counter()
    base = TfidfLabeler(names=names)
    columns["c-TF-IDF"] = [lab.label for lab in base.label(docs)]
    seconds["c-TF-IDF"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    refined = LabelChain(TfidfLabeler(n_terms=args.candidates, names=names), EmbeddingLabeler(
        embedder, candidates=args.candidates, diversity=args.diversity, names=names))
    columns["refined"] = [lab.label for lab in refined.label(docs)]
    seconds["refined"] = time.perf_counter() - t0
    toks = name_tokens(names)
    print(f"Labels of {len(docs)} clusters in {args.home.name} ({model}); refined = candidates "
          f"{args.candidates}, MMR diversity {args.diversity}\n")
    print("| labeler | mean cosine(label, centroid) | own centroid top-1 | mean rank of own centroid "
          "| labels with filler | labels with a contact name | seconds |")
    print("|---|---|---|---|---|---|---|")
    for name, labels in columns.items():
        m = score(embedder, labels, cents, toks)
        took = f"{seconds[name]:.2f}" if name in seconds else "–"
        print(f"| {name} | {m['cosine']:.3f} | {m['top1']:.0%} | {m['rank']:.2f} | {m['filler']} "
              f"| {m['names']} | {took} |")
    print("\n| cluster | chunks | " + " | ".join(columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for i, d in enumerate(docs):
        print(f"| {d.cluster_id} | {len(d.texts)} | " + " | ".join(c[i] for c in columns.values()) + " |")


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
