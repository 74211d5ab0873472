"""Where brb keeps its keys outside the home: the OS keychain and 0600 key files.

Shared by the data key (:mod:`.keys`) and the forget key (:mod:`.forgotten`). Key files live in
``$BRB_KEY_DIR``, else ``$XDG_CONFIG_HOME/brb``, else ``~/.config/brb``: never inside a home, so
a copy of the home does not carry its keys.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

#: A key dir set in the environment always means key files, never the keychain.
KEY_DIR_ENV = "BRB_KEY_DIR"


def home_path_id(home: Path) -> str:
    """An id for a home from its absolute path (the forget key is kept under it)."""
    return hashlib.sha256(str(Path(home).expanduser().resolve()).encode()).hexdigest()[:32]


def key_dir() -> Path:
    """The folder of key files (see :data:`KEY_DIR_ENV`)."""
    if os.environ.get(KEY_DIR_ENV):
        return Path(os.environ[KEY_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "brb"


def os_keychain():
    """The keyring module when an OS keychain backend is usable, else None. A key dir set in
    the environment always means files (tests, or a user who wants the key on their own volume)."""
    if os.environ.get(KEY_DIR_ENV):
        return None
    try:
        import keyring
        from keyring.backends import fail

        if isinstance(keyring.get_keyring(), fail.Keyring):
            return None
        return keyring
    except Exception:  # no keyring package or a broken backend: fall back to the key file
        return None


def write_key_file(f: Path, key: bytes) -> None:
    """Write a key (hex) to a 0600 file in a 0700 folder, atomically."""
    f.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = f.with_name(f.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key.hex())
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(f)


def shred_file(f: Path) -> bool:
    """Overwrite a key file, then remove it (the file system may keep the old blocks otherwise)."""
    if not f.exists():
        return False
    size = f.stat().st_size
    with f.open("r+b") as out:
        out.write(os.urandom(size))
        out.flush()
        os.fsync(out.fileno())
    f.unlink()
    return True
