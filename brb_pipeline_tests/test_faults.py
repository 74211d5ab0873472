"""Faults a real Mac will see, each through real `brb` processes (issue 32): one message with
invalid UTF-8, two ingests on one home, a damaged store, a killed forget, a missing or wrong key,
a config.json of random bytes.

Every test works on its own copy of a home ingested once per module by a real `brb ingest`
(hash embedder: these are about the process, not the model), and checks that the fault gives a
one-line error or is recovered from, never ``internal error`` (exit 70), loses nothing, and puts
no message text in any log.

Marked ``slow``: `pytest -m "not slow"` leaves them out; `make test` runs them.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
from pathlib import Path

import pytest

from brb_pipeline.demo.chatdb_writer import _register_trigger_functions
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline_tests.helpers.homes import copy_home
from brb_pipeline_tests.helpers.cli import ENV, brb

pytestmark = pytest.mark.slow

#: Hostile text: invalid UTF-8 (a lone 0xFF and a cut 3-byte sequence) around words found nowhere
#: else, so a log or Dagster file holding any of them holds the message.
HOSTILE = b"hostileutf zebracanary \xff\xfe quokkabanner \xe2\x82"
HOSTILE_WORDS = (b"zebracanary", b"quokkabanner", b"hostileutf")
RECOVERED = "the body says marmosetlantern instead"


def _ingest(archive, home: Path, env: dict, *extra: str, chat_db: Path | None = None):
    r = brb("ingest", "--chat-db", str(chat_db or archive.chat_db), "--addressbook", str(archive.addressbook_dir),
            "--progress", "none", "--no-insights", *extra, home=home, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    archive = build_demo_archive(root / "archive", messages=300, seed=32)
    keydir = root / "keys"
    env = {**ENV, "BRB_KEY_DIR": str(keydir)}
    env.pop("BRB_KEY", None)
    return {"root": root, "archive": archive, "env": env, "keydir": keydir, "templates": {}}


def template(world, kind: str) -> Path:
    """A home ingested once per module: ``plain`` or ``enc`` (encrypted, key in the key dir)."""
    if kind not in world["templates"]:
        home = world["root"] / f"template-{kind}"
        _ingest(world["archive"], home, {**world["env"], "BRB_ENCRYPTION": "1" if kind == "enc" else "0"})
        world["templates"][kind] = home
    return world["templates"][kind]


def home_copy(world, kind: str, name: str) -> Path:
    return copy_home(template(world, kind), world["root"] / name)


def one_line_error(r, *args) -> str:
    """The one ``brb: error:`` line a refused command prints (exit 2, no traceback)."""
    lines = [x for x in r.stderr.strip().splitlines() if "channel ON" not in x]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("brb: error: "), (args, r.returncode,
                                                                                              r.stderr[-2000:])
    return lines[0]


def _files_holding(root: Path, needles: tuple[bytes, ...]) -> list[str]:
    return [str(p.relative_to(root)) for p in sorted(root.rglob("*"))
            if p.is_file() and any(n in p.read_bytes() for n in needles)]


# 1. one message with invalid UTF-8 -------------------------------------------------------------

def _hostile_chat_db(src: Path, dst: Path) -> tuple[int, int]:
    """``dst``: ``src`` with two messages' text replaced by invalid UTF-8, the second with an
    ``attributedBody`` that still holds its text. Returns their ROWIDs."""
    import shutil

    from brb_pipeline.sources.typedstream import encode_attributed_body

    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    _register_trigger_functions(con)
    a, b = [r[0] for r in con.execute("SELECT ROWID FROM message WHERE text IS NOT NULL AND text != '' "
                                      "AND associated_message_type = 0 ORDER BY ROWID DESC LIMIT 2")]
    con.execute("UPDATE message SET text = CAST(? AS TEXT), attributedBody = NULL WHERE ROWID = ?", (HOSTILE, a))
    con.execute("UPDATE message SET text = CAST(? AS TEXT), attributedBody = ? WHERE ROWID = ?",
                (HOSTILE, encode_attributed_body(RECOVERED), b))
    con.commit()
    con.close()
    return a, b


def test_invalid_utf8_in_one_message_is_kept_replaced_and_never_logged(world):
    home = home_copy(world, "plain", "utf8")
    (world["root"] / "hostile").mkdir()
    hostile = world["root"] / "hostile" / "chat.db"
    _hostile_chat_db(world["archive"].chat_db, hostile)
    r = _ingest(world["archive"], home, world["env"], chat_db=hostile)
    assert not any(n.decode() in r.stderr for n in HOSTILE_WORDS)
    con = sqlite3.connect(home / "brb.db")
    stats = json.loads(con.execute("SELECT stats_json FROM ingestion_runs ORDER BY started_at DESC LIMIT 1")
                       .fetchone()[0])
    con.close()
    assert stats["stat_text_invalid_utf8"] == 1 and stats["stat_text_recovered_from_body"] == 1, stats
    # both messages are kept: the replaced one and the one read from its attributedBody
    for query in ("zebracanary quokkabanner", "marmosetlantern"):
        out = brb("search", query, "--json", "--mode", "lexical", "--no-route", home=home, env=world["env"])
        assert out.returncode == 0, out.stderr[-2000:]
        hits = json.loads(out.stdout)["hits"]
        assert hits and query.split()[0] in hits[0]["text"], (query, hits[:1])
    # no log line, no Dagster event or run record holds the text
    assert (home / "dagster" / "history").is_dir()
    held = _files_holding(home / "dagster", HOSTILE_WORDS)
    logs = _files_holding(home / "logs", HOSTILE_WORDS) if (home / "logs").exists() else []
    assert not held and not logs, (held, logs)


def test_a_read_error_names_the_column_never_the_text():
    from brb_pipeline.sources.sqlite_ro import translate_sqlite_error

    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE message (text)")
    con.execute("INSERT INTO message VALUES (CAST(? AS TEXT))", (HOSTILE,))
    with pytest.raises(sqlite3.OperationalError) as e:
        con.execute("SELECT text FROM message").fetchall()
    assert "zebracanary" in str(e.value)  # what sqlite3 says, quoting the value
    msg = str(translate_sqlite_error(e.value, "chat.db", Path("/x/chat.db")))
    assert "column 'text'" in msg and "not valid UTF-8" in msg and "zebracanary" not in msg, msg


# 5. a missing or wrong key ---------------------------------------------------------------------

def test_status_with_a_missing_or_wrong_key_exits_2_and_never_reports_an_empty_home(world, tmp_path):
    home = home_copy(world, "enc", "nokey")
    keydir = tmp_path / "keys"
    import shutil

    shutil.copytree(world["keydir"], keydir)
    env = {**world["env"], "BRB_KEY_DIR": str(keydir)}
    ok = brb("status", "--json", home=home, env=env)
    assert ok.returncode == 0 and json.loads(ok.stdout)["messages"] > 0, ok.stderr[-2000:]
    for f in keydir.glob("data-*.key"):
        f.unlink()
    for args in (("status",), ("status", "--json")):
        line = one_line_error(brb(*args, home=home, env=env), *args)
        assert "missing" in line and str(keydir) in line, line
    wrong = {**env, "BRB_KEY": os.urandom(32).hex()}
    for args in (("status",), ("status", "--json")):
        r = brb(*args, home=home, env=wrong)
        assert "not the one" in one_line_error(r, *args) and "messages" not in r.stdout


# 6. a config.json of random bytes --------------------------------------------------------------

#: Random bytes (fixed, so every xdist worker collects the same tests) and truncated JSON.
CONFIGS = {"random-bytes": random.Random(32).randbytes(64) + b"\xff\xfe", "cut-json": b'{"top_contacts": 3'}


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_a_config_json_of_random_bytes_is_one_line_from_every_command(world, case):
    content = CONFIGS[case]
    home = home_copy(world, "plain", f"config-{case}")
    cfg = home / "config.json"
    cfg.write_bytes(content)
    for args in (("status",), ("status", "--json"), ("search", "movie"), ("ingest", "--progress", "none"),
                 ("forget", "--contact", "nobody", "--yes"), ("reindex",), ("search-log",), ("insights",),
                 ("profile", "nobody"), ("rekey",), ("delete-all", "--yes"), ("ui",)):
        r = brb(*args, home=home, env=world["env"])
        assert one_line_error(r, *args) == f"brb: error: {cfg}: not valid JSON; fix or delete it", args
    assert cfg.read_bytes() == content and (home / "brb.db").exists()  # nothing replaced, nothing deleted


# 2. two ingests on one home --------------------------------------------------------------------

def _start(args: list[str], home: Path, env: dict):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "brb_pipeline.cli", *args, "--home", str(home)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def _holder(home: Path) -> dict:
    """What ``<home>/ingest.lock`` says about the process holding the home (read as a user would)."""
    try:
        return json.loads((home / "ingest.lock").read_text() or "{}")
    except (OSError, ValueError):
        return {}


def _lock_holder_pid(home: Path, proc, timeout: float = 120) -> int:
    """Wait until ``proc`` holds the home's writer lock (the lock file names it)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _holder(home).get("pid") == proc.pid:
            return proc.pid
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.1)
    raise AssertionError("the first ingest never took the lock")


def _stderr_line(proc, needle: str, timeout: float = 120) -> str:
    """Read ``proc``'s stderr until a line holds ``needle`` (the process keeps running)."""
    import select
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.5)
        if ready:
            line = proc.stderr.readline()
            if needle in line:
                return line
            assert line or proc.poll() is None, "the second ingest ended without waiting"
    raise AssertionError(f"no line with {needle!r}")


def test_a_second_ingest_waits_for_the_first_or_refuses_with_no_wait(world):
    import signal

    home = home_copy(world, "plain", "two-ingests")
    env = world["env"]
    first = _start(["ingest", "--progress", "none", "--no-insights", "--reembed"], home, env)
    pid = _lock_holder_pid(home, first)
    os.kill(pid, signal.SIGSTOP)  # the first ingest is mid-run and stays there
    try:
        line = one_line_error(brb("ingest", "--progress", "none", "--no-wait", home=home, env=env))
        assert f"another ingest (pid {pid}, started " in line and "is running" in line, line
        second = _start(["ingest", "--progress", "none", "--no-insights"], home, env)
        line = _stderr_line(second, "waiting")
        assert f"brb: another ingest (pid {pid}, started " in line and "waiting, Ctrl-C to stop" in line, line
        # a run the UI, a sensor or the schedule starts waits as well (the `brb` resource holds the lock)
        ui_run = _start_dagster_job(home, env)
        line = _stderr_line(ui_run, "waiting, Ctrl-C to stop")
        assert f"another ingest (pid {pid}, started " in line, line
        assert ui_run.poll() is None and second.poll() is None  # both still waiting for the stopped one
    finally:
        os.kill(pid, signal.SIGCONT)
    for p in (first, second, ui_run):
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        assert "Traceback" not in err and "internal error" not in err
    st = json.loads(brb("status", "--json", home=home, env=env).stdout)
    assert st["last_ingestion"]["status"] == "success" and st["search_ready"] and st["chunks"] > 0


def _start_dagster_job(home: Path, env: dict):
    """A Dagster run of ``ingest_job`` as the UI starts one: its own process, the definitions'
    resources (nothing of the CLI's)."""
    import subprocess
    import sys

    code = ("import dagster as dg\n"
            "from brb_pipeline.orchestration.definitions import defs\n"
            "from brb_pipeline.orchestration.instance import instance_for\n"
            "from brb_pipeline.config.settings import Settings\n"
            "s = Settings.load()\n"
            "r = defs.get_job_def('ingest_job').execute_in_process(instance=instance_for(s))\n"
            "assert r.success\n")
    return subprocess.Popen([sys.executable, "-c", code], env={**env, "BRB_HOME": str(home)}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)


def test_a_lock_left_by_a_killed_ingest_is_taken_over(world):
    home = home_copy(world, "plain", "stale-lock")
    r = brb("ingest", "--progress", "none", "--no-insights", "--reembed", home=home,
            env={**world["env"], "BRB_FAULT": "chunks_written"})
    assert r.returncode == -9, r.stderr[-2000:]
    assert _holder(home)["pid"]  # the dead process still named in the file
    r = brb("ingest", "--progress", "none", "--no-insights", "--no-wait", home=home, env=world["env"])
    assert r.returncode == 0, r.stderr[-2000:]
    st = json.loads(brb("status", "--json", home=home, env=world["env"]).stdout)
    assert st["last_ingestion"]["status"] == "success" and st["search_ready"]


# 4. a killed forget ----------------------------------------------------------------------------

def _person(world) -> tuple[dict, list[str]]:
    """The person to forget in the plain template, and the needles the byte scan looks for."""
    from brb_pipeline_tests.helpers.forget import needles as _needles, pick_person as _pick_person

    if "person" not in world:
        person = _pick_person(template(world, "plain"), world["archive"])
        world["person"] = (person, _needles(world["archive"], person))
    return world["person"]


def _count(db: Path, sql: str) -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


#: (kill point, the command run next, which must finish the forget)
KILLED_FORGETS = [("forget_journaled", "forget-name"), ("forget_brb_db", "forget-handle"),
                  ("forget_brb_db", "ingest"), ("forget_staging", "search"), ("forget_store", "status")]


@pytest.mark.parametrize("point, then", KILLED_FORGETS)
def test_a_killed_forget_is_finished_by_the_next_command(world, point, then):
    from brb_pipeline_tests.helpers.bytescan import scan, summary

    person, needles = _person(world)
    home = home_copy(world, "plain", f"forget-{point}-{then}")
    env = world["env"]
    contacts_before = _count(home / "brb.db", "SELECT count(*) FROM contacts")
    assert scan(home, needles[:2]), "the scan finds the person before forget"
    r = brb("forget", "--contact", person["name"], "--yes", home=home, env={**env, "BRB_FAULT": point})
    assert r.returncode == -9, r.stderr[-2000:]
    assert _count(home / "brb.db", "SELECT count(*) FROM forget_journal") == 1  # the intent was written first
    if then == "forget-name":
        r = brb("forget", "--contact", person["name"], "--yes", home=home, env=env)
    elif then == "forget-handle":
        r = brb("forget", "--contact", person["handles"][0], "--yes", home=home, env=env)
    elif then == "ingest":
        r = brb("ingest", "--progress", "none", "--no-insights", home=home, env=env)
    elif then == "search":
        r = brb("search", "what do you like to do", "--json", "-k", "50", "--no-route", home=home, env=env)
    else:
        r = brb("status", "--json", home=home, env=env)
    assert r.returncode == 0 and "internal error" not in r.stderr, r.stderr[-2000:]
    if then.startswith("forget"):  # a rerun with the same name or handle completes
        assert json.loads(r.stdout)["already_forgotten"] == 1, r.stdout
    if then == "search":
        hits = json.loads(r.stdout)["hits"]
        assert hits and not [h for h in hits if any(n.lower() in h["text"].lower() for n in needles[-5:])]
    if then == "status":
        assert json.loads(r.stdout)["contacts"] == contacts_before - 1
    assert _count(home / "brb.db", "SELECT count(*) FROM forget_journal") == 0
    assert _count(home / "brb.db", "SELECT count(*) FROM contacts") == contacts_before - 1  # the others stay
    found = scan(home, needles)
    assert not found, f"after a forget killed at {point} and `{then}`:\n" + summary(found)
    r = brb("search", "the", "--json", home=home, env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["hits"], r.stderr[-2000:]


# 3. damaged stores -----------------------------------------------------------------------------

def _flip(path: Path, start: int, n: int = 4096) -> None:
    """Damage a file as a bad disk or copy would: ``n`` bytes from ``start`` inverted."""
    b = bytearray(path.read_bytes())
    for i in range(start, min(start + n, len(b))):
        b[i] ^= 0xFF
    path.write_bytes(bytes(b))


def _damage_blocks(store: Path, at: int = 4096) -> None:
    """Damage every 256 KiB block of a DuckDB file (after its three 4 KiB headers) at offset
    ``at``: whatever the store uses is hit (a flip in a free block would be no damage at all)."""
    for start in range(3 * 4096 + at, store.stat().st_size, 256 * 1024):
        _flip(store, start, 64)


def _search_ok(home: Path, env: dict, query: str = "what do you like to do") -> list[dict]:
    r = brb("search", query, "--json", "--no-route", home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)["hits"]


@pytest.mark.parametrize("kind", ["plain", "enc"])
def test_a_damaged_search_store_is_named_and_rebuilt_from_staging(world, kind):
    home = home_copy(world, kind, f"damaged-duckdb-{kind}")
    env = world["env"]
    chunks = json.loads(brb("status", "--json", home=home, env=env).stdout)["chunks"]
    before = [h["chunk_ids"] for h in _search_ok(home, env)]
    store = home / "brb.duckdb"
    _damage_blocks(store)
    r = brb("status", home=home, env=env)
    assert "brb.duckdb" in one_line_error(r, "status") and "brb reindex" in r.stderr
    assert "damaged         brb.duckdb" in r.stdout  # the report says which file
    line = one_line_error(brb("search", "movie", home=home, env=env), "search")
    assert "brb.duckdb" in line and "damaged" in line and "brb reindex" in line and "internal" not in line, line
    r = brb("reindex", home=home, env=env)
    assert r.returncode == 0 and "was damaged" in r.stderr and "rebuilt it from staging" in r.stderr, r.stderr
    st = json.loads(brb("status", "--json", home=home, env=env).stdout)
    assert st["chunks"] == chunks and st["search_ready"] and not st.get("damaged")
    assert [h["chunk_ids"] for h in _search_ok(home, env)] == before  # nothing lost: the same answers
    # a plain ingest rebuilds it as well (a store damaged again, in another place)
    _damage_blocks(store, 9000)
    r = brb("ingest", "--progress", "none", "--no-insights", home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(brb("status", "--json", home=home, env=env).stdout)["chunks"] == chunks


def _damage_table(db: Path, table: str) -> None:
    """Invert the root page of ``table`` in a plaintext brb.db (other tables stay readable)."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    con.close()
    _flip(db, (root - 1) * page, page)


@pytest.mark.parametrize("kind", ["plain", "enc"])
def test_a_damaged_brb_db_is_rebuilt_keeping_the_forgotten_list_and_search_log(world, kind):
    home = home_copy(world, kind, f"damaged-brbdb-{kind}")
    env = world["env"]
    con = sqlite3.connect(template(world, "plain") / "brb.db")
    name, handle = con.execute("SELECT display_name, json_extract(handles_json, '$[0]') FROM contacts "
                               "WHERE kind = 'direct' AND contact_id LIKE 'c:%' ORDER BY rank LIMIT 1").fetchone()
    con.close()
    assert brb("forget", "--contact", name, "--yes", home=home, env=env).returncode == 0
    _ingest(world["archive"], home, env)  # what the home holds once the forget is ingested: the reference
    _search_ok(home, env, "weekend plans")
    st = json.loads(brb("status", "--json", home=home, env=env).stdout)
    if kind == "plain":
        _damage_table(home / "brb.db", "contacts")
    else:  # a sealed image: one bad byte and nothing of it can be read
        _flip(home / "brb.db", (home / "brb.db").stat().st_size // 2, 64)
    for args in (("status",), ("ingest", "--progress", "none")):
        line = one_line_error(brb(*args, home=home, env=env), *args)
        assert "brb.db" in line and "damaged" in line and "brb ingest --rebuild" in line, line
    rebuilt = brb("ingest", "--progress", "none", "--no-insights", "--rebuild", home=home, env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert "was damaged" in rebuilt.stderr and "rebuilding" in rebuilt.stderr
    after = json.loads(brb("status", "--json", home=home, env=env).stdout)
    assert after["messages"] == st["messages"] and after["chunks"] == st["chunks"]
    assert after["contacts"] == st["contacts"]  # she stays forgotten (brb.db's list, or the copy beside it)
    r = brb("forget", "--contact", handle, "--yes", home=home, env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["already_forgotten"] == 1, r.stderr[-2000:]
    if kind == "plain":  # the search log was readable: kept
        log = json.loads(brb("search-log", home=home, env=env).stdout)
        assert any(e["query"] == "weekend plans" for e in log)
        con = sqlite3.connect(home / "brb.db")
        names = [n for (n,) in con.execute("SELECT display_name FROM contacts")]
        con.close()
        assert name not in names
    else:  # nothing of a damaged sealed image is readable: the search log is gone, and said so
        assert "(search_log could not be read)" in rebuilt.stderr, rebuilt.stderr
