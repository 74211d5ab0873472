"""Sub-topic labels (the map's second level) judged against a frozen reference set, as
``judge_labels.py`` judges the cluster labels.

Procedure (issue 34), fixed before any score was read:

1. ``--dump``: the parts the map splits its big clusters into (``subtopics._split`` with the
   map's defaults, on the home's layout: the parts depend on the layout, not on any label), each
   with 10 of its chunks drawn at random (seeded by the part's number; message bodies only). A
   part's number is its place in that order; the hash of the parts' rows is the file's first line.
2. An annotator who sees only that file writes, once, per part the topic words of what its
   passages are about, the most specific first (``[]`` when they share none).
3. Parts with an even number are the dev half, odd ones the test half.
4. ``--score``: each part's label as the map draws it (``subtopics.subtopics`` with the store's
   embedding re-rank and the home's cluster labels, which a sub-label never repeats) is
   **topical** when one of its words matches a reference word as in ``judge_labels.topical``. A
   part the map leaves unlabelled counts as a miss.

    PYTHONPATH=. .venv/bin/python benchmarks/judge_subtopics.py --home /tmp/demo40k --dump /tmp/parts.txt
    PYTHONPATH=. .venv/bin/python benchmarks/judge_subtopics.py --home /tmp/demo40k --score --frozen F [--half dev]

Run ``--score`` on a home whose cluster labels are the labeler's being judged (``brb insights``
after a labeler change relabels; ``--relabel`` does it on a copy).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_labels import FILLER  # noqa: E402
from judge_labels import topical  # noqa: E402

from brb_pipeline.config.settings import Settings  # noqa: E402
from brb_pipeline.core.insights import subtopics as st  # noqa: E402
from brb_pipeline.core.insights.labels import message_bodies, name_tokens  # noqa: E402


def parts_of(s: Settings) -> tuple[Any, list[tuple[int, Any]], str]:
    """(points, [(cluster id, rows)] in the map's order, hash of the parts' rows)."""
    from brb_pipeline.stages.insights import _map_data

    points, _, _, _ = _map_data(s, vectors=False)
    parts = st._split(points)  # the map's own defaults
    h = hashlib.sha256(";".join(f"{c}:" + ",".join(map(str, rows.tolist())) for c, rows in parts).encode())
    return points, parts, h.hexdigest()[:16]


def dump(s: Settings, out: Path, sample: int) -> None:
    points, parts, h = parts_of(s)
    texts = points["content"].to_list()
    lines = [f"parts {h}"]
    for pid, (cid, rows) in enumerate(parts):
        lines.append(f"\n=== part {pid} (of cluster {cid}, {rows.size} chunks)")
        for r in random.Random(pid).sample(rows.tolist(), min(sample, rows.size)):
            lines.append("- " + " / ".join(message_bodies(texts[r])[0])[:400])
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


def score(s: Settings, frozen_path: Path, halves: tuple[int, ...]) -> dict[str, Any]:
    from brb_pipeline.stages.insights import _map_data, subtopic_rerank

    frozen = json.loads(frozen_path.read_text(encoding="utf-8"))
    points, parts, h = parts_of(s)
    if frozen["parts"] != h:
        sys.exit("brb: error: this home's parts are not the ones the frozen set was written for")
    points, _, emb, model = _map_data(s, vectors=True)
    names = points["contact"].unique().to_list()
    drawn = st.subtopics(points, names=names, rerank=subtopic_rerank(s), embeddings=emb, embedding_model=model)
    by_part = {(d["cluster_id"], d["n"]): d["label"] for d in drawn}
    bad = name_tokens(names) | FILLER
    ref = {int(k): v for k, v in frozen["clusters"].items()}
    rows = []
    for pid, (cid, prow) in enumerate(parts):
        if pid % 2 not in halves or not ref.get(pid):
            continue
        label = by_part.get((cid, int(prow.size)), "")
        rows.append((pid, cid, label, ref[pid], bool(label) and topical(label, ref[pid], bad)))
    for half in halves:
        got = [r for r in rows if r[0] % 2 == half]
        ok = sum(r[4] for r in got)
        print(f"{('dev', 'test')[half]}: {ok}/{len(got)} topical ({ok / max(1, len(got)):.0%})")
    print("\n| part | cluster | half | reference | label |\n|---|---|---|---|---|")
    for pid, cid, label, words, ok in rows:
        print(f"| {pid} | {cid} | {'dev' if pid % 2 == 0 else 'test'} | {', '.join(words)} | "
              f"{label or '(none)'}{' ✓' if ok else ''} |")
    return {"rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--dump", type=Path, help="write the parts' samples here (outside the repo)")
    ap.add_argument("--sample", type=int, default=10)
    ap.add_argument("--score", action="store_true")
    ap.add_argument("--frozen", type=Path)
    ap.add_argument("--half", choices=("dev", "test", "both"), default="both")
    ap.add_argument("--relabel", action="store_true", help="relabel the clusters on a copy of the home first")
    args = ap.parse_args()
    home = args.home
    if args.relabel:
        from brb_pipeline.stages.insights import run_labels

        home = Path(tempfile.mkdtemp(prefix="brb-subjudge-")) / "home"
        shutil.copytree(args.home, home, ignore=shutil.ignore_patterns("demo-archive", "snapshot", "dagster"))
        (home / "staging" / "insights" / "label_cache.json").unlink(missing_ok=True)
        run_labels(Settings.load(home))
    s = Settings.load(home)
    if args.dump:
        dump(s, args.dump, args.sample)
    if args.score:
        score(s, args.frozen, {"dev": (0,), "test": (1,), "both": (0, 1)}[args.half])


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
