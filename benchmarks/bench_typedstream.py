"""Benchmark: decoding chat.db ``attributedBody`` blobs, ours vs pytypedstream.

Blobs are built with ``encode_attributed_body`` from the real chit-chat corpus texts (a mix of
the NSAttributedString/NSString and NSMutableAttributedString/NSMutableString layouts), then
decoded with our fast path (``decode_attributed_body``), our general parser alone, and
pytypedstream on a subset. Every decoder's output is checked against the source text.

Usage:
    .venv/bin/python benchmarks/bench_typedstream.py [--blobs 200000] [--peer-blobs 3000]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

import chitchat_dataset
import typedstream as pytypedstream

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install
from brb_pipeline.sources import typedstream as ts

RESULTS = Path(__file__).parent / "results" / "typedstream.json"


def _texts(n: int, seed: int) -> list[str]:
    """n message texts from the chit-chat corpus, cycled if the corpus is smaller."""
    path = Path(chitchat_dataset.__path__[0]) / "dataset.json"
    with path.open() as fh:
        data = json.load(fh)
    texts = [m["text"] for conv in data.values() for turn in conv["messages"] for m in turn]
    random.Random(seed).shuffle(texts)
    return [texts[i % len(texts)] for i in range(n)]


def _pyts_text(blob: bytes) -> str:
    return pytypedstream.unarchive_from_data(blob).contents[0].values[0].value


def _time(fn, blobs: list[bytes], repeats: int) -> tuple[float, list]:
    """Best wall time (seconds) over repeats of decoding all blobs, and the last outputs."""
    best = float("inf")
    out: list = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = [fn(b) for b in blobs]
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blobs", type=int, default=200_000, help="blobs decoded by our decoder")
    ap.add_argument("--peer-blobs", type=int, default=3_000, help="subset decoded by pytypedstream")
    ap.add_argument("--general-blobs", type=int, default=50_000, help="subset for our general parser")
    ap.add_argument("--repeats", type=int, default=3, help="best-of repeats for our decoders")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    texts = _texts(args.blobs, args.seed)
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    blobs = [ts.encode_attributed_body(t, mutable=rng.random() < 0.3) for t in texts]
    encode_s = time.perf_counter() - t0
    total_mb = sum(map(len, blobs)) / 1e6

    rows = []

    def record(name: str, n: int, seconds: float, outputs: list, expected: list[str]) -> None:
        mb = sum(map(len, blobs[:n])) / 1e6
        wrong = sum(o != e for o, e in zip(outputs, expected))
        rows.append(
            {
                "decoder": name,
                "blobs": n,
                "seconds": round(seconds, 4),
                "blobs_per_s": round(n / seconds),
                "mb_per_s": round(mb / seconds, 2),
                "mismatches": wrong,
            }
        )

    s, out = _time(ts.decode_attributed_body, blobs, args.repeats)
    record("brb decode_attributed_body (fast path)", len(blobs), s, out, texts)
    g = min(args.general_blobs, len(blobs))
    s, out = _time(ts._decode_general, blobs[:g], args.repeats)
    record("brb general parser only", g, s, out, texts[:g])
    p = min(args.peer_blobs, len(blobs))
    s, out = _time(_pyts_text, blobs[:p], 1)
    record("pytypedstream unarchive_from_data", p, s, out, texts[:p])

    peer = rows[-1]["blobs_per_s"]
    for r in rows:
        r["ratio_vs_pytypedstream"] = round(r["blobs_per_s"] / peer, 1)

    print(f"{len(blobs):,} blobs, {total_mb:.1f} MB, built in {encode_s:.2f} s "
          f"({len(blobs) / encode_s:,.0f} encodes/s)")
    print(f"{'decoder':<40} {'blobs':>8} {'blobs/s':>11} {'MB/s':>8} {'x peer':>8} {'wrong':>6}")
    for r in rows:
        print(f"{r['decoder']:<40} {r['blobs']:>8,} {r['blobs_per_s']:>11,} {r['mb_per_s']:>8.2f} "
              f"{r['ratio_vs_pytypedstream']:>8.1f} {r['mismatches']:>6}")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "benchmark": "typedstream",
        "corpus": "chitchat_dataset texts, encode_attributed_body (30% mutable layout)",
        "total_blobs": len(blobs),
        "total_mb": round(total_mb, 2),
        "encodes_per_s": round(len(blobs) / encode_s),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "rows": rows,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
