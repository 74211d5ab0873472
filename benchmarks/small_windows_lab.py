"""Smaller windows as the retrieval unit (issue 29, item 4): 4-message windows with stride 2
against today's 8 / 4, on the long-chats dev half.

Parent-child (``parent_child_lab.py``) adds message-level children to the 8-message windows and
costs a second vector per message. Smaller windows would give finer matching with no new table:
each message is still in two windows, so the embedded tokens stay about the same and only the
vectors (one per window) double. Each conversation is ingested twice, once per window size
(``BRB_WINDOW`` / ``BRB_STRIDE``), and brb's three modes are asked every dev question. Passages
are judged as ``bench_long_chats.py`` judges them, both as returned and with ``context`` (the
windows just before and after each passage), which brings a 4-message hit back to about the 8
messages of one default window.

    .venv/bin/python benchmarks/small_windows_lab.py [--work /tmp/brb-small-windows] [--reuse]

Writes ``benchmarks/results/small_windows_dev.json``. Dev only: nothing here reads test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import bench_long_chats as blc  # noqa: E402
import long_chats as lc  # noqa: E402

from brb_pipeline.config.settings import Settings  # noqa: E402

SIZES = {"8 / 4 (default)": {"BRB_WINDOW": "8", "BRB_STRIDE": "4"},
         "4 / 2": {"BRB_WINDOW": "4", "BRB_STRIDE": "2"}}


def run(work: Path, reuse: bool, boot: int) -> dict[str, Any]:
    from brb_pipeline.search.query import Searcher

    found: dict[str, list] = {}
    chunks: dict[str, int] = {}
    for size, env in SIZES.items():
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # the ingest subprocess reads them; search reads the home's store
        try:
            for stem in lc.CONVERSATIONS:
                home = blc.ingest(stem, work / f"w{env['BRB_WINDOW']}s{env['BRB_STRIDE']}", reuse)
                qs = [q for q in lc.questions(stem, lc.load(stem)) if q.half == "dev"]
                with Searcher.open(Settings.load(home)) as s:
                    chunks[size] = chunks.get(size, 0) + s.con.execute("SELECT count(*) FROM chunks").fetchone()[0]
                    for mode in blc.BRB_MODES:
                        for ctx in (False, True):
                            name = f"{size}, {mode}{', with context' if ctx else ''}"
                            for q in qs:
                                hits = s.search(q.text, k=blc.K, log=False, mode=mode, context=ctx)["hits"]
                                texts = ["\n".join([h["text"] or ""] + [c["text"] or "" for c in h.get("context", [])])
                                         for h in hits]
                                found.setdefault(name, []).append((q, *blc.judge(texts, q.evidence)))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    report = {}
    for name, rows in found.items():
        cats = {c: blc.summarize([(r, f) for q, r, f in rows if q.category == c], boot) for c in lc.CATEGORIES.values()}
        report[name] = {"all": blc.summarize([(r, f) for _, r, f in rows], boot), "per_category": cats}
    return {"half": "dev", "chunks": chunks, "systems": report}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/brb-small-windows"))
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--boot", type=int, default=1000)
    args = ap.parse_args(argv)
    out = run(args.work, args.reuse, args.boot)
    print(f"long chats, dev half; chunks per window size: {out['chunks']}\n" + blc.table(out["systems"]))
    (ROOT / "benchmarks" / "results" / "small_windows_dev.json").write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
