"""The `brb` command line through its entry point, on real files.

In-process with click's CliRunner (exact messages and exit codes); in a subprocess only where a
real process matters: a lock held by another process, JSON lines on the real stdout, signals.
Every run uses the deterministic hash embedder (BRB_EMBEDDING_MODEL=hash): these tests are about
the command line, errors, progress and cancellation, not the model.
"""

import json
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from click.testing import Result

from brb_pipeline_tests.helpers.cli import ENV, brb, cli, status_json
from brb_pipeline_tests.helpers.homes import copy_home


@pytest.fixture(scope="module")
def archive(template_homes):
    """The 700-message demo archive (seed 21) of the session's ``imessage-700`` template home."""
    return template_homes.get("imessage-700")[1]


@pytest.fixture(scope="module")
def ingested_home(template_homes, tmp_path_factory):
    """This module's copy of the ``imessage-700`` home (`brb ingest` of :func:`archive`, insights on)."""
    return copy_home(template_homes.get("imessage-700")[0], tmp_path_factory.mktemp("cli_home") / "home")


def _one_line_error(r):
    """The one ``brb:`` line of a failed subprocess, which printed no traceback."""
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if line.startswith("brb:")]
    assert len(errors) == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    return errors[0]


def _error(r: Result, code: int = 2) -> str:
    """The whole stderr of a failed in-process run (one line), after checking its exit code and
    that nothing reached stdout."""
    assert r.exit_code == code, (r.exit_code, r.stderr[-2000:])
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1, r.stderr[-2000:]
    return r.stderr


def test_missing_chat_db(tmp_path):
    r = cli("ingest", "--chat-db", tmp_path / "nope.db", home=tmp_path / "h")
    assert _error(r) == f"brb: error: chat.db not found at {tmp_path / 'nope.db'}: check the path\n"


def test_not_a_database(tmp_path):
    (tmp_path / "src").mkdir()
    p = tmp_path / "src" / "chat.db"
    p.write_text("this is a text file, not SQLite\n" * 10)
    r = cli("ingest", "--chat-db", p, home=tmp_path / "h")
    assert _error(r) == f"brb: error: chat.db at {p} is not an SQLite database\n"


def test_sqlite_but_not_a_chat_db(tmp_path):
    (tmp_path / "src").mkdir()
    p = tmp_path / "src" / "other.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE notes (id INTEGER, body TEXT)")
    con.commit()
    con.close()
    r = cli("ingest", "--chat-db", p, home=tmp_path / "h")
    snap = tmp_path / "h" / "snapshot" / "chat.db"
    assert _error(r) == f"brb: error: chat.db at {snap} has no table 'message': is this really a chat.db?\n"


def test_locked_database_keeps_earlier_ingestion(archive, ingested_home):
    before = status_json(ingested_home)
    # Messages.app holds the lock from its own process: the ingest runs in another one
    locker = sqlite3.connect(archive.chat_db, timeout=0, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        line = _one_line_error(brb("ingest", home=ingested_home, timeout=120))
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert "locked" in line
    after = status_json(ingested_home)
    assert after["chunks"] == before["chunks"] > 0 and after["messages"] == before["messages"]
    r = cli("search", "weekend", "--mode", "lexical", "--json", home=ingested_home)
    assert r.exit_code == 0 and json.loads(r.stdout)["hits"]


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
    r = cli("ingest", "--chat-db", tmp_path / "src" / "chat.db", "--progress", "none", "--no-insights", home=home)
    assert r.exit_code == 0, r.stderr[-2000:]
    con = sqlite3.connect(home / "brb.db")
    stats = json.loads(con.execute("SELECT stats_json FROM ingestion_runs ORDER BY started_at DESC").fetchone()[0])
    con.close()
    assert stats.get("stat_undecodable", 0) >= 1


def test_status_json_keys_on_empty_and_full_home(tmp_path, ingested_home):
    empty = status_json(tmp_path / "empty")
    full = status_json(ingested_home)
    for st in (empty, full):
        assert {"messages", "contacts", "named_contacts", "chunks", "embedding_model", "last_ingestion",
                "channels", "clusters"} <= set(st)
    assert empty["messages"] == 0 and empty["channels"] == {"imessage": True, "whatsapp": False, "mail": False}
    assert full["messages"] > 0 and full["chunks"] > 0 and full["named_contacts"] > 0
    # another test may have left a failed (locked) run last; the last success is still reported
    assert full["last_ingestion"]["status"] in ("success", "failed")
    assert full["last_success"]["status"] == "success" and full["last_success"]["messages"] == full["messages"]
    assert full["embedding_model"] == "hash-64" or full["embedding_model"].startswith("hash")
    assert empty["embedding_device"] is None and full["embedding_device"] == "cpu"  # the hash embedder's


def test_status_text_on_empty_and_full_home(tmp_path, ingested_home):
    r = cli("status", home=tmp_path / "empty")
    assert r.exit_code == 0 and r.stderr == ""
    assert r.stdout == (
        f"home            {tmp_path / 'empty'}\nmessages        0\ncontacts        0 (0 named)\n"
        "people          0 (0 named) in 0 conversations\nchunks          0\n"
        "embedding model None\nclusters        0\nchannels        imessage on, whatsapp off, mail off\n"
        "last ingestion  never\nindexes         none\n"
        "memory          skipped: no local model configured: set BRB_LLM_MODEL_PATH\n"
        "encryption      new home: the first ingestion makes it plaintext (--no-encryption)\n"
    )
    st = status_json(ingested_home)
    lines = cli("status", home=ingested_home).stdout.splitlines()
    assert lines[:5] == [f"home            {ingested_home}", f"messages        {st['messages']:,}",
                         f"contacts        {st['contacts']:,} ({st['named_contacts']:,} named)",
                         f"people          {st['people']:,} ({st['named_people']:,} named) in "
                         f"{st['conversations']:,} conversations", f"chunks          {st['chunks']:,}"]
    assert st["people"] >= st["named_people"] > 0 and st["conversations"] >= st["contacts"] - 1
    assert lines[9] == "indexes         hnsw ok, fts ok"
    lv = st["line_vectors"]  # every chunk's message lines, for the re-rank
    assert lv["present"] and lv["matches_chunks"] and lv["chunks"] == st["chunks"] and lv["lines"] > lv["chunks"]
    assert lines[10] == f"message lines   {lv['lines']:,} lines of {st['chunks']:,} chunks"
    assert lines[11] == "memory          skipped: no local model configured: set BRB_LLM_MODEL_PATH"
    assert lines[12] == "encryption      off (plaintext: --no-encryption)"  # the test suite's homes are plaintext


def test_search_json_and_insights_path(ingested_home):
    r = cli("search", "movies", "-k", "4", "--json", home=ingested_home)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["hits"]) == 4
    hit = out["hits"][0]
    assert {"chunk_id", "contact", "start", "end", "scores", "text"} <= set(hit)
    assert {"vector", "lexical", "fused"} <= set(hit["scores"])
    r = cli("insights", home=ingested_home)
    assert r.exit_code == 0 and r.stdout == f"{ingested_home / 'insights' / 'map.html'}\n"


def test_search_text_lists_numbered_hits(ingested_home):
    out = json.loads(cli("search", "movies", "-k", "3", "--json", home=ingested_home).stdout)
    r = cli("search", "movies", "-k", "3", home=ingested_home)
    assert r.exit_code == 0, r.stderr
    heads = [line for line in r.stdout.splitlines() if line.startswith("#")]
    assert heads == [f"#{i}  {h['contact']}  {(h['start'] or '')[:16]}  score {h['scores']['fused']:.4f}"
                     for i, h in enumerate(out["hits"], 1)]
    assert out["hits"][0]["text"] in r.stdout
    assert r.stderr.startswith("\n3 results in ") and r.stderr.endswith(" ms (hybrid)\n")


def test_search_session_reads_queries_from_stdin(ingested_home):
    one = json.loads(cli("search", "movies", "-k", "3", "--json", home=ingested_home).stdout)
    # a host app reads one flushed JSON line per query from the real stdout of a real process
    r = subprocess.run([sys.executable, "-m", "brb_pipeline.cli", "search", "-", "-k", "3", "--home", str(ingested_home)],
                       input="movies\n\n  dinner tonight  \n", capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [o["query"] for o in lines] == ["movies", "dinner tonight"]  # blank line skipped, text stripped
    assert [h["chunk_id"] for h in lines[0]["hits"]] == [h["chunk_id"] for h in one["hits"]]
    assert all(len(o["hits"]) == 3 and "error" not in o for o in lines)


def test_search_on_empty_home_is_a_clear_error(tmp_path):
    r = cli("search", "anything", home=tmp_path / "empty")
    assert _error(r) == f"brb: error: no search store in {tmp_path / 'empty'}: run `brb ingest` (or `brb demo`) first\n"


def _usage_error(command: str, usage: str, message: str) -> str:
    return f"Usage: brb {command} [OPTIONS] {usage}\nTry 'brb {command} --help' for help.\n\nError: {message}\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # a date fromisoformat cannot read
        (["--since", "yesterday"], "Invalid value for --since: 'yesterday' is not a date like 2024-05-01 or 2024-05-01T18:00"),
        (["--until", "2024-13-01"], "Invalid value for --until: '2024-13-01' is not a date like 2024-05-01 or 2024-05-01T18:00"),
        # -k outside 1..200
        (["-k", "0"], "Invalid value for '-k': 0 is not in the range 1<=x<=200."),
        (["-k", "201"], "Invalid value for '-k': 201 is not in the range 1<=x<=200."),
        (["-k", "ten"], "Invalid value for '-k': 'ten' is not a valid integer range."),
        # diversity is in (0, 1]
        (["--diversity", "1.5"], "Invalid value for '--diversity': 1.5 is not in the range 0.0<x<=1.0."),
        (["--mode", "fuzzy"], "Invalid value for '--mode': 'fuzzy' is not one of 'hybrid', 'vector', 'lexical'."),
    ],
)
def test_search_bad_options_are_usage_errors(tmp_path, args, message):
    r = cli("search", "movies", *args, home=tmp_path / "empty")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == _usage_error("search", "QUERY", message)
    assert not (tmp_path / "empty").exists()  # refused before anything is opened or written


def test_unknown_contact_is_one_line(ingested_home):
    msg = "brb: error: no contact matches 'Nobody Atall': see `brb status` or use a handle (+15551234567, a@b.com)\n"
    before = status_json(ingested_home)
    assert _error(cli("search", "movies", "--contact", "Nobody Atall", home=ingested_home)) == msg
    assert _error(cli("ingest", "--contact", "Nobody Atall", "--progress", "none", home=ingested_home)) == msg
    assert _error(cli("forget", "--contact", "Nobody Atall", "--yes", home=ingested_home)) == msg
    assert status_json(ingested_home)["chunks"] == before["chunks"]


def test_commands_before_any_ingest_say_what_to_run(tmp_path):
    home = tmp_path / "empty"
    assert _error(cli("insights", home=home)) == (
        f"brb: error: no insights map in {home / 'insights'}: run `brb ingest` (or `brb demo`) first\n")
    assert _error(cli("forget", "--contact", "Ayşe", "--yes", home=home)) == f"brb: error: nothing stored in {home}\n"
    r = cli("search-log", home=home)
    assert r.exit_code == 0 and r.stdout == "[]\n"


STRAY = """
import sys
import brb_pipeline.stages.ingest as ingest
orig = ingest.run_contacts
def noisy(s):
    print("STRAY PRINT FROM LIBRARY CODE")
    import warnings; warnings.warn("stray warning")
    return orig(s)
ingest.run_contacts = noisy
from brb_pipeline.cli.app import main
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
                    "error": {"kind": "SourceMissingError",
                              "message": f"chat.db not found at {tmp_path / 'missing.db'}: check the path"}}


SLOW = """
import sys, time
from brb_pipeline.core.embedding import models as embedding
orig = embedding.HashEmbedder.embed
def slow(self, texts):
    time.sleep(0.4)
    return orig(self, texts)
embedding.HashEmbedder.embed = slow
import brb_pipeline.stages.embed as e
e.EMBED_GROUP = 16
from brb_pipeline.cli.app import main
sys.argv = ["brb"] + sys.argv[1:]
main()
"""


@pytest.mark.slow  # crash harness: a real SIGINT mid-embedding
def test_sigint_mid_embedding_leaves_previous_store_usable(archive, tmp_path):
    home = tmp_path / "h"
    r = cli("ingest", "--chat-db", archive.chat_db, "--progress", "none", "--no-insights", home=home)
    assert r.exit_code == 0, r.stderr[-2000:]
    before = status_json(home)
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
    after = status_json(home)
    assert after["chunks"] == before["chunks"] and after["last_ingestion"]["status"] == "cancelled"
    r = cli("search", "weekend", "--mode", "lexical", "--json", home=home)
    assert r.exit_code == 0 and json.loads(r.stdout)["hits"]


def test_home_inside_the_messages_folder_is_refused(tmp_path):
    src = tmp_path / "Messages"
    src.mkdir()
    sqlite3.connect(src / "chat.db").close()
    r = cli("ingest", "--chat-db", src / "chat.db", home=src / "brb")
    assert _error(r) == (f"brb: error: snapshot folder {src / 'brb'} is inside source folder {src}; "
                         "choose another --home\n")
    assert sorted(p.name for p in src.iterdir()) == ["chat.db"]  # nothing written next to the source


def test_search_passages_floor_and_diversity_from_the_command_line(ingested_home):
    out = json.loads(cli("search", "movies", "-k", "5", "--json", home=ingested_home).stdout)
    assert all(h["chunk_ids"] and h["chunk_ids"][0] == h["chunk_id"] for h in out["hits"])
    assert {"confident", "top_similarity", "specific", "merged"} <= set(out)
    assert "embed" in out["timings_ms"]
    div = json.loads(cli("search", "movies", "-k", "5", "--diversity", "--json", home=ingested_home).stdout)
    assert len(div["hits"]) == 5
    bad = cli("search", "movies", "--diversity", "1.5", home=ingested_home)
    assert bad.exit_code == 2 and bad.stderr == _usage_error(
        "search", "QUERY", "Invalid value for '--diversity': 1.5 is not in the range 0.0<x<=1.0.")
    # A query nothing is close to: the nearest passages, and a line that says so.
    far = cli("search", "qqqq zzzz xxxx", "--mode", "vector", "--json", home=ingested_home)
    low = json.loads(far.stdout)
    assert low["hits"] and low["top_similarity"] < 0.39 and low["confident"] is False
    text = cli("search", "qqqq zzzz xxxx", "--mode", "vector", home=ingested_home).stdout
    assert "no close match: these are the nearest passages" in text
