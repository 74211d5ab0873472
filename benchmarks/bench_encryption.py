"""Encryption at rest: what it costs, and that it hides what it should, measured in one run.

One demo archive of ``--messages`` messages (default 10,000: the issue's sample), built outside
both homes, ingested by ``runner.run_ingest`` into a plaintext home (``encryption=False``) and an
encrypted one (AES-256-GCM, the default), ``--repeats`` times each in alternating order (the
machine is shared; the median of each is reported). Then, on each home:

* ingestion wall time and its steps (ingest = snapshot/parse/contacts, batches = chunk/embed,
  finalize = load, indexes, map), the index builds (``run_reindex``: HNSW + BM25 in plaintext,
  BM25 + exact vectors in an encrypted home) and the chunk store's size;
* hybrid search p50/p95 over ``--queries`` phrases drawn from the corpus on an open store
  (``Searcher``), and the one-shot ``brb search`` path (``run_search_cold``: opens brb.db,
  brb.duckdb and the model each time) over 5 queries;
* the byte scan of every file under the home (raw bytes and each store's own reader, as the
  privacy tests do) for distinctive message phrases, contact names and handles.

Run: ``.venv/bin/python benchmarks/bench_encryption.py [--messages 10000] [--repeats 1]
[--model bundled:all-MiniLM-L6-v2|hash] [--out benchmarks/results/encryption.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from brb_pipeline.core import metadata  # noqa: E402
from brb_pipeline.demo.generate import build_demo_archive  # noqa: E402
from brb_pipeline.config.settings import Settings  # noqa: E402
from brb_pipeline_tests.bytescan import scan  # noqa: E402


def _settings(home: Path, archive, model: str, encrypted: bool) -> Settings:
    return Settings(home=home, chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir,
                    embedding_model=model, encryption=encrypted)


def _ingest(s: Settings) -> dict[str, Any]:
    from brb_pipeline.orchestration.runner import run_ingest

    shutil.rmtree(s.home, ignore_errors=True)
    t0 = time.perf_counter()
    r = run_ingest(s)
    return {"wall_s": time.perf_counter() - t0, **{f"{k}_s": v for k, v in r["timings"].items()},
            "chunks": r["chunks"]}


def _search(s: Settings, queries: list[str]) -> dict[str, float]:
    """Hybrid search on an open store: the search alone (``log=False``), and as ``brb search``
    runs it, with its entry appended to the search log in brb.db; then the one-shot path."""
    from brb_pipeline.search.query import Searcher, run_search_cold

    out: dict[str, float] = {}
    with Searcher.open(s) as searcher:
        searcher.search(queries[0], log=False)  # warm: first-query costs are the one-shot row's
        for name, log in (("search", False), ("logged", True)):
            lat = []
            for q in queries:
                t = time.perf_counter()
                searcher.search(q, k=10, log=log)
                lat.append((time.perf_counter() - t) * 1e3)
            lat.sort()
            out[f"{name}_p50_ms"] = statistics.median(lat)
            out[f"{name}_p95_ms"] = lat[int(0.95 * (len(lat) - 1))]
    cold = []
    for q in queries[:5]:
        t = time.perf_counter()
        run_search_cold(s, q)
        cold.append((time.perf_counter() - t) * 1e3)
    out["oneshot_p50_ms"] = statistics.median(cold)
    return out


def _reindex(s: Settings) -> float:
    from brb_pipeline.stages.store import run_reindex

    t = time.perf_counter()
    run_reindex(s)
    return time.perf_counter() - t


def _needles(archive, plain: Settings, n_phrases: int = 12) -> list[str]:
    from brb_pipeline.sources.imessage import read_imessage

    rng = random.Random(5)
    texts = [t for t in read_imessage(archive.chat_db).messages["text"].drop_nulls().to_list() if len(t) >= 40]
    phrases = [t[:40] for t in rng.sample(texts, n_phrases)]
    c = metadata.read_contacts(plain.brb_db).sort("rank").head(8)
    names = [n for n, src in zip(c["display_name"], c["name_source"]) if src == "addressbook"][:5]
    handles = [h for hs in c["handles"].to_list() for h in hs][:6]
    return phrases + names + handles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--model", default="bundled:all-MiniLM-L6-v2")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "encryption.json")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-encryption-"))
    os.environ["BRB_KEY_DIR"] = str(root / "keys")  # the key file, not this machine's keychain
    os.environ.pop("BRB_KEY", None)
    os.environ["BRB_ENCRYPTION"] = "1"
    try:
        archive = build_demo_archive(root / "archive", messages=a.messages, seed=11)
        homes = {m: _settings(root / m, archive, a.model, m == "encrypted") for m in ("plaintext", "encrypted")}
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in homes}
        for i in range(a.repeats):
            for m in (("plaintext", "encrypted") if i % 2 == 0 else ("encrypted", "plaintext")):
                runs[m].append(_ingest(homes[m]))
                print(f"{m} ingestion {i + 1}: {runs[m][-1]['wall_s']:.1f} s", file=sys.stderr)
        rng = random.Random(3)
        from brb_pipeline.sources.imessage import read_imessage

        words = [t for t in read_imessage(archive.chat_db).messages["text"].drop_nulls().to_list() if len(t) > 25]
        queries = [" ".join(t.split()[:5]) for t in rng.sample(words, a.queries)]
        needles = _needles(archive, homes["plaintext"])
        out: dict[str, Any] = {"messages": a.messages, "model": a.model, "repeats": a.repeats, "modes": {}}
        for m, s in homes.items():
            row = {k: statistics.median(r[k] for r in runs[m]) for k in runs[m][0]}
            row["reindex_s"] = _reindex(s)
            row.update(_search(s, queries))
            row["store_mb"] = s.duckdb_path.stat().st_size / 1e6
            found = scan(s.home, needles)
            row["needles"] = len(needles)
            row["needles_found"] = len({f.needle for f in found})
            row["files_with_needles"] = len({f.path for f in found})
            out["modes"][m] = row
        _report(out, a.out)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _report(out: dict[str, Any], path: Path) -> None:
    p, e = out["modes"]["plaintext"], out["modes"]["encrypted"]
    rows = [("ingestion wall (s)", "wall_s", "ratio"), ("  ingest: snapshot, parse (s)", "ingest_s", "ratio"),
            ("  batches: chunk, embed (s)", "batches_s", "ratio"), ("  finalize: load, indexes, map (s)", "finalize_s", "ratio"),
            ("index rebuild (s)", "reindex_s", "ratio"), ("hybrid search p50, open store (ms)", "search_p50_ms", "diff"),
            ("hybrid search p95, open store (ms)", "search_p95_ms", "diff"),
            ("  + its search-log entry, p50 (ms)", "logged_p50_ms", "diff"),
            ("one-shot `brb search` p50 (ms)", "oneshot_p50_ms", "diff"),
            ("brb.duckdb (MB)", "store_mb", "ratio"), ("needles found by the byte scan", "needles_found", "count"),
            ("files holding a needle", "files_with_needles", "count")]
    lines = [f"# Encryption at rest: {out['messages']:,} messages, model {out['model']}, "
             f"median of {out['repeats']} run(s) each", "",
             "| measure | plaintext | encrypted | cost |", "|---|---:|---:|---:|"]
    for label, key, how in rows:
        a, b = p[key], e[key]
        cost = (f"{(b / a - 1) * 100:+.1f} %" if how == "ratio" and a else
                f"{b - a:+.1f} ms" if how == "diff" else f"of {p['needles']}")
        lines.append(f"| {label} | {a:,.1f} | {b:,.1f} | {cost} |")
    text = "\n".join(lines)
    print(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    path.with_suffix(".md").write_text(text + "\n")


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
