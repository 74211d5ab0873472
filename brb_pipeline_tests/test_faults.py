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
import sqlite3
from pathlib import Path

import pytest

from brb_pipeline.demo.chatdb_writer import _register_trigger_functions
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline_tests.homes import copy_home
from brb_pipeline_tests.test_cli import ENV, brb

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

@pytest.mark.parametrize("content", [os.urandom(64) + b"\xff\xfe", b'{"top_contacts": 3'])
def test_a_config_json_of_random_bytes_is_one_line_from_every_command(world, content):
    home = home_copy(world, "plain", f"config-{len(content)}")
    cfg = home / "config.json"
    cfg.write_bytes(content)
    for args in (("status",), ("status", "--json"), ("search", "movie"), ("ingest", "--progress", "none"),
                 ("forget", "--contact", "nobody", "--yes"), ("reindex",), ("search-log",), ("insights",),
                 ("profile", "nobody"), ("rekey",), ("delete-all", "--yes"), ("ui",)):
        r = brb(*args, home=home, env=world["env"])
        assert one_line_error(r, *args) == f"brb: error: {cfg}: not valid JSON; fix or delete it", args
    assert cfg.read_bytes() == content and (home / "brb.db").exists()  # nothing replaced, nothing deleted
