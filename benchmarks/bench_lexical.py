"""BM25 side cost of the lexical extras: the current ``core/store/index.py`` against one at a git rev.

Builds a demo archive, reads and chunks it (one contact per chat), then for each version of
``lexical_extra``/``LEXICAL_EXTRA_CANDIDATE``/``FTS_PARAMS``: computes the extras column the way
``store._lexical_extras`` does (vectorized pre-filter, Python on flagged rows only) and builds
the FTS index over ``content`` + ``lexical_extra`` in an in-memory DuckDB. Prints one JSON line
per version: chunks, rows flagged, extras seconds, FTS build seconds, extra tokens.

    .venv/bin/python benchmarks/bench_lexical.py --messages 50000 --rev f9031b6
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import duckdb
import polars as pl

from brb_pipeline.core.store import index as current
from brb_pipeline.core.store.duck import extension_directory
from brb_pipeline.core.chunking import ChunkParams, chunk_messages
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline.sources.imessage import read_imessage

ROOT = Path(__file__).resolve().parents[1]


def module_at(rev: str) -> types.ModuleType:
    src = subprocess.run(["git", "show", f"{rev}:brb_pipeline/core/index.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader(f"index_{rev}", loader=None)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    exec(compile(src, f"index@{rev}", "exec"), mod.__dict__)
    return mod


def extras(mod: types.ModuleType, content: pl.Series) -> tuple[list[str], int, float]:
    t0 = time.perf_counter()
    out = [""] * len(content)
    flagged = content.str.contains(mod.LEXICAL_EXTRA_CANDIDATE).fill_null(False).arg_true().to_list()
    for i in flagged:
        out[i] = mod.lexical_extra(content[i])
    return out, len(flagged), time.perf_counter() - t0


def fts_seconds(mod: types.ModuleType, chunks: pl.DataFrame, extra: list[str]) -> float:
    con = duckdb.connect(config={"extension_directory": str(extension_directory()),
                                 "autoinstall_known_extensions": False, "autoload_known_extensions": False})
    con.execute("LOAD fts")
    frame = chunks.select("chunk_id", "content").with_columns(pl.Series("lexical_extra", extra)).to_arrow()
    con.execute("CREATE TABLE chunks AS SELECT * FROM frame")
    p = mod.FTS_PARAMS
    ignore = p["ignore"].replace("'", "''")
    t0 = time.perf_counter()
    con.execute(
        "PRAGMA create_fts_index('chunks', 'chunk_id', 'content', 'lexical_extra', "
        f"stemmer = '{p['stemmer']}', stopwords = '{p['stopwords']}', ignore = '{ignore}', "
        f"strip_accents = {p['strip_accents']}, lower = {p['lower']}, overwrite = 1)"
    )
    seconds = time.perf_counter() - t0
    con.close()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--rev", default="HEAD", help="git rev of the index.py to compare against")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        demo = build_demo_archive(Path(tmp), messages=args.messages, seed=7)
        msgs = read_imessage(demo.chat_db).messages.with_columns(pl.col("chat_id").alias("contact_id"))
    # Senders by name, as after contact resolution (a bare handle would read as a phone number).
    names = {h: "Person " + chr(65 + i % 26) + chr(65 + i // 26 % 26) for i, h in enumerate(msgs["sender"].drop_nulls().unique().sort())}
    chunks = chunk_messages(msgs, batch="b", contact_names={}, sender_names=names, params=ChunkParams(time_zone="UTC"))
    for name, mod in ((args.rev, module_at(args.rev)), ("working tree", current)):
        best_x = best_f = float("inf")
        for _ in range(args.repeat):
            extra, flagged, sx = extras(mod, chunks["content"])
            best_x = min(best_x, sx)
            best_f = min(best_f, fts_seconds(mod, chunks, extra))
        print(json.dumps({"index.py": name, "chunks": chunks.height, "flagged": flagged,
                          "extras_s": round(best_x, 3), "fts_build_s": round(best_f, 3),
                          "extra_tokens": sum(len(e.split()) for e in extra)}))
        sys.stdout.flush()


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
