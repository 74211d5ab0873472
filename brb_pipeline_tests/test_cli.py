"""The `brb` command line through its entry point, in subprocesses, on real files.

Every run uses the deterministic hash embedder (BRB_EMBEDDING_MODEL=hash): these tests are about
the command line, errors, progress and cancellation, not the model.
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brb_pipeline.demo.generate import build_demo_archive

ENV = {**os.environ, "BRB_EMBEDDING_MODEL": "hash", "BRB_HDBSCAN_MIN_CLUSTER_SIZE": "8", "PYTHONUNBUFFERED": "1"}


def brb(*args, home: Path, timeout=300, env=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "brb_pipeline.cli", *args, "--home", str(home)],
                          capture_output=True, text=True, timeout=timeout, env=env or ENV, stdin=subprocess.DEVNULL, **kw)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return build_demo_archive(tmp_path_factory.mktemp("cli_archive"), messages=700, seed=21)


@pytest.fixture(scope="module")
def ingested_home(archive, tmp_path_factory):
    home = tmp_path_factory.mktemp("cli_home")
    r = brb("ingest", "--chat-db", str(archive.chat_db), "--addressbook", str(archive.addressbook_dir),
            "--progress", "none", home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    return home


def _one_line_error(r):
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if line.startswith("brb:")]
    assert len(errors) == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    return errors[0]


def test_missing_chat_db(tmp_path):
    line = _one_line_error(brb("ingest", "--chat-db", str(tmp_path / "nope.db"), home=tmp_path / "h"))
    assert "not found" in line and "nope.db" in line


def test_not_a_database(tmp_path):
    (tmp_path / "src").mkdir()
    p = tmp_path / "src" / "chat.db"
    p.write_text("this is a text file, not SQLite\n" * 10)
    line = _one_line_error(brb("ingest", "--chat-db", str(p), home=tmp_path / "h"))
    assert "not an SQLite database" in line


def test_sqlite_but_not_a_chat_db(tmp_path):
    (tmp_path / "src").mkdir()
    p = tmp_path / "src" / "other.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE notes (id INTEGER, body TEXT)")
    con.commit()
    con.close()
    line = _one_line_error(brb("ingest", "--chat-db", str(p), home=tmp_path / "h"))
    assert "message" in line or "chat.db" in line


def test_locked_database_keeps_earlier_ingestion(archive, ingested_home):
    before = json.loads(brb("status", "--json", home=ingested_home).stdout)
    locker = sqlite3.connect(archive.chat_db, timeout=0, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        line = _one_line_error(brb("ingest", home=ingested_home, timeout=120))
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert "locked" in line
    after = json.loads(brb("status", "--json", home=ingested_home).stdout)
    assert after["chunks"] == before["chunks"] > 0 and after["messages"] == before["messages"]
    r = brb("search", "weekend", "--mode", "lexical", "--json", home=ingested_home)
    assert r.returncode == 0 and json.loads(r.stdout)["hits"]


def test_undecodable_bodies_are_counted_not_fatal(tmp_path):
    from datetime import datetime, timezone

    from brb_pipeline.demo.chatdb_writer import ChatDbBuilder

    (tmp_path / "src").mkdir()
    b = ChatDbBuilder(tmp_path / "src" / "chat.db")
    h = b.add_handle("+15550100200")
    c = b.add_chat([h])
    t = datetime(2024, 1, 1, tzinfo=timezone.utc)
    for i in range(30):
        b.add_message(c, h, f"readable message number {i} about the garden", ts=t.replace(minute=i))
    b.add_message(c, h, None, ts=t.replace(hour=2), text_mode="body_null", raw_body=b"\x04\x0bstreamtyped\x81\xe8\x03garbage")
    b.close()
    home = tmp_path / "h"
    r = brb("ingest", "--chat-db", str(tmp_path / "src" / "chat.db"), "--progress", "none", "--no-insights",
            home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    con = sqlite3.connect(home / "brb.db")
    stats = json.loads(con.execute("SELECT stats_json FROM ingestion_runs ORDER BY started_at DESC").fetchone()[0])
    con.close()
    assert stats.get("stat_undecodable", 0) >= 1


def test_status_json_keys_on_empty_and_full_home(tmp_path, ingested_home):
    empty = json.loads(brb("status", "--json", home=tmp_path / "empty").stdout)
    full = json.loads(brb("status", "--json", home=ingested_home).stdout)
    for st in (empty, full):
        assert {"messages", "contacts", "named_contacts", "chunks", "embedding_model", "last_ingestion",
                "channels", "clusters"} <= set(st)
    assert empty["messages"] == 0 and empty["channels"] == {"imessage": True, "whatsapp": False, "mail": False}
    assert full["messages"] > 0 and full["chunks"] > 0 and full["named_contacts"] > 0
    # another test may have left a failed (locked) run last; the last success is still reported
    assert full["last_ingestion"]["status"] in ("success", "failed")
    assert full["last_success"]["status"] == "success" and full["last_success"]["messages"] == full["messages"]
    assert full["embedding_model"] == "hash-64" or full["embedding_model"].startswith("hash")


def test_search_json_and_insights_path(ingested_home):
    r = brb("search", "movies", "-k", "4", "--json", home=ingested_home)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["hits"]) == 4
    hit = out["hits"][0]
    assert {"chunk_id", "contact", "start", "end", "scores", "text"} <= set(hit)
    assert {"vector", "lexical", "fused"} <= set(hit["scores"])
    r = brb("insights", home=ingested_home)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1].endswith("map.html")


def test_search_session_reads_queries_from_stdin(ingested_home):
    one = json.loads(brb("search", "movies", "-k", "3", "--json", home=ingested_home).stdout)
    r = subprocess.run([sys.executable, "-m", "brb_pipeline.cli", "search", "-", "-k", "3", "--home", str(ingested_home)],
                       input="movies\n\n  dinner tonight  \n", capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [o["query"] for o in lines] == ["movies", "dinner tonight"]  # blank line skipped, text stripped
    assert [h["chunk_id"] for h in lines[0]["hits"]] == [h["chunk_id"] for h in one["hits"]]
    assert all(len(o["hits"]) == 3 and "error" not in o for o in lines)


def test_search_on_empty_home_is_a_clear_error(tmp_path):
    line = _one_line_error(brb("search", "anything", home=tmp_path / "empty"))
    assert "brb ingest" in line


STRAY = """
import sys
import brb_pipeline.pipeline.ingest as ingest
orig = ingest.run_contacts
def noisy(s):
    print("STRAY PRINT FROM LIBRARY CODE")
    import warnings; warnings.warn("stray warning")
    return orig(s)
ingest.run_contacts = noisy
from brb_pipeline.cli import main
sys.argv = ["brb"] + sys.argv[1:]
main()
"""


def test_jsonl_progress_only_json_on_stdout(archive, tmp_path):
    home = tmp_path / "h"
    r = subprocess.run([sys.executable, "-c", STRAY, "ingest", "--chat-db", str(archive.chat_db),
                        "--progress", "jsonl", "--no-insights", "--home", str(home)],
                       capture_output=True, text=True, timeout=300, env=ENV, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    msgs = [json.loads(line) for line in lines]  # every line is one complete JSON object
    assert "STRAY PRINT" in r.stderr and "STRAY PRINT" not in r.stdout
    kinds = {m["type"] for m in msgs}
    assert kinds <= {"stage_progress", "log", "result"}
    stages = {m["stage"] for m in msgs if m["type"] == "stage_progress"}
    assert {"snapshot", "parsing", "chunking", "embedding", "saving"} <= stages
    for m in msgs:
        if m["type"] == "stage_progress":
            assert 0 <= m["percent"] <= 100 and isinstance(m["stats"], dict)
    assert msgs[-1]["type"] == "result" and msgs[-1]["success"] is True
    assert msgs[-1]["data"]["chunks"] > 0


def test_jsonl_error_is_a_result_line(tmp_path):
    r = brb("ingest", "--chat-db", str(tmp_path / "missing.db"), "--progress", "jsonl", home=tmp_path / "h")
    assert r.returncode != 0
    last = json.loads(r.stdout.splitlines()[-1])
    assert last == {"type": "result", "success": False,
                    "error": {"kind": "SourceMissingError", "message": last["error"]["message"]}}


SLOW = """
import sys, time
from brb_pipeline.core.embedding import models as embedding
orig = embedding.HashEmbedder.embed
def slow(self, texts):
    time.sleep(0.4)
    return orig(self, texts)
embedding.HashEmbedder.embed = slow
import brb_pipeline.pipeline.embed as e
e.EMBED_GROUP = 16
from brb_pipeline.cli import main
sys.argv = ["brb"] + sys.argv[1:]
main()
"""


def test_sigint_mid_embedding_leaves_previous_store_usable(archive, tmp_path):
    home = tmp_path / "h"
    r = brb("ingest", "--chat-db", str(archive.chat_db), "--progress", "none", "--no-insights", home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    before = json.loads(brb("status", "--json", home=home).stdout)
    # re-embed everything with a slow embedder so the run is long enough to interrupt
    p = subprocess.Popen([sys.executable, "-c", SLOW, "ingest", "--reembed", "--progress", "jsonl", "--no-insights",
                          "--home", str(home)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=ENV, stdin=subprocess.DEVNULL)
    seen = []
    deadline = time.time() + 120
    for line in p.stdout:
        m = json.loads(line)
        seen.append(m)
        if m["type"] == "stage_progress" and m["stage"] == "embedding" and 0 < m["percent"] < 100:
            p.send_signal(signal.SIGINT)
            break
        assert time.time() < deadline
    rest = p.stdout.read()
    p.wait(timeout=120)
    assert p.returncode == 130, p.stderr.read()[-2000:]
    last = json.loads(rest.strip().splitlines()[-1])
    assert last["success"] is False and last["error"]["kind"] == "CancelledError"
    after = json.loads(brb("status", "--json", home=home).stdout)
    assert after["chunks"] == before["chunks"] and after["last_ingestion"]["status"] == "cancelled"
    r = brb("search", "weekend", "--mode", "lexical", "--json", home=home)
    assert r.returncode == 0 and json.loads(r.stdout)["hits"]


def test_home_inside_the_messages_folder_is_refused(tmp_path):
    src = tmp_path / "Messages"
    src.mkdir()
    sqlite3.connect(src / "chat.db").close()
    line = _one_line_error(brb("ingest", "--chat-db", str(src / "chat.db"), home=src / "brb"))
    assert "inside source folder" in line
    assert sorted(p.name for p in src.iterdir()) == ["chat.db"]  # nothing written next to the source


def test_search_passages_floor_and_diversity_from_the_command_line(ingested_home):
    out = json.loads(brb("search", "movies", "-k", "5", "--json", home=ingested_home).stdout)
    assert all(h["chunk_ids"] and h["chunk_ids"][0] == h["chunk_id"] for h in out["hits"])
    assert {"confident", "top_similarity", "specific", "merged"} <= set(out)
    assert "embed" in out["timings_ms"]
    div = json.loads(brb("search", "movies", "-k", "5", "--diversity", "--json", home=ingested_home).stdout)
    assert len(div["hits"]) == 5
    bad = brb("search", "movies", "--diversity", "1.5", home=ingested_home)
    assert bad.returncode == 2 and "1.5" in bad.stderr
    # A query nothing is close to: the nearest passages, and a line that says so.
    far = brb("search", "qqqq zzzz xxxx", "--mode", "vector", "--json", home=ingested_home)
    low = json.loads(far.stdout)
    assert low["hits"] and low["top_similarity"] < 0.39 and low["confident"] is False
    text = brb("search", "qqqq zzzz xxxx", "--mode", "vector", home=ingested_home).stdout
    assert "no close match: these are the nearest passages" in text
