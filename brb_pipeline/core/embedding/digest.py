"""The SHA-256 of each weight file in a model's id, remembered between processes.

``model_id`` is ``name@`` the first 8 hex digits of a SHA-256 over the weight files' SHA-256s.
Hashing all-MiniLM-L6-v2's 90 MB is ~100 ms of CPU in every process that loads the model, the
largest part of loading it for a one-shot search, so each file's digest is kept in
``$XDG_CACHE_HOME/brb/weight-digests.json`` (else ``~/.cache/brb``; model paths and digests
only, nothing of the user's) under the file's size, modification time, change time and inode.
A file that is rewritten, replaced or touched changes at least its change time, which no program
can set back, so it is hashed again. A cache that cannot be read or written is left aside.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

_memo: dict[str, dict] = {}  # this process's digests, by resolved path


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "brb" / "weight-digests.json"


def _stamp(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _read_cache() -> dict[str, dict]:
    try:
        known = json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _write_cache(known: dict[str, dict]) -> None:
    f = cache_file()
    tmp = f.with_name(f"{f.name}.{os.getpid()}.tmp")
    try:
        f.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp.write_text(json.dumps({p: e for p, e in known.items() if os.path.exists(p)}))
        tmp.replace(f)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def file_digests(paths: Sequence[Path]) -> list[str]:
    """The SHA-256 (hex) of each file, from the cache where its stamp still matches."""
    known = {**_read_cache(), **_memo}
    out, changed = [], False
    for p in paths:
        key = str(Path(p).resolve())
        stamp = _stamp(key)
        entry = known.get(key)
        if not (isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str)):
            entry = {"stamp": stamp, "sha256": _sha256(key)}
            known[key] = entry
            changed = True
        _memo[key] = entry
        out.append(entry["sha256"])
    if changed:
        _write_cache(known)
    return out
