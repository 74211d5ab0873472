"""A small chunk store (two contacts, hash-embedded texts with random-hex phrases) in a fresh
home, encrypted or plaintext."""

from __future__ import annotations

import hashlib
from pathlib import Path

from brb_pipeline.config.settings import Settings
from brb_pipeline.core.embedding.hashing import HashEmbedder
from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.store import duck, index
from brb_pipeline.keys import provider as keys
from brb_pipeline_tests.helpers.store import make_chunks

DIM = 384
EMB = HashEmbedder(DIM)
TOPICS = ["sailing", "gardening", "jazz", "chess", "baking"]


def home(tmp_path: Path, monkeypatch, name: str, encrypted: bool) -> Settings:
    """A new home, encrypted (its key in a key file under tmp_path/keys) or plaintext."""
    monkeypatch.setenv("BRB_ENCRYPTION", "1" if encrypted else "0")
    monkeypatch.setenv("BRB_KEY_DIR", str(tmp_path / "keys"))
    s = Settings(home=tmp_path / name, embedding_model=EMB.model_id)
    assert keys.prepare_home(s)["encrypted"] is encrypted
    return s


def phrase(contact: str, i: int) -> str:
    # Random hex defeats DuckDB's string compression, so a plaintext file holds it byte for byte.
    return "zq" + hashlib.sha256(f"{contact}-{i}".encode()).hexdigest()[:40]


def texts(contact: str, n: int) -> list[str]:
    return [f"{contact} talks about {TOPICS[i % len(TOPICS)]} on the weekend {phrase(contact, i)}" for i in range(n)]


def partitions(s: Settings) -> dict[str, Path]:
    out = {}
    for batch, contact, n in (("b1", "ana", 40), ("b2", "ben", 24)):
        said = texts(contact, n)
        out[batch] = store.write_partition(s.staging_dir, batch, make_chunks(batch, contact, n, texts=said),
                                           EMB.embed(said), EMB.model_id)
    return out


def build(s: Settings) -> None:
    """The store of :func:`partitions`, loaded with both indexes built, closed."""
    con = duck.connect(s.duckdb_path)
    try:
        assert store.load_partitions(con, partitions(s)).inserted == 64
        index.build_indexes(con, m=8, ef_construction=64)
    finally:
        con.close()

