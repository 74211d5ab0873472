"""Crash safety by fault injection: a real `brb ingest` is killed (SIGKILL) at every kill point.

Setup: a home ingested from an archive (the *previous* store), then new messages arrive in the
same chat.db. For every point in :data:`brb_pipeline.core.faults.POINTS` (plus kills at the
second hit of the points inside loops), a copy of that home runs `brb ingest` with
``BRB_FAULT=<point>``, which SIGKILLs the process there. Then:

* every search mode answers, from the previous store when the kill came before the new store
  was published and from the new one after;
* `brb status` says the dead run was interrupted (never "running") and shows both indexes;
* a plain rerun finishes within a bound and leaves exactly the store (rows, vectors, indexes,
  answers) that an uninterrupted run leaves, and a map.

Runs use the deterministic hash embedder: this is about the process, not the model.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brb_pipeline.core import faults
from brb_pipeline.core.store import duck
from brb_pipeline.core.embedding.models import HashEmbedder
from brb_pipeline.demo.chatdb_writer import _register_trigger_functions
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline_tests.helpers.homes import copy_home

pytestmark = pytest.mark.slow

# Line vectors in batches of 8 chunks, so a kill at the second batch leaves some embedded
ENV = {**os.environ, "BRB_EMBEDDING_MODEL": "hash", "BRB_HDBSCAN_MIN_CLUSTER_SIZE": "8", "PYTHONUNBUFFERED": "1",
       "BRB_LINE_BATCH_CHUNKS": "8"}
ENV.pop("BRB_FAULT", None)
QUERIES = ("dinner tonight", "work meeting", "movie")
MODES = ("hybrid", "vector", "lexical")
RERUN_BOUND_S = 180  # generous for a 2-core CI machine; the measured reruns are printed
#: Kill points whose kill leaves the new store already published.
AFTER_PUBLISH = {"published", "projection", "labels", "map_written"}
#: Kill points in the insights stage; the others are killed (and rerun) with --no-insights, which
#: runs every stage up to the published store and indexes in a fifth of the time.
INSIGHTS = {"projection", "labels", "map_written"}
KILLS = list(faults.POINTS) + ["index_built@2", "lines_embedding@2"]


def brb(*args, home: Path, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "brb_pipeline.cli", *args, "--home", str(home)],
                          capture_output=True, text=True, timeout=timeout, env=env or ENV, stdin=subprocess.DEVNULL)


def _trim(src: Path, dst: Path, share: float = 0.25) -> None:
    """``dst``: ``src`` without its newest ``share`` of messages (the archive before they arrived)."""
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    _register_trigger_functions(con)  # chat.db's real triggers call Apple's functions
    n = con.execute("SELECT count(*) FROM message").fetchone()[0]
    cut = con.execute("SELECT date FROM message ORDER BY date DESC LIMIT 1 OFFSET ?", (int(n * share),)).fetchone()[0]
    con.execute("DELETE FROM chat_message_join WHERE message_id IN (SELECT ROWID FROM message WHERE date > ?)", (cut,))
    con.execute("DELETE FROM message WHERE date > ?", (cut,))
    con.commit()
    con.close()


def store_facts(home: Path) -> dict:
    """What the published store holds: rows and vectors (hashed), index presence, answers."""
    from brb_pipeline.core.store.index import index_status
    from brb_pipeline.search.query import run_search
    from brb_pipeline.config.settings import Settings

    con = duck.connect(home / "brb.duckdb", read_only=True)
    try:
        rows = con.execute("SELECT chunk_id, content, embedding::VARCHAR FROM chunks ORDER BY chunk_id").fetchall()
        lines = con.execute("SELECT chunk_id, text_md5, lines, vectors FROM line_vectors ORDER BY chunk_id").fetchall()
        ix = index_status(con)
    finally:
        con.close()
    s = Settings.load(home, embedding_model="hash")
    answers = {(q, m): [h["chunk_ids"] for h in run_search(s, q, embedder=HashEmbedder(dim=384), mode=m, k=5)["hits"]]
               for q in QUERIES for m in MODES}
    return {"rows": len(rows), "digest": hashlib.sha256(repr(rows).encode()).hexdigest(),
            # every chunk's message-line vectors, current for its text (rows, hashed)
            "lines": (len(lines), {r[0] for r in lines} == {r[0] for r in rows},
                      hashlib.sha256(repr(lines).encode()).hexdigest()),
            "indexes": (ix["hnsw"]["present"], ix["fts"]["present"], ix["ready"]), "answers": answers}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash")
    archive = build_demo_archive(root / "archive", messages=400, seed=5)
    src = root / "src"
    src.mkdir()
    _trim(archive.chat_db, src / "chat.db")
    template = root / "template"
    r = brb("ingest", "--chat-db", str(src / "chat.db"), "--addressbook", str(archive.addressbook_dir),
            "--progress", "none", home=template)
    assert r.returncode == 0, r.stderr[-2000:]
    before = store_facts(template)
    shutil.copy(archive.chat_db, src / "chat.db")  # new messages arrive
    reference = copy_home(template, root / "reference")
    t0 = time.perf_counter()
    r = brb("ingest", "--progress", "none", home=reference)
    assert r.returncode == 0, r.stderr[-2000:]
    clean_s = time.perf_counter() - t0
    after = store_facts(reference)
    assert after["rows"] > before["rows"] and after["digest"] != before["digest"]  # the kill has something to lose
    return {"root": root, "template": template, "before": before, "after": after, "clean_s": clean_s}


@pytest.mark.parametrize("point", KILLS)
def test_kill_at_every_point_leaves_a_usable_store_and_a_rerun_converges(world, point):
    from brb_pipeline.cli.app import status_dict
    from brb_pipeline.config.settings import Settings

    home = copy_home(world["template"], world["root"] / f"kill-{point.replace('@', '-')}")
    args = ("ingest", "--progress", "none") + (() if point in INSIGHTS else ("--no-insights",))
    t0 = time.perf_counter()
    r = brb(*args, home=home, env={**ENV, "BRB_FAULT": point})
    kill_s = time.perf_counter() - t0
    assert r.returncode == -signal.SIGKILL, f"{point} was never reached (rc {r.returncode}): {r.stderr[-1500:]}"

    # every search mode answers from the last complete store
    expected = world["after"] if point.split("@")[0] in AFTER_PUBLISH else world["before"]
    assert store_facts(home) == expected

    # the dead run is reported as interrupted, not running
    st = status_dict(Settings.load(home))
    assert st["last_ingestion"]["status"] == "interrupted"
    assert st["search_ready"] and all(v["matches_chunks"] for v in st["indexes"].values())

    # a plain rerun finishes and leaves what an uninterrupted run leaves
    t0 = time.perf_counter()
    r = brb(*args, home=home, timeout=RERUN_BOUND_S, env={**ENV, "BRB_LOG": "INFO"})
    rerun_s = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    if point == "lines_embedding@2":  # the two batches embedded before the kill were kept, not embedded again
        assert "Saving - kept the message-line vectors of 16 chunks from an unfinished run" in r.stderr, r.stderr[-2000:]
        assert "message-line vectors of 16 chunks taken from an interrupted run" in r.stderr, r.stderr[-2000:]
    assert not (home / "brb.duckdb.lines").exists()
    assert store_facts(home) == world["after"]
    assert not (home / "brb.duckdb.next").exists()
    if point in INSIGHTS:
        assert (home / "insights" / "map.html").stat().st_mtime > (home / "brb.duckdb").stat().st_mtime
    st = status_dict(Settings.load(home))
    assert st["last_ingestion"]["status"] == "success" and st["last_success"]["messages"] == st["messages"]
    print(f"\nKILL {point:<20} killed after {kill_s:5.1f} s; rerun {rerun_s:5.1f} s "
          f"(uninterrupted run {world['clean_s']:.1f} s)")


def test_a_run_waiting_on_a_dead_runs_slot_is_freed(world):
    """The original wedge: a SIGKILLed run kept its `brb_duckdb` pool slot and every later run
    waited for it forever. Kill inside the store stage (slot held), then rerun with a bound."""
    import dagster as dg

    from brb_pipeline.orchestration.instance import instance_for
    from brb_pipeline.config.settings import Settings

    home = copy_home(world["template"], world["root"] / "slot")
    r = brb("ingest", "--progress", "none", "--no-insights", home=home, env={**ENV, "BRB_FAULT": "load_committed"})
    assert r.returncode == -signal.SIGKILL
    instance = instance_for(Settings.load(home))
    held = instance.event_log_storage.get_concurrency_run_ids()
    assert held, "the killed run should still hold its concurrency slot (else this test proves nothing)"
    stuck = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
    assert stuck
    r = brb("ingest", "--progress", "none", "--no-insights", home=home, timeout=RERUN_BOUND_S)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not instance.event_log_storage.get_concurrency_run_ids() & held
    for run in stuck:
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
