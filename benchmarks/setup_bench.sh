#!/usr/bin/env bash
# Install the benchmark-only peer (sentence-transformers on torch CPU) into .venv.
#
# torch==2.13.0 is taken from a local CPU build on this machine's disk; never ask pip for a bare
# "torch" (it would pull a multi-GB CUDA build). sentence-transformers goes in with --no-deps so
# pip never resolves torch itself; its small runtime deps are listed explicitly and are mostly
# present already (transformers, huggingface_hub, tqdm, scikit-learn, scipy, Pillow).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
$PY -m pip install --quiet torch==2.13.0
$PY -m pip install --quiet --no-deps sentence-transformers
# Deps sentence-transformers imports; pip only installs the ones that are missing.
for dep in tqdm scikit-learn scipy Pillow typing_extensions; do
  $PY -c "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('${dep}'.lower().replace('-','_').replace('scikit_learn','sklearn').replace('pillow','PIL')) else 1)" \
    || $PY -m pip install --quiet --no-deps "$dep"
done
$PY -c "import torch, sentence_transformers; print('setup_bench - torch', torch.__version__, '| sentence-transformers', sentence_transformers.__version__)"
