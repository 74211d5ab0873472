"""``brb rekey``: rotate an encrypted home's data key in place.

Three steps, each safe to kill:

1. every sealed file is re-sealed under the new key into ``<file>.rekey`` and every DuckDB
   database is copied (``COPY FROM DATABASE``, indexes included) into an encrypted
   ``<file>.rekey``; the old files are untouched, so a kill here leaves the home as it was
   (the next ``brb rekey`` removes the leftovers and starts again);
2. the new key is kept beside the old one (``next`` slot) and ``encryption.json`` records
   ``rekey_to``: from here the rotation is committed, and any command asks to finish it;
3. each ``.rekey`` file is renamed over its original, then the new key replaces the old one and
   ``encryption.json`` names it. Running ``brb rekey`` after a kill in step 3 renames what is
   left and finishes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from brb_pipeline.core import faults, metadata
from brb_pipeline.core.crypto.sealed import is_sealed, key_check, seal, subkey, unseal
from brb_pipeline.core.errors import EncryptionKeyError, StoreError
from brb_pipeline.keys import provider as keys
from brb_pipeline.stages.store import discard_next, fsync
from brb_pipeline.config.home import Home
from brb_pipeline.config.settings import Settings

SUFFIX = ".rekey"
#: Folders never holding sealed files: Dagster's own storage and the demo's source stand-in.
_SKIP_DIRS = {Home(Path()).dagster_home.name, Home(Path()).demo_archive_dir.name}


def _home_files(home: Path) -> list[Path]:
    out = []
    for root, dirs, names in os.walk(home):
        dirs[:] = [d for d in dirs if not (Path(root) == home and d in _SKIP_DIRS)]
        out.extend(Path(root) / n for n in names)
    return sorted(out)


def _leftovers(home: Path) -> list[Path]:
    return [p for p in _home_files(home) if p.name.endswith(SUFFIX)]


def _is_duckdb(p: Path) -> bool:
    return p.name.endswith(".duckdb")


def _copy_duckdb(src: Path, dst: Path, new: bytes) -> None:
    """``src`` (opened with the home's current key) copied whole into ``dst``, encrypted under ``new``."""
    from brb_pipeline.core.store import duck

    dst.unlink(missing_ok=True)
    con = duck.connect(src)  # the home's current key (httpfs loaded: it writes); checkpoints its WAL when closed
    try:
        con.execute(f"ATTACH '{dst}' AS rekey_dst (ENCRYPTION_KEY '{subkey(new, 'duckdb').hex()}')")
        con.execute(f"COPY FROM DATABASE {duck.CATALOG} TO rekey_dst")
        con.execute("DETACH rekey_dst")
    finally:
        con.close()


def _stage(home: Path, old: bytes, new: bytes) -> int:
    """Step 1: the ``.rekey`` copy of every encrypted file. Returns the files staged."""
    n = 0
    for p in _home_files(home):
        if p.name.endswith((SUFFIX, ".tmp", ".lock", ".wal")) or p.name == keys.MARKER:
            continue
        dst = p.with_name(p.name + SUFFIX)
        if _is_duckdb(p):
            _copy_duckdb(p, dst, new)
        else:
            raw = p.read_bytes()
            if not is_sealed(raw):
                continue
            tmp = dst.with_name(dst.name + ".tmp")
            tmp.write_bytes(seal(new, unseal(old, raw, what=str(p))))
            tmp.replace(dst)
        fsync(dst)
        n += 1
    return n


def _swap(home: Path) -> int:
    """Step 3's renames: every ``.rekey`` file over its original."""
    n = 0
    for p in _leftovers(home):
        orig = p.with_name(p.name[: -len(SUFFIX)])
        if _is_duckdb(orig):
            orig.with_name(orig.name + ".wal").unlink(missing_ok=True)  # checkpointed into the copy
        os.replace(p, orig)
        n += 1
        faults.point("rekey_swapping")
    return n


def _running(s: Settings) -> bool:
    if not s.brb_db.exists():
        return False
    metadata.settle_dead_runs(s.brb_db)
    run = metadata.last_run(s.brb_db)
    return bool(run and run["status"] == "running")


def rekey(s: Settings) -> dict[str, Any]:
    """Rotate the data key of the encrypted home ``s.home`` (or finish a rotation that was killed).

    Raises:
        EncryptionKeyError: a plaintext home, or its key is missing or wrong.
        StoreError: an ingestion is running.
    """
    home = Path(s.home)
    m = keys.read_marker(home)
    if not m or not m.get("encrypted"):
        raise EncryptionKeyError(f"{home} is not encrypted: there is no key to rotate")
    if m.get("rekey_to"):
        return _finish(s, m, resumed=True)
    old = keys.data_key(home)
    if _running(s):
        raise StoreError("an ingestion is running in this home: rotate the key when it has finished")
    discard_next(s, keep_lines=False)
    s.paths.lines_resume.unlink(missing_ok=True)  # a cache under the old key: lines are embedded again
    for p in _leftovers(home):  # a rotation killed in step 1
        p.unlink()
    new = keys.new_key_for_rotation()
    staged = _stage(home, old, new)
    faults.point("rekey_staged")
    keys.keep_next_key(home, new)
    m = dict(m, rekey_to=key_check(new))
    keys.write_marker(home, m)
    return _finish(s, m, resumed=False, staged=staged)


def _finish(s: Settings, m: dict[str, Any], *, resumed: bool, staged: int | None = None) -> dict[str, Any]:
    home = Path(s.home)
    new = keys.next_key(home)
    if new is None or key_check(new) != m["rekey_to"]:
        raise EncryptionKeyError(f"the new key of an interrupted rotation of {home} is missing "
                                 f"(looked in {keys.next_key_places(home)})")
    swapped = _swap(home)
    keys.promote_next_key(home, new)
    m = {k: v for k, v in m.items() if k != "rekey_to"}
    m["key_check"] = key_check(new)
    keys.write_marker(home, m)
    keys.drop_next_key(home)
    return {"rotated": True, "resumed": resumed, "files": staged if staged is not None else swapped,
            "key_source": keys.describe(s).get("key_source")}

