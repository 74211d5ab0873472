#!/usr/bin/env bash
# Install the benchmark-only peer (sentence-transformers on torch CPU) into .venv, pinned.
#
# Every package the peer imports is pinned in benchmarks/peer_requirements.txt and installed with
# --no-deps, so pip never resolves anything itself: never a bare "torch" (a multi-GB CUDA build),
# never a newer transformers under the ratio. torch==2.13.0 is the local CPU wheel in /opt/wheels.
# torch declares setuptools>=77 only for building C++ extensions, which the peer never does; it
# is left as the venv has it. The last line fails if an installed version differs from its pin.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
$PY -m pip install --quiet --no-deps -r benchmarks/peer_requirements.txt
$PY - <<'PY'
import re, sys
from importlib.metadata import version
pins = [l.split("#")[0].strip() for l in open("benchmarks/peer_requirements.txt")]
pins = [p.split("==") for p in pins if p]
bad = [f"{n} {version(n)} (pinned {v})" for n, v in pins if not re.fullmatch(re.escape(v) + r"(\+.*)?", version(n))]
if bad:
    sys.exit("setup_bench - installed versions differ from the pins: " + ", ".join(bad))
import torch, sentence_transformers
print("setup_bench - torch", torch.__version__, "| sentence-transformers", sentence_transformers.__version__,
      f"| {len(pins)} pins match")
PY
