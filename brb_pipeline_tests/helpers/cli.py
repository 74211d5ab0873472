"""The `brb` command line from a test: in a subprocess (``brb``) or in this process (``cli``).

Both use the deterministic hash embedder (``BRB_EMBEDDING_MODEL=hash``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from brb_pipeline.cli.app import main

CLI_ENV = {"BRB_EMBEDDING_MODEL": "hash", "BRB_HDBSCAN_MIN_CLUSTER_SIZE": "8"}
ENV = {**os.environ, **CLI_ENV, "PYTHONUNBUFFERED": "1"}


def brb(*args, home: Path, timeout=300, env=None, **kw) -> subprocess.CompletedProcess:
    """``brb ARGS --home HOME`` in its own process."""
    return subprocess.run([sys.executable, "-m", "brb_pipeline.cli", *args, "--home", str(home)],
                          capture_output=True, text=True, timeout=timeout, env=env or ENV, stdin=subprocess.DEVNULL, **kw)


def cli(*args, home: Path, input: str | None = None) -> Result:
    """``brb ARGS --home HOME`` in this process; stdout and stderr apart."""
    had_pandas = "pandas" in sys.modules
    try:
        return CliRunner().invoke(main, [*map(str, args), "--home", str(home)], env=CLI_ENV, prog_name="brb",
                                  input=input, catch_exceptions=False)
    finally:
        if not had_pandas and sys.modules.get("pandas", False) is None:
            del sys.modules["pandas"]  # `brb search` hides pandas from its own process only


def status_json(home: Path) -> dict:
    r = cli("status", "--json", home=home)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)
