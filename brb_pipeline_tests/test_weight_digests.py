"""The weight digests behind a model's id are kept between processes, and a weight file that
changes is hashed again even when its size and modification time are put back."""

from __future__ import annotations

import hashlib
import json
import os

from brb_pipeline.core.embedding import digest


def test_a_digest_is_kept_and_a_changed_file_is_hashed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(digest, "_memo", {})
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"a" * 4096)
    assert digest.file_digests([f]) == [hashlib.sha256(b"a" * 4096).hexdigest()]
    kept = json.loads(digest.cache_file().read_text())
    assert kept[str(f.resolve())]["sha256"] == hashlib.sha256(b"a" * 4096).hexdigest()

    st = f.stat()
    f.write_bytes(b"b" * 4096)  # same size, and the old modification time put back
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    monkeypatch.setattr(digest, "_memo", {})  # a new process: only the file on disk
    assert digest.file_digests([f]) == [hashlib.sha256(b"b" * 4096).hexdigest()]


def test_an_unwritable_cache_still_gives_the_digest(tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(digest, "_memo", {})
    f = tmp_path / "w.bin"
    f.write_bytes(b"x")
    assert digest.file_digests([f]) == [hashlib.sha256(b"x").hexdigest()]
