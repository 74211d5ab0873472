"""The home's data key: where it is kept, which files it opens, and how it is shredded.

A home is encrypted or not from its first ingestion on, as its ``encryption.json`` says
(:func:`prepare_home`); that file holds no secret, only the cipher and a check value that tells
the right key from a wrong one. The 256-bit key itself is, in the order it is looked for:

1. ``BRB_KEY`` in the environment (64 hex digits), for servers and CI;
2. a key file, ``<key dir>/data-<home id>.key`` with 0600 permissions, where the key dir is
   ``$BRB_KEY_DIR``, else ``$XDG_CONFIG_HOME/brb``, else ``~/.config/brb``: never inside the home,
   so a copy of the home does not carry its key;
3. the OS keychain (``keyring``: the macOS Keychain, the Secret Service on Linux desktops),
   service ``brb-pipeline data key``.

A new key goes to ``BRB_KEY``'s value when it is set, else the keychain when one works, else the
key file. :func:`install` makes :mod:`brb_pipeline.core.crypto.files` ask this module for keys.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from brb_pipeline.core.crypto import files
from brb_pipeline.core.crypto.sealed import KEY_BYTES, key_check
from brb_pipeline.core.errors import EncryptionKeyError
from brb_pipeline.keys.keystore import os_keychain, home_path_id, key_dir, shred_file, write_key_file
from brb_pipeline.config.home import Home
from brb_pipeline.config.settings import Settings

MARKER = "encryption.json"
CIPHER = "AES-256-GCM"
ENV_KEY = "BRB_KEY"
KEYRING_SERVICE = "brb-pipeline data key"
#: How far above a file its home's encryption.json is looked for: far enough for any file of a
#: home (a Mail body lies eight folders down), so no file of an encrypted home is written plain.
_MAX_DEPTH = 64


def marker_path(home: Path) -> Path:
    return Path(home) / MARKER


def read_marker(home: Path) -> dict[str, Any] | None:
    """The home's ``encryption.json``, or None when it has none."""
    p = marker_path(home)
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise EncryptionKeyError(f"{p} cannot be read ({e}): restore it from a backup of the home") from None


def encrypted(home: Path) -> bool:
    """Whether the home's ``encryption.json`` says it is encrypted (no key is looked up)."""
    return bool((read_marker(home) or {}).get("encrypted"))


def _home_key_id(home: Path) -> str:
    """The name the home's key is kept under: a random id in its ``encryption.json`` (so a home
    that is moved or restored from a backup on this machine still finds its key)."""
    m = read_marker(home) or {}
    return m.get("key_id") or home_path_id(home)


def key_file(home: Path) -> Path:
    """This home's data key file (used where no keychain works, or when ``BRB_KEY_DIR`` is set)."""
    return key_dir() / f"data-{_home_key_id(home)}.key"


def _hex_key(text: str) -> bytes | None:
    """A 256-bit key written as 64 hex digits, or None when ``text`` is not one."""
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        return None
    return key if len(key) == KEY_BYTES else None


def _env_key() -> bytes | None:
    v = os.environ.get(ENV_KEY, "").strip()
    if not v:
        return None
    key = _hex_key(v)
    if key is None:
        raise EncryptionKeyError(f"{ENV_KEY} must be {KEY_BYTES * 2} hex digits (a 256-bit key); "
                                 "make one with `python -c 'import os; print(os.urandom(32).hex())'`")
    return key


def _found_key(home: Path) -> tuple[bytes | None, str]:
    """(the key, where it was found) or (None, "")."""
    key = _env_key()
    if key is not None:
        return key, ENV_KEY
    f = key_file(home)
    if f.exists():
        try:
            return bytes.fromhex(f.read_text().strip()), f"key file {f}"
        except (OSError, ValueError) as e:
            raise EncryptionKeyError(f"the key file {f} cannot be read ({e})") from None
    kr = os_keychain()
    if kr is not None:
        try:
            v = kr.get_password(KEYRING_SERVICE, _home_key_id(home))
        except Exception:
            v = None
        if v:
            return bytes.fromhex(v), f"OS keychain ({KEYRING_SERVICE!r})"
    return None, ""


def _looked_in(home: Path) -> str:
    places = [f"${ENV_KEY}", f"the key file {key_file(home)}"]
    if os_keychain() is not None:
        places.append(f"the OS keychain ({KEYRING_SERVICE!r})")
    return ", ".join(places)


def data_key(home: Path) -> bytes | None:
    """The key of an encrypted home, checked against its ``encryption.json``; None for a plaintext home.

    Raises:
        EncryptionKeyError: encrypted, and the key is in none of its places, or is another key.
    """
    m = read_marker(home)
    if not m or not m.get("encrypted"):
        return None
    if m.get("rekey_to"):
        raise EncryptionKeyError(f"a key rotation of {home} was interrupted: run `brb rekey` to finish it")
    key, where = _found_key(home)
    if key is None:
        raise EncryptionKeyError(f"the encryption key of {home} is missing (looked in {_looked_in(home)}): "
                                 "restore it there, or run `brb delete-all` to start over")
    if key_check(key) != m.get("key_check"):
        raise EncryptionKeyError(f"the key in {where} is not the one {home} was encrypted with: restore the "
                                 "right key, or run `brb delete-all` to start over")
    return key


def _store_new_key(home: Path, key: bytes) -> str:
    """Keep a new key in the keychain (or the key file). Returns where it went."""
    kr = os_keychain()
    if kr is not None:
        try:
            kr.set_password(KEYRING_SERVICE, _home_key_id(home), key.hex())
            if kr.get_password(KEYRING_SERVICE, _home_key_id(home)) == key.hex():
                return "keychain"
        except Exception:
            pass  # e.g. Linux without a Secret Service: the key file below
    write_key_file(key_file(home), key)
    return "file"


def _has_data(home: Path) -> bool:
    h = Home(home)
    return any(p.exists() for p in (h.brb_db, h.duckdb_path, h.staging_dir, h.snapshot_dir))


def write_marker(home: Path, marker: dict[str, Any]) -> None:
    """Replace the home's ``encryption.json`` atomically."""
    home.mkdir(parents=True, exist_ok=True)
    tmp = marker_path(home).with_name(MARKER + ".tmp")
    tmp.write_text(json.dumps(marker, indent=2) + "\n")
    tmp.replace(marker_path(home))


def prepare_home(s: Settings) -> dict[str, Any]:
    """Fix the home's mode before the first file is written (every ingestion calls this first).

    A home with an ``encryption.json`` keeps its mode, and its key must be found (a lost key
    never starts a fresh store over the old one). A home with data but no ``encryption.json``
    was made before encryption existed and stays plaintext. A new home is encrypted unless
    ``s.encryption`` is False; its key is created here.

    Raises:
        EncryptionKeyError: the key of an encrypted home is missing or wrong; encrypted files
            without their ``encryption.json``.
    """
    home = Path(s.home)
    m = read_marker(home)
    if m is not None:
        if m.get("encrypted"):
            data_key(home)
        return m
    if files.sealed(s.paths.brb_db) or files.sealed(s.paths.messages):
        raise EncryptionKeyError(f"{home} holds encrypted files but its {MARKER} is gone: restore it "
                                 "from a backup of the home, or run `brb delete-all` to start over")
    if _has_data(home):
        m = {"format": 1, "encrypted": False, "reason": "made before encryption at rest"}
    elif not _wanted(s):
        m = {"format": 1, "encrypted": False, "reason": "--no-encryption"}
    else:
        key = _env_key() or os.urandom(KEY_BYTES)
        m = {"format": 1, "encrypted": True, "cipher": CIPHER, "key_check": key_check(key),
             "key_id": uuid.uuid4().hex, "key_kept_in": ENV_KEY,
             "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_marker(home, m)  # first: the key is kept under the id it names
        if not os.environ.get(ENV_KEY):
            m["key_kept_in"] = _store_new_key(home, key)
    write_marker(home, m)
    _cache.clear()
    return m


def _wanted(s: Settings) -> bool:
    """Whether a new home should be encrypted: ``s.encryption``, unless ``BRB_ENCRYPTION`` says no
    (Settings built in code, without ``Settings.load``, still honour the variable)."""
    env = os.environ.get("BRB_ENCRYPTION", "").strip().lower()
    return s.encryption and env not in ("0", "false", "no", "off")


def describe(s: Settings) -> dict[str, Any]:
    """What ``brb status`` shows: the mode, the cipher and where the key was found (never the key)."""
    home = Path(s.home)
    m = read_marker(home)
    if m is None:
        if _has_data(home):
            return {"encrypted": None, "note": "plaintext (made before encryption at rest)"}
        return {"encrypted": None, "note": "new home: the first ingestion encrypts it (AES-256-GCM)" if _wanted(s)
                else "new home: the first ingestion makes it plaintext (--no-encryption)"}
    if not m.get("encrypted"):
        return {"encrypted": False, "note": f"plaintext: {m.get('reason', '')}".rstrip(": ")}
    key, where = _found_key(home)
    ok = key is not None and key_check(key) == m.get("key_check")
    return {"encrypted": True, "cipher": m.get("cipher", CIPHER),
            "key_source": where if key is not None else f"missing (looked in {_looked_in(home)})",
            "key_ok": ok}


def shred(s: Settings) -> bool:
    """Destroy this home's data key (key file overwritten then removed, keychain entry deleted)
    and its ``encryption.json``. Returns whether a key was found."""
    home = Path(s.home)
    found = shred_file(key_file(home))
    shred_file(_next_file(home))
    kr = os_keychain()
    if kr is not None:
        for account in (_home_key_id(home), _home_key_id(home) + ":next"):
            try:
                if kr.get_password(KEYRING_SERVICE, account) is not None:
                    kr.delete_password(KEYRING_SERVICE, account)
                    found = True
            except Exception:
                pass
    marker_path(home).unlink(missing_ok=True)
    _cache.clear()
    return found


# Key rotation (keys.rekey): the new key waits in a "next" slot until every file uses it.

ENV_NEW_KEY = "BRB_NEW_KEY"


def _next_file(home: Path) -> Path:
    return key_file(home).with_name(key_file(home).stem + ".next.key")


def next_key_places(home: Path) -> str:
    return f"${ENV_NEW_KEY}, {_next_file(home)}, the OS keychain"


def new_key_for_rotation() -> bytes:
    """The key a rotation moves to: ``BRB_NEW_KEY`` when the current one comes from ``BRB_KEY``
    (brb cannot change the environment it was given), else a fresh random key."""
    if os.environ.get(ENV_KEY):
        key = _hex_key(os.environ.get(ENV_NEW_KEY, ""))
        if key is None:
            raise EncryptionKeyError(f"the key comes from ${ENV_KEY}: give the new one as ${ENV_NEW_KEY} "
                                     f"({KEY_BYTES * 2} hex digits), then set ${ENV_KEY} to it")
        return key
    return os.urandom(KEY_BYTES)


def keep_next_key(home: Path, key: bytes) -> None:
    """Keep a rotation's new key beside the current one (nothing to keep when it is ``BRB_NEW_KEY``)."""
    if os.environ.get(ENV_KEY):
        return
    kr = os_keychain() if read_marker(home).get("key_kept_in") == "keychain" else None
    if kr is not None:
        kr.set_password(KEYRING_SERVICE, _home_key_id(home) + ":next", key.hex())
    else:
        write_key_file(_next_file(home), key)


def next_key(home: Path) -> bytes | None:
    if os.environ.get(ENV_KEY):
        v = os.environ.get(ENV_NEW_KEY, "").strip()
        return bytes.fromhex(v) if v else None
    f = _next_file(home)
    if f.exists():
        return bytes.fromhex(f.read_text().strip())
    kr = os_keychain()
    v = kr.get_password(KEYRING_SERVICE, _home_key_id(home) + ":next") if kr is not None else None
    return bytes.fromhex(v) if v else None


def promote_next_key(home: Path, key: bytes) -> None:
    """The rotation's new key becomes the home's key (the old key file is overwritten first);
    the next slot stays until :func:`drop_next_key`, so a kill here can still be finished."""
    _cache.clear()
    if os.environ.get(ENV_KEY):
        return
    kr = os_keychain() if read_marker(home).get("key_kept_in") == "keychain" else None
    if kr is not None:
        kr.set_password(KEYRING_SERVICE, _home_key_id(home), key.hex())
        return
    shred_file(key_file(home))
    write_key_file(key_file(home), key)


def drop_next_key(home: Path) -> None:
    shred_file(_next_file(home))
    kr = os_keychain()
    if kr is not None:
        try:
            kr.delete_password(KEYRING_SERVICE, _home_key_id(home) + ":next")
        except Exception:
            pass  # no such entry


_cache: dict[Path, tuple[float, bytes | None]] = {}


def _provider(path: Path) -> bytes | None:
    """core.crypto's key provider: the key of the encrypted home above ``path``, if any."""
    d = path.parent if not path.is_dir() else path
    for _ in range(_MAX_DEPTH):
        mp = d / MARKER
        try:
            mtime = mp.stat().st_mtime
        except OSError:
            if d.parent == d:
                return None
            d = d.parent
            continue
        hit = _cache.get(d)
        if hit is None or hit[0] != mtime:
            hit = (mtime, data_key(d))
            _cache[d] = hit
        return hit[1]
    return None


def install() -> None:
    """Make the home's files open with their key (each entry point calls it once: see :mod:`brb_pipeline.keys`)."""
    files.set_key_provider(_provider)
