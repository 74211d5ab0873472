"""`brb ingest` on a Mac with no source given: the user's own Messages and Contacts stores.

The platform is a parameter (``platform_default_sources(home_dir, platform)``), so these run on
Linux against a fake home dir holding a real demo chat.db and AddressBook where macOS keeps them.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline.config.settings import (MAC_ADDRESSBOOK, MAC_CHAT_DB, Settings, platform_default_sources,
                                   with_platform_defaults)

ENV = {k: v for k, v in os.environ.items() if not k.startswith("BRB_")}
ENV.update(BRB_EMBEDDING_MODEL="hash", BRB_HDBSCAN_MIN_CLUSTER_SIZE="8", PYTHONUNBUFFERED="1")

# `brb` as on a Mac: the platform the ingest command passes in is replaced by "darwin"
AS_MAC = """
import sys
import brb_pipeline.config.settings as st
orig = st.platform_default_sources
st.platform_default_sources = lambda home_dir, platform: orig(home_dir, "darwin")
from brb_pipeline.cli.app import main
sys.argv = ["brb"] + sys.argv[1:]
main()
"""


@pytest.fixture(autouse=True)
def _no_brb_env(monkeypatch):
    for k in [k for k in os.environ if k.startswith("BRB_")]:
        monkeypatch.delenv(k)


@pytest.fixture(scope="module")
def mac_home(tmp_path_factory):
    """A fake user home with ~/Library/Messages/chat.db and ~/Library/Application Support/AddressBook."""
    home = tmp_path_factory.mktemp("mac_user")
    messages = home / MAC_CHAT_DB.parent
    archive = build_demo_archive(messages, messages=300, seed=4)
    assert archive.chat_db == messages / "chat.db"
    (home / MAC_ADDRESSBOOK).parent.mkdir(parents=True)
    shutil.move(str(archive.addressbook_dir), str(home / MAC_ADDRESSBOOK))
    return home


def _brb(*args, user_home: Path, mac: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", AS_MAC] if mac else [sys.executable, "-m", "brb_pipeline.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300,
                          env={**ENV, "HOME": str(user_home)}, stdin=subprocess.DEVNULL)


def _unreadable_file(path: Path) -> None:
    """A file this process cannot open: mode 000, or for root (who ignores modes) a link to a
    write-only kernel file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        path.write_bytes(b"SQLite format 3\x00")
        path.chmod(0)
        return
    target = Path("/proc/sys/vm/compact_memory")
    try:
        target.open("rb").close()
    except PermissionError:
        path.symlink_to(target)
        return
    except OSError:
        pass
    pytest.skip("no file here that root cannot read")


# Which sources are the defaults --------------------------------------------------------------

def test_defaults_on_macos_only_and_only_what_exists(mac_home, tmp_path):
    found = platform_default_sources(mac_home, "darwin")
    assert found == {"chat_db": mac_home / "Library/Messages/chat.db",
                     "addressbook_dir": mac_home / "Library/Application Support/AddressBook"}
    assert platform_default_sources(mac_home, "linux") == {}  # Linux: nothing by default
    assert platform_default_sources(mac_home, "win32") == {}
    assert platform_default_sources(tmp_path, "darwin") == {}  # a Mac without Messages
    (tmp_path / MAC_CHAT_DB).parent.mkdir(parents=True)
    (tmp_path / MAC_CHAT_DB).write_bytes(b"")
    assert platform_default_sources(tmp_path, "darwin") == {"chat_db": tmp_path / MAC_CHAT_DB}


def test_a_private_chat_db_still_counts_as_present(tmp_path):
    _unreadable_file(tmp_path / MAC_CHAT_DB)
    assert platform_default_sources(tmp_path, "darwin") == {"chat_db": tmp_path / MAC_CHAT_DB}


def test_defaults_fill_only_settings_that_name_no_source(mac_home, tmp_path, monkeypatch):
    mac = {"home_dir": mac_home, "platform": "darwin"}
    s = with_platform_defaults(Settings.load(tmp_path / "h1"), **mac)
    assert (s.chat_db, s.addressbook_dir) == (mac_home / MAC_CHAT_DB, mac_home / MAC_ADDRESSBOOK)
    assert s.whatsapp_db is None and not s.whatsapp_enabled  # never WhatsApp (nor Mail)
    assert with_platform_defaults(Settings.load(tmp_path / "h1"), home_dir=mac_home, platform="linux").chat_db is None
    # an explicit source, a saved one or a variable: the Mac's stores are not mixed in
    own = tmp_path / "backup" / "chat.db"
    assert with_platform_defaults(Settings.load(tmp_path / "h2", chat_db=own), **mac).addressbook_dir is None
    ab_only = with_platform_defaults(Settings.load(tmp_path / "h3", addressbook_dir=tmp_path / "AB"), **mac)
    assert ab_only.chat_db is None
    wa = with_platform_defaults(Settings.load(tmp_path / "h4", whatsapp_db=tmp_path / "wa.sqlite"), **mac)
    assert wa.chat_db is None
    (tmp_path / "h5").mkdir()
    (tmp_path / "h5" / "config.json").write_text(json.dumps({"chat_db": str(own)}))
    saved = with_platform_defaults(Settings.load(tmp_path / "h5"), **mac)
    assert saved.chat_db == own and saved.addressbook_dir is None
    monkeypatch.setenv("BRB_CHAT_DB", str(own))
    assert with_platform_defaults(Settings.load(tmp_path / "h6"), **mac).chat_db == own
    monkeypatch.delenv("BRB_CHAT_DB")
    off = with_platform_defaults(Settings.load(tmp_path / "h7", imessage_enabled=False), **mac)
    assert off.chat_db is None


# `brb ingest` with no arguments ----------------------------------------------------------------

@pytest.mark.slow  # e2e: a whole `brb ingest` from the Mac's default paths
def test_ingest_without_arguments_reads_the_macs_stores(mac_home, tmp_path):
    home = tmp_path / "brb"
    r = _brb("ingest", "--progress", "none", "--no-insights", "--home", str(home), user_home=mac_home)
    assert r.returncode == 0, r.stderr[-2000:]
    saved = json.loads((home / "config.json").read_text())  # remembered for later runs and the sensors
    assert saved["chat_db"] == str(mac_home / MAC_CHAT_DB)
    assert saved["addressbook_dir"] == str(mac_home / MAC_ADDRESSBOOK)
    assert "whatsapp_db" not in saved and not saved.get("whatsapp_enabled")
    status = json.loads(_brb("status", "--json", "--home", str(home), user_home=mac_home).stdout)
    assert status["messages"] > 250 and status["named_contacts"] > 0  # names from the AddressBook
    # the same fake home on Linux: nothing is read by default
    r = _brb("ingest", "--progress", "none", "--home", str(tmp_path / "linux"), user_home=mac_home, mac=False)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("brb: error: no chat.db configured")


def test_unreadable_chat_db_says_full_disk_access_before_anything_else(tmp_path):
    user = tmp_path / "user"
    _unreadable_file(user / MAC_CHAT_DB)
    home = tmp_path / "brb"
    r = _brb("ingest", "--progress", "jsonl", "--home", str(home), user_home=user)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines == [f"brb: error: chat.db at {user / MAC_CHAT_DB} is not readable (Permission denied); "
                     "on macOS grant Full Disk Access to your terminal"], r.stderr[-2000:]
    assert not home.exists()  # nothing written, no snapshot tried
    # the same for a chat.db given by its path
    r = _brb("ingest", "--chat-db", str(user / MAC_CHAT_DB), "--home", str(home), user_home=tmp_path, mac=False)
    assert r.returncode == 2 and "grant Full Disk Access" in r.stderr and not home.exists()
