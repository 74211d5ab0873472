"""Benchmark the insights stage: PCA, UMAP 2-D/3-D, HDBSCAN, merge/noise, labels, map.

Runs at one scale per invocation (``--chunks``, default 3000 = demo scale; the full corpus is
~65K). Uses real embeddings from ``--embeddings file.npy`` when given, else a synthetic
mixture of Gaussians on the 384-dim sphere with known labels (skewed cluster sizes, a shared
mean direction like real sentence embeddings, 8% uniform background noise), plus synthetic chat
text per cluster so the c-TF-IDF labeler and the map writer run at the same scale.

Peers compared in the same run (ratios reported; the machine is shared and noisy):
- UMAP seeded (``random_state``: reproducible, numba on 1 thread) vs unseeded ``n_jobs=-1``
  (all cores, different layout each run) — the shipped default is the seeded one;
- the ``hdbscan`` package (shipped) vs ``sklearn.cluster.HDBSCAN`` on the same 2-D layout.

Quality against the known labels (ARI / NMI) and a 2-D silhouette are reported, never asserted.

    .venv/bin/python benchmarks/bench_insights.py                 # demo scale, synthetic
    .venv/bin/python benchmarks/bench_insights.py --chunks 65000  # full-corpus scale
    .venv/bin/python benchmarks/bench_insights.py --embeddings emb.npy
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from brb_pipeline.core.insights.clustering import cluster  # noqa: E402
from brb_pipeline.core.insights.projection import project  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


class PeakRSS:
    """Samples this process's resident set size every 20 ms; ``peak_mb`` is the max seen."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            self._stop.wait(0.02)

    def __enter__(self) -> "PeakRSS":
        self.peak = self._rss()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())

    @property
    def peak_mb(self) -> float:
        return self.peak / 2**20


def synthetic(n: int, dim: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, dim) float32 unit vectors and (n,) true labels (-1 = background noise).

    Cluster sizes follow a Zipf-like law (chat topics are skewed). Centres share a mean
    direction, so centroid cosines are ~0.3-0.5 as with real sentence embeddings; the
    within-cluster spread gives member-to-centre cosine ~0.7.
    """
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=dim)
    mean /= np.linalg.norm(mean)
    centres = rng.normal(size=(k, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    centres = 0.6 * mean + 0.8 * centres
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    n_noise = int(0.08 * n)
    weights = 1.0 / np.arange(1, k + 1) ** 0.8
    sizes = rng.multinomial(n - n_noise, weights / weights.sum())
    labels = np.concatenate([np.repeat(np.arange(k), sizes), np.full(n_noise, -1)])
    x = np.empty((n, dim), dtype=np.float32)
    x[: n - n_noise] = centres[labels[: n - n_noise]] + rng.normal(
        size=(n - n_noise, dim)).astype(np.float32) / np.sqrt(dim)
    noise = rng.normal(size=(n_noise, dim)).astype(np.float32)
    x[n - n_noise:] = 0.6 * mean + noise / np.linalg.norm(noise, axis=1, keepdims=True)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    perm = rng.permutation(n)
    return x[perm], labels[perm]


def synthetic_texts(labels: np.ndarray, seed: int) -> tuple[list[str], dict[int, set[str]]]:
    """One chat-formatted chunk per point: 8 lines mixing cluster topic words and filler."""
    rng = np.random.default_rng(seed)
    k = int(labels.max()) + 1
    letters = "bcdfghjklmnprstvz"
    vowels = "aeiou"

    def pseudo_word() -> str:  # letters only: the labeler's tokens are words, not digits
        return "".join(rng.choice(list(letters)) + rng.choice(list(vowels)) for _ in range(4))

    topics = {c: [pseudo_word() for _ in range(12)] for c in range(k)}
    common = [pseudo_word() for _ in range(400)] + ["lol", "ok", "yeah", "the", "and", "haha"]
    names = ["Ayşe", "Sam", "Mehmet", "Omar", "Me"]
    texts = []
    for lab in labels.tolist():
        lines = []
        for m in range(8):
            words = list(rng.choice(common, size=5))
            if lab >= 0:
                words += list(rng.choice(topics[lab], size=2))
            lines.append(f"{names[m % 5]} ({10 + m}:0{m}): {' '.join(words)}")
        texts.append("\n".join(lines))
    return texts, {c: set(v) for c, v in topics.items()}


def quality(true: np.ndarray | None, pred: np.ndarray, xy: np.ndarray, seed: int) -> dict:
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score, silhouette_score

    out: dict = {"n_clusters": int(pred.max()) + 1 if pred.max() >= 0 else 0,
                 "noise_share": float(np.mean(pred < 0))}
    mask = pred >= 0
    if mask.sum() > 2 and len(np.unique(pred[mask])) > 1:
        size = min(10000, int(mask.sum()))
        out["silhouette_2d"] = float(silhouette_score(xy[mask], pred[mask], sample_size=size,
                                                      random_state=seed))
    if true is not None:
        out["ari"] = float(adjusted_rand_score(true, pred))
        out["nmi"] = float(normalized_mutual_info_score(true, pred))
        both = mask & (true >= 0)
        out["ari_clustered"] = float(adjusted_rand_score(true[both], pred[both]))
    return out


def timed(fn, *args, **kwargs):
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        secs = time.perf_counter() - t0
    return out, secs, mem.peak_mb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, default=3000)
    ap.add_argument("--embeddings", type=Path, help="(n, dim) float32 .npy of real embeddings")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--clusters", type=int, default=40, help="true clusters (synthetic)")
    ap.add_argument("--sample", type=int, default=20000, help="UMAP fit sample")
    ap.add_argument("--min-cluster-size", type=int, default=25)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--no-peers", action="store_true", help="skip the parallel-UMAP and "
                    "sklearn-HDBSCAN peers")
    ap.add_argument("--no-map", action="store_true", help="skip labels and map writing")
    ap.add_argument("--out", type=Path, default=RESULTS / "insights.json")
    args = ap.parse_args()

    true = None
    if args.embeddings:
        x = np.load(args.embeddings).astype(np.float32)
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        if args.chunks and args.chunks < x.shape[0]:
            x = x[np.sort(np.random.default_rng(args.seed).choice(x.shape[0], args.chunks,
                                                                 replace=False))]
        source = f"real:{args.embeddings.name}"
    else:
        x, true = synthetic(args.chunks, args.dim, args.clusters, args.seed)
        source = f"synthetic:{args.clusters} clusters"
    n, dim = x.shape
    print(f"Insights bench - {n} chunks x {dim} dims ({source}), {os.cpu_count()} cores")

    # Warm-up: numba compiles UMAP's kernels on first use (tens of seconds, more under load);
    # keep that out of the timings of both peers. Above 4096 rows UMAP switches from exact
    # neighbours to NN-descent (pynndescent, compiled separately), and the sampled path adds
    # transform kernels, so the warm-up covers the paths the measured run takes.
    t0 = time.perf_counter()
    warm = x[: min(n, 4200 if n > 4096 else 300)]
    warm_sample = warm.shape[0] - 100 if n > args.sample else args.sample
    project(warm, sample=warm_sample, seed=args.seed)
    if not args.no_peers:
        project(warm, sample=warm_sample, seed=args.seed, deterministic=False)
    cluster(np.random.default_rng(0).normal(size=(100, 2)), warm[:100])
    warmup_s = time.perf_counter() - t0
    print(f"Insights bench - warm-up (numba JIT) {warmup_s:.1f} s")

    rows: list[dict] = []

    def row(step, secs, peak, **extra):
        rows.append({"step": step, "seconds": round(secs, 3), "peak_rss_mb": round(peak, 1),
                     **extra})

    # Shipped path: seeded projection.
    proj, secs, peak = timed(project, x, sample=args.sample, seed=args.seed)
    row("pca", proj.seconds["pca"], peak, explained_variance=round(proj.explained_variance, 3))
    row("umap_2d (seeded, 1 thread)", proj.seconds["umap_2d"], peak, fitted_on=proj.fitted_on)
    row("umap_3d (seeded, 1 thread)", proj.seconds["umap_3d"], peak, fitted_on=proj.fitted_on)
    again, _, _ = timed(project, x[: min(n, 2000)], sample=args.sample, seed=args.seed)
    again2, _, _ = timed(project, x[: min(n, 2000)], sample=args.sample, seed=args.seed)
    deterministic = bool(np.array_equal(again.xy, again2.xy))

    res, secs_c, peak_c = timed(cluster, proj.xy, x, min_cluster_size=args.min_cluster_size,
                                seed=args.seed)
    q = quality(true, res.labels, proj.xy, args.seed)
    row("hdbscan+merge+noise (hdbscan pkg)", secs_c, peak_c, hdbscan_clusters=res.hdbscan_clusters,
        merges=len(res.merged), noise_before=round(res.noise_before, 3),
        **{k: round(v, 4) if isinstance(v, float) else v for k, v in q.items()})

    peers: dict = {}
    if not args.no_peers:
        par, secs_p, peak_p = timed(project, x, sample=args.sample, seed=args.seed,
                                    deterministic=False)
        row("umap_2d (unseeded, n_jobs=-1)", par.seconds["umap_2d"], peak_p)
        row("umap_3d (unseeded, n_jobs=-1)", par.seconds["umap_3d"], peak_p)
        res_p = cluster(par.xy, x, min_cluster_size=args.min_cluster_size)
        peers["umap_parallel_quality"] = quality(true, res_p.labels, par.xy, args.seed)
        seeded = proj.seconds["umap_2d"] + proj.seconds["umap_3d"]
        parallel = par.seconds["umap_2d"] + par.seconds["umap_3d"]
        peers["umap_seeded_over_parallel"] = round(seeded / parallel, 2)

        from sklearn.cluster import HDBSCAN as SkHDBSCAN

        mcs = max(2, min(args.min_cluster_size, n))
        sk, secs_s, peak_s = timed(SkHDBSCAN(min_cluster_size=mcs, min_samples=min(5, mcs))
                                   .fit_predict, proj.xy.astype(np.float64))
        import hdbscan

        raw, secs_h, _ = timed(hdbscan.HDBSCAN(min_cluster_size=mcs, min_samples=min(5, mcs))
                               .fit_predict, proj.xy.astype(np.float64))
        row("hdbscan only (hdbscan pkg)", secs_h, peak_c)
        row("hdbscan only (sklearn peer)", secs_s, peak_s)
        peers["hdbscan_pkg_over_sklearn"] = round(secs_h / max(secs_s, 1e-9), 2)
        from sklearn.metrics import adjusted_rand_score

        peers["hdbscan_pkg_vs_sklearn_ari"] = round(float(adjusted_rand_score(raw, sk)), 4)

    label_info: dict = {}
    if not args.no_map and true is not None:
        from brb_pipeline.core.insights.map import cluster_summary, write_map
        from brb_pipeline.core.insights.labels import ClusterDocs, TfidfLabeler

        texts, topics = synthetic_texts(true, args.seed)
        ids = sorted(set(res.labels.tolist()))
        docs = [ClusterDocs(c, [texts[i] for i in np.flatnonzero(res.labels == c)]) for c in ids]
        labels, secs_l, peak_l = timed(TfidfLabeler().label, docs)
        # A label is right when its top term is a topic word of the cluster's majority truth.
        right = 0
        for c, lab in zip(ids, labels):
            if c < 0:
                continue
            members = true[res.labels == c]
            members = members[members >= 0]
            if members.size and lab.terms:
                major = int(np.bincount(members).argmax())
                right += lab.terms[0] in topics[major]
        label_info = {"clusters_labelled": len([c for c in ids if c >= 0]),
                      "top_term_correct": right}
        row("c-TF-IDF labels", secs_l, peak_l, **label_info)
        by_id = {lab.cluster_id: lab.label for lab in labels}
        points = {
            "x": proj.xy[:, 0], "y": proj.xy[:, 1], "z": proj.xyz[:, 2],
            "cluster_id": res.labels, "label": [by_id[c] for c in res.labels.tolist()],
            "contact": ["Ayşe"] * n, "date": ["2024-01-01"] * n,
            "snippet": [t[:80] for t in texts],
        }
        with tempfile.TemporaryDirectory() as tmp:
            summ = cluster_summary(points)
            files, secs_m, peak_m = timed(write_map, Path(tmp), points, summ, title="bench")
            sizes = {p.name: round(p.stat().st_size / 2**20, 2)
                     for p in (files.html, files.html_3d, files.png)}
        row("write_map (2 HTML + PNG)", secs_m, peak_m, file_mb=sizes)

    width = max(len(r["step"]) for r in rows)
    print(f"{'step':<{width}}  {'seconds':>8}  {'peak RSS MB':>11}  notes")
    for r in rows:
        notes = ", ".join(f"{k}={v}" for k, v in r.items()
                          if k not in ("step", "seconds", "peak_rss_mb"))
        print(f"{r['step']:<{width}}  {r['seconds']:>8.2f}  {r['peak_rss_mb']:>11.1f}  {notes}")
    print(f"seeded projection bit-identical across two runs: {deterministic}")
    for k, v in peers.items():
        print(f"{k}: {v}")

    result = {
        "chunks": n, "dim": dim, "source": source, "cores": os.cpu_count(),
        "python": platform.python_version(), "sample": args.sample,
        "min_cluster_size": args.min_cluster_size, "seed": args.seed,
        "deterministic_seeded": deterministic, "jit_warmup_s": round(warmup_s, 1),
        "load_average_1m": round(os.getloadavg()[0], 2), "rows": rows, "peers": peers,
        "quality": q, "labels": label_info,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    existing = {}
    if args.out.exists():
        try:
            existing = json.loads(args.out.read_text())
        except ValueError:
            existing = {}
    runs = existing.get("runs", {}) if isinstance(existing, dict) else {}
    runs[f"{source}|{n}"] = result
    args.out.write_text(json.dumps({"runs": runs}, indent=2, ensure_ascii=False))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
