"""`brb ui`: the Dagster webserver and daemon, on Dagster's current entry points.

``dagster dev`` is superseded (it warns "Use 'dg dev' instead", and ``dg dev`` needs the
dagster-dg project layout); what it started is two processes, which this starts directly:
``dagster-webserver`` (the UI, on 127.0.0.1 only) and ``dagster-daemon run`` (run queue,
the automation sensor), both on the pipeline's ``workspace.yaml`` and the home's ``DAGSTER_HOME``
(whose ``dagster.yaml`` keeps the run queue limited as before). Ctrl-C or SIGTERM stops both;
if one of them exits, the other is stopped too.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

#: The repository's ``workspace.yaml`` (the one code location, ``orchestration.definitions``).
WORKSPACE = Path(__file__).resolve().parents[2] / "workspace.yaml"


def commands(workspace: Path, port: int, host: str = "127.0.0.1") -> list[list[str]]:
    """The two command lines: the webserver, then the daemon."""
    return [
        [sys.executable, "-m", "dagster_webserver", "-w", str(workspace), "-h", host, "-p", str(port)],
        [sys.executable, "-m", "dagster._daemon", "run", "-w", str(workspace)],
    ]


def serve(workspace: Path, port: int, env: Mapping[str, str], *, poll_s: float = 0.5) -> int:
    """Run both until one exits or a signal arrives; returns the exit code to leave with."""
    procs = [subprocess.Popen(cmd, env=dict(env)) for cmd in commands(workspace, port)]
    stopping: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        stopping.append(signum)

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stopping and all(p.poll() is None for p in procs):
            time.sleep(poll_s)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT if stopping and stopping[0] == signal.SIGINT else signal.SIGTERM)
        deadline = time.time() + 20
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if stopping:
        return 0
    return next((p.returncode for p in procs if p.returncode), 0)
