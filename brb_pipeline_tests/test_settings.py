"""Settings: what a run uses, what config.json remembers, and homes that cannot be used.

Direct ``Settings`` tests, then the `brb` command line in subprocesses (as in test_cli.py) for
what a user sees: one-line errors, no settings leaking from one run's environment into the next,
and `brb demo` keeping away from a real home.
"""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from brb_pipeline.core.errors import SettingsError
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline.config.settings import Settings, check_home, default_demo_home, default_home

ENV = {k: v for k, v in os.environ.items() if not k.startswith("BRB_")}
ENV.update(BRB_EMBEDDING_MODEL="hash", BRB_HDBSCAN_MIN_CLUSTER_SIZE="8", PYTHONUNBUFFERED="1")


@pytest.fixture(autouse=True)
def _no_brb_env(monkeypatch):
    """Each direct test starts without the caller's BRB_* variables."""
    for k in [k for k in os.environ if k.startswith("BRB_")]:
        monkeypatch.delenv(k)


def _config(home: Path) -> dict:
    return json.loads((home / "config.json").read_text())


# Environment vs. what is saved ---------------------------------------------------------------

def test_environment_applies_to_its_run_and_is_never_saved(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("BRB_WHATSAPP_ENABLED", "1")
    monkeypatch.setenv("BRB_WHATSAPP_DB", str(tmp_path / "ChatStorage.sqlite"))
    monkeypatch.setenv("BRB_RRF_K", "77")
    s = Settings.load(home, chat_db=tmp_path / "chat.db")
    assert s.whatsapp_enabled and s.rrf_k == 77 and s.whatsapp_db == tmp_path / "ChatStorage.sqlite"
    s.save()
    assert _config(home) == {"chat_db": str(tmp_path / "chat.db")}  # only the explicit value
    for k in ("BRB_WHATSAPP_ENABLED", "BRB_WHATSAPP_DB", "BRB_RRF_K"):
        monkeypatch.delenv(k)
    later = Settings.load(home)
    assert later.chat_db == tmp_path / "chat.db"
    assert (later.whatsapp_enabled, later.whatsapp_db, later.rrf_k) == (False, None, 60)


def test_environment_shadows_but_keeps_a_saved_value(tmp_path, monkeypatch):
    home = tmp_path / "home"
    Settings.load(home, rrf_k=70, top_contacts=5).save()
    monkeypatch.setenv("BRB_RRF_K", "80")
    s = Settings.load(home)
    assert s.rrf_k == 80
    s.save()
    assert _config(home) == {"rrf_k": 70, "top_contacts": 5}
    # dataclasses.replace (search's rrf_k override) keeps the bookkeeping.
    assert dataclasses.replace(s, seed=1).remembered() == {"rrf_k": 70, "top_contacts": 5, "seed": 1}
    # A value set in code after loading is the run's own and is saved.
    s.rrf_k = 90
    assert s.remembered()["rrf_k"] == 90


@pytest.mark.parametrize("saved, env, explicit, expected", [
    (None, None, None, 60),  # default
    (70, None, None, 70),  # config.json over the default
    (70, "80", None, 80),  # environment over config.json
    (70, "80", 90, 90),  # explicit over everything
    (None, None, 90, 90),  # explicit over the default
])
def test_precedence(tmp_path, monkeypatch, saved, env, explicit, expected):
    home = tmp_path / "home"
    if saved is not None:
        Settings.load(home, rrf_k=saved).save()
    if env is not None:
        monkeypatch.setenv("BRB_RRF_K", env)
    s = Settings.load(home, rrf_k=explicit)
    assert s.rrf_k == expected
    s.save()
    # What is remembered: the explicit value, else what config.json held; never the environment's.
    remembered = explicit if explicit is not None else saved
    assert _config(home).get("rrf_k") == remembered


def test_whatsapp_db_alone_never_turns_whatsapp_on(tmp_path, monkeypatch):
    monkeypatch.setenv("BRB_WHATSAPP_DB", str(tmp_path / "ChatStorage.sqlite"))
    s = Settings.load(tmp_path / "home", whatsapp_db=tmp_path / "other.sqlite")
    assert s.whatsapp_enabled is False and s.channels() == {"imessage": True, "whatsapp": False, "mail": False}
    s.save()
    assert "whatsapp_enabled" not in _config(tmp_path / "home")


def test_relative_paths_are_made_absolute_against_the_cwd(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("BRB_LABELER_MODEL_PATH", "models/llm")
    s = Settings.load("rel-home", chat_db="src/chat.db", addressbook_dir=Path("~/ab"))
    assert s.home == work / "rel-home"
    assert s.dagster_home == work / "rel-home" / "dagster"
    assert s.chat_db == work / "src" / "chat.db"
    assert s.addressbook_dir == Path.home() / "ab"
    assert s.labeler_model_path == work / "models" / "llm"
    s.save()
    monkeypatch.chdir(tmp_path)  # another directory: the saved paths still name the same files
    monkeypatch.delenv("BRB_LABELER_MODEL_PATH")
    again = Settings.load(work / "rel-home")
    assert again.chat_db == work / "src" / "chat.db"
    assert _config(work / "rel-home") == {"chat_db": str(work / "src" / "chat.db"),
                                          "addressbook_dir": str(Path.home() / "ab")}
    # Built directly (not loaded), paths are made absolute too.
    assert Settings(home=Path("h"), chat_db=Path("c.db")).chat_db == tmp_path / "c.db"


def test_home_from_the_environment_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BRB_HOME", "h")
    monkeypatch.setenv("BRB_DEMO_HOME", "d")
    assert default_home() == Settings.load().home == tmp_path / "h"
    assert default_demo_home() == tmp_path / "d"
    monkeypatch.delenv("BRB_DEMO_HOME")
    assert default_demo_home() == Path.home() / ".brb-demo"  # never BRB_HOME


@pytest.mark.parametrize("config_text, match", [
    ("{not json", "not valid JSON; fix or delete it"),
    ("[1, 2]", "not a JSON object"),
    ('{"no_such_setting": 1}', r"unknown settings \['no_such_setting'\]"),
    ('{"top_contacts": "many"}', "'many' is not a valid top_contacts"),
])
def test_a_broken_config_json_is_a_settings_error(tmp_path, config_text, match):
    (tmp_path / "config.json").write_text(config_text)
    with pytest.raises(SettingsError, match=match):
        Settings.load(tmp_path)


def test_a_bad_environment_value_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("BRB_TOP_CONTACTS", "lots")
    with pytest.raises(SettingsError, match="BRB_TOP_CONTACTS: 'lots' is not a valid top_contacts"):
        Settings.load(tmp_path)


def test_an_unknown_override_is_a_programming_error(tmp_path):
    with pytest.raises(ValueError, match="unknown settings"):
        Settings.load(tmp_path, no_such_setting=1)


# Homes that cannot be used ---------------------------------------------------------------------

def test_check_home(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(SettingsError, match=f"home {f} is a file"):
        check_home(f)
    with pytest.raises(SettingsError, match=f"home {f / 'a' / 'b'} cannot be a folder: {f} is a file"):
        check_home(f / "a" / "b", write=True)
    # A home that does not exist yet is fine to read and to write; checking creates nothing
    # (a run first checks it is not inside a source folder).
    check_home(tmp_path / "new" / "home")
    check_home(tmp_path / "new" / "home", write=True)
    assert not (tmp_path / "new").exists()
    Settings.load(tmp_path / "new" / "home").save()
    assert (tmp_path / "new" / "home" / "config.json").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write a folder without write permission")
def test_check_home_unwritable(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(SettingsError, match=f"home {locked / 'home'} is not writable"):
            check_home(locked / "home", write=True)
    finally:
        locked.chmod(0o700)


def test_real_ingestion(tmp_path):
    home = tmp_path / "home"
    assert Settings.load(home).real_ingestion() is None  # empty
    Settings.load(home, chat_db=home / "demo-archive" / "chat.db").save()
    assert Settings.load(home).real_ingestion() is None  # its own demo archive
    Settings.load(home, chat_db=tmp_path / "Messages" / "chat.db").save()
    assert Settings.load(home).real_ingestion() == f"an ingestion of {tmp_path / 'Messages' / 'chat.db'}"
    (home / "config.json").unlink()
    (home / "brb.db").write_bytes(b"")
    assert Settings.load(home).real_ingestion() == "a store of unknown sources"


# The command line --------------------------------------------------------------------------------

def brb(*args, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "brb_pipeline.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env or ENV, cwd=cwd, stdin=subprocess.DEVNULL)


def _one_line_error(r) -> str:
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if line.startswith("brb:")]
    assert len(errors) == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and errors[0].startswith("brb: error: ")
    return errors[0]


COMMANDS = {
    "ingest": ["ingest", "--chat-db", "/nonexistent/chat.db", "--progress", "none"],
    "demo": ["demo", "--messages", "50", "--progress", "none"],
    "status": ["status"],
    "search": ["search", "hello"],
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("where", ["under a file", "a file"])
def test_impossible_home_is_one_line(tmp_path, command, where):
    f = tmp_path / "afile"
    f.write_text("not a folder\n")
    home = f / "home" if where == "under a file" else f
    line = _one_line_error(brb(*COMMANDS[command], "--home", home))
    assert str(home) in line
    assert ("is a file, not a folder" if where == "a file" else f"{f} is a file") in line
    assert f.read_text() == "not a folder\n"


@pytest.mark.parametrize("command", COMMANDS)
def test_impossible_home_from_brb_home_is_one_line(tmp_path, command):
    f = tmp_path / "afile"
    f.write_text("x")
    env = {**ENV, "BRB_HOME": str(f / "home"), "BRB_DEMO_HOME": str(f / "home")}
    assert str(f / "home") in _one_line_error(brb(*COMMANDS[command], env=env))


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write a folder without write permission")
@pytest.mark.parametrize("command", ["ingest", "demo"])
def test_unwritable_home_is_one_line(tmp_path, command):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        line = _one_line_error(brb(*COMMANDS[command], "--home", locked / "home"))
        assert f"home {locked / 'home'} is not writable" in line
    finally:
        locked.chmod(0o700)


@pytest.mark.slow  # e2e: two whole ingests in one process
def test_one_runs_environment_does_not_leak_into_the_next(tmp_path):
    """Relative --chat-db/--home and BRB_WHATSAPP_* for one run: that run reads WhatsApp, the
    saved config holds absolute paths and no WhatsApp, and a later run elsewhere finds it all."""
    archive = build_demo_archive(tmp_path / "archive", messages=200, seed=5, whatsapp=True)
    work = tmp_path / "work"
    work.mkdir()
    env = {**ENV, "BRB_WHATSAPP_ENABLED": "1", "BRB_WHATSAPP_DB": str(archive.whatsapp_db)}
    r = brb("ingest", "--chat-db", "../archive/chat.db", "--home", "home", "--progress", "none", "--no-insights",
            cwd=work, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "WhatsApp channel ON" in r.stderr  # the variable applied to its own run
    home = work / "home"
    assert sorted(p.name for p in work.iterdir()) == ["home"]  # nothing else written under the cwd
    assert (home / "dagster" / "dagster.yaml").exists()
    assert _config(home) == {"chat_db": str(archive.chat_db)}
    st = json.loads(brb("status", "--json", "--home", home, cwd=tmp_path).stdout)
    assert st["home"] == str(home) and st["messages"] > 0
    assert st["channels"] == {"imessage": True, "whatsapp": False, "mail": False}
    # The explicit flag is what turns WhatsApp on for later runs, and --no-whatsapp off again.
    s = Settings.load(home, whatsapp_db=archive.whatsapp_db, whatsapp_enabled=True)
    s.save()
    assert Settings.load(home).whatsapp_enabled
    Settings.load(home, whatsapp_enabled=False).save()
    assert not Settings.load(home).whatsapp_enabled


def test_demo_refuses_a_home_with_a_real_ingestion(tmp_path):
    home = tmp_path / "real"
    Settings.load(home, chat_db=tmp_path / "Messages" / "chat.db").save()
    before = (home / "config.json").read_text()
    line = _one_line_error(brb("demo", "--messages", "50", "--home", home))
    assert str(home) in line and str(tmp_path / "Messages" / "chat.db") in line and "will not replace" in line
    assert (home / "config.json").read_text() == before
    assert not (home / "demo-archive").exists()


@pytest.mark.slow  # e2e: a whole `brb demo`
def test_demo_has_its_own_home_and_leaves_brb_home_alone(tmp_path):
    user_home = tmp_path / "user"
    user_home.mkdir()
    real = tmp_path / "real-brb"
    Settings.load(real, chat_db=tmp_path / "Messages" / "chat.db").save()
    before = (real / "config.json").read_text()
    env = {**ENV, "HOME": str(user_home), "BRB_HOME": str(real)}
    r = brb("demo", "--messages", "200", "--progress", "none", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    demo_home = user_home / ".brb-demo"
    assert json.loads(r.stdout)["home"] == str(demo_home)
    assert _config(demo_home)["chat_db"] == str(demo_home / "demo-archive" / "chat.db")
    assert "embedding_model" not in _config(demo_home)  # BRB_EMBEDDING_MODEL was this run's only
    assert f"--home {demo_home}" in r.stderr.splitlines()[-1]
    assert sorted(p.name for p in real.iterdir()) == ["config.json"]
    assert (real / "config.json").read_text() == before
