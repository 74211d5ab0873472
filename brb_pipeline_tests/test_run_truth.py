"""Checks and status tell the truth: a failed ERROR check fails the run and keeps the previous
store; WARN checks come back as warnings; a failed step prints one line and logs its trace;
SIGINT stops a run that is busy inside a step; status shows each index.

Real `brb` processes on a small demo archive with the hash embedder, patched where a test needs
a broken embedder or a step that never reaches a cancellation point.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline_tests.helpers.homes import copy_home

ENV = {**os.environ, "BRB_EMBEDDING_MODEL": "hash", "BRB_HDBSCAN_MIN_CLUSTER_SIZE": "8", "PYTHONUNBUFFERED": "1"}
ENV.pop("BRB_FAULT", None)

PATCHED = """
import sys
import numpy as np
from brb_pipeline.core.embedding import models as embedding
orig = embedding.HashEmbedder.embed
def patched(self, texts):
{body}
embedding.HashEmbedder.embed = patched
from brb_pipeline.cli.app import main
sys.argv = ["brb"] + sys.argv[1:]
main()
"""
NAN = PATCHED.format(body="    v = orig(self, texts)\n    v[0, :] = np.nan\n    return v")
SLOW_INDEX = """
import sys, time
from brb_pipeline.core.store import index
orig = index.build_fts
def slow(con):
    time.sleep(600)  # a step that never reaches a cancellation point
    return orig(con)
index.build_fts = slow
import brb_pipeline.stages.store as st
st.build_fts = slow
from brb_pipeline.cli.app import main
sys.argv = ["brb"] + sys.argv[1:]
main()
"""


def brb(*args, home: Path, script: str | None = None, env=None, timeout=300, **kw) -> subprocess.CompletedProcess:
    head = [sys.executable, "-c", script] if script else [sys.executable, "-m", "brb_pipeline.cli"]
    return subprocess.run([*head, *args, "--home", str(home)], capture_output=True, text=True, timeout=timeout,
                          env=env or ENV, stdin=subprocess.DEVNULL, **kw)


def status(home: Path) -> dict:
    r = brb("status", "--json", home=home)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return build_demo_archive(tmp_path_factory.mktemp("truth_archive"), messages=300, seed=31)


@pytest.fixture(scope="module")
def ingested(archive, tmp_path_factory):
    home = tmp_path_factory.mktemp("truth_home")
    r = brb("ingest", "--chat-db", str(archive.chat_db), "--addressbook", str(archive.addressbook_dir),
            "--progress", "none", "--no-insights", home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    return home


def test_status_shows_both_indexes_against_the_chunk_count(ingested):
    st = status(ingested)
    assert st["chunks"] > 0 and st["search_ready"] is True and st["store_update_pending"] is False
    for name in ("hnsw", "fts"):
        assert st["indexes"][name] == {"present": True, "rows": st["chunks"], "matches_chunks": True}
    text = brb("status", home=ingested).stdout
    assert "hnsw ok, fts ok" in text


def test_error_check_fails_the_run_keeps_the_store_and_says_why_in_one_line(ingested, tmp_path):
    home = copy_home(ingested, tmp_path / "h")
    before = status(home)
    r = brb("ingest", "--reembed", "--progress", "jsonl", "--no-insights", home=home, script=NAN)
    assert r.returncode == 2, r.stderr[-2000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("brb:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "vectors_are_valid failed" in errors[0] and "invalid_vectors 1" in errors[0]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["type"] == "result" and result["success"] is False
    assert result["error"]["kind"] == "CheckFailedError"
    after = status(home)
    assert after["last_ingestion"]["status"] == "failed"
    assert "vectors_are_valid" in after["last_ingestion"]["error"]
    # the broken vectors never reached the store searches read
    assert after["chunks"] == before["chunks"] and after["search_ready"]
    import duckdb

    con = duckdb.connect(str(home / "brb.duckdb"), read_only=True)
    try:
        bad = con.execute("SELECT count(*) FROM chunks WHERE NOT isfinite(array_inner_product(embedding, embedding))")
        assert bad.fetchone()[0] == 0
    finally:
        con.close()


@pytest.mark.slow  # fault injection through a whole `brb ingest`
def test_warn_check_is_a_warning_line_and_a_status_entry(ingested, tmp_path):
    home = copy_home(ingested, tmp_path / "h")
    # clusters that can never form: every chunk stays unclustered, the noise check (WARN) fails
    env = {**ENV, "BRB_HDBSCAN_MIN_CLUSTER_SIZE": "100000"}
    r = brb("ingest", "--progress", "jsonl", home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    warns = [m for m in lines if m.get("type") == "log" and m.get("level") == "warning" and "cluster_noise_share" in m["message"]]
    assert len(warns) == 1, lines[-5:]
    result = lines[-1]
    assert result["success"] is True and [w["check"] for w in result["data"]["warnings"]] == ["cluster_noise_share"]
    st = status(home)
    assert st["last_ingestion"]["status"] == "success"
    assert [w["check"] for w in st["warnings"]] == ["cluster_noise_share"]
    assert st["warnings"][0]["share"] > st["warnings"][0]["max_share"] == 0.35


def test_a_failed_step_prints_one_line_naming_the_log_with_the_trace(ingested, tmp_path):
    home = copy_home(ingested, tmp_path / "h")
    boom = PATCHED.format(body="    raise RuntimeError('model exploded')")
    r = brb("ingest", "--reembed", "--progress", "none", "--no-insights", home=home, script=boom)
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if line.startswith("brb:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr and "STEP_FAILURE" not in r.stderr, r.stderr[-3000:]
    assert "RuntimeError: model exploded" in errors[0]
    log_path = Path(errors[0].rsplit("details in ", 1)[1].rstrip(")"))
    assert log_path.parent == home / "logs"
    logged = log_path.read_text()
    assert "RuntimeError: model exploded" in logged and "Stack Trace" in logged and "run_embed" in logged
    assert status(home)["last_ingestion"]["status"] == "failed"


@pytest.mark.slow  # crash harness: a real SIGINT mid-step
def test_sigint_stops_a_run_busy_inside_a_step(ingested, tmp_path):
    """An index build never reaches a cancellation point; SIGINT must still end the run within
    the grace period, record it as cancelled, and leave the previous store searchable."""
    home = copy_home(ingested, tmp_path / "h")
    p = subprocess.Popen([sys.executable, "-c", SLOW_INDEX, "ingest", "--reembed", "--progress", "jsonl",
                          "--no-insights", "--home", str(home)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=ENV, stdin=subprocess.DEVNULL)
    deadline = time.time() + 120
    for line in p.stdout:
        m = json.loads(line)
        if m.get("type") == "stage_progress" and m["stage"] == "saving" and "BM25" in m.get("message", ""):
            break
        assert time.time() < deadline
    time.sleep(1.0)  # inside the (patched) endless build
    t0 = time.time()
    p.send_signal(signal.SIGINT)
    rest = p.stdout.read()
    p.wait(timeout=30)
    stopped_in = time.time() - t0
    assert p.returncode == 130, p.stderr.read()[-2000:]
    assert stopped_in < 10
    assert json.loads(rest.strip().splitlines()[-1])["success"] is False
    st = status(home)
    assert st["last_ingestion"]["status"] == "cancelled" and st["search_ready"]
    # and nothing waits for it afterwards
    r = brb("ingest", "--progress", "none", "--no-insights", home=home, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    assert status(home)["last_ingestion"]["status"] == "success"
