"""What keeps large archives linear: sealing without a second copy, per-batch reads of the
messages file, and the names lookup every batch makes.

Each piece is checked against the simple form it replaced: the same bytes, the same rows, the
same names.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from brb_pipeline.core import metadata
from brb_pipeline.core.crypto import files
from brb_pipeline.core.crypto.sealed import STREAM_STEP, is_sealed, seal, seal_to, unseal
from brb_pipeline.core.errors import EncryptionKeyError
from brb_pipeline.sources.sqlite_ro import memory_image

KEY = bytes(range(32))


@pytest.fixture
def sealed_dir(tmp_path):
    """Files under ``tmp_path/home`` are sealed under KEY; the provider is removed afterwards."""
    home = tmp_path / "home"
    home.mkdir()
    installed = files._provider  # keys.provider' provider, which later tests in this process need

    def provider(p: Path) -> bytes | None:
        return KEY if home in Path(p).parents else (installed(p) if installed else None)

    files.set_key_provider(provider)
    yield home
    files.set_key_provider(installed)
    files._where_open = None


def test_streamed_seal_is_the_one_shot_seal_format(tmp_path):
    data = os.urandom(2 * STREAM_STEP + 12345)  # crosses the step boundary twice
    out = tmp_path / "f"
    with open(out, "wb") as f:
        seal_to(KEY, [data[:7], memoryview(data)[7:]], f)
    blob = out.read_bytes()
    assert is_sealed(blob) and len(blob) == len(seal(KEY, data))
    assert unseal(KEY, blob) == data
    # one flipped byte anywhere (body or tag) is refused, as for a one-shot seal
    for at in (30, len(blob) - 1):
        bad = bytearray(blob)
        bad[at] ^= 1
        with pytest.raises(EncryptionKeyError):
            unseal(KEY, bytes(bad))


def test_write_bytes_takes_parts_sealed_and_plain(tmp_path, sealed_dir):
    parts = [b"head", memoryview(b"-body-" * 1000)[6:], bytearray(b"tail")]
    joined = b"".join(bytes(p) for p in parts)
    files.write_bytes(sealed_dir / "x.bin", parts)
    assert is_sealed((sealed_dir / "x.bin").read_bytes()[:8])
    assert files.read_bytes(sealed_dir / "x.bin") == joined
    files.write_bytes(tmp_path / "plain.bin", parts)
    assert (tmp_path / "plain.bin").read_bytes() == joined
    assert not (tmp_path / "plain.bin.tmp").exists() and not (sealed_dir / "x.bin.tmp").exists()


def test_memory_image_of_a_wal_copy_patches_only_the_header(tmp_path):
    src = tmp_path / "wal.db"
    con = sqlite3.connect(src)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t (x TEXT)")
    con.executemany("INSERT INTO t VALUES (?)", [(str(i) * 50,) for i in range(2000)])
    con.commit()
    mem = sqlite3.connect(":memory:")
    con.backup(mem)
    con.close()
    raw = mem.serialize()
    assert raw[18:20] == b"\x02\x02"
    parts = memory_image(mem)
    image = b"".join(bytes(p) for p in parts)
    assert image[18:20] == b"\x01\x01" and image[:18] == raw[:18] and image[20:] == raw[20:]
    assert isinstance(parts[-1], memoryview)  # the body is the serialized buffer, not a copy
    back = sqlite3.connect(":memory:")
    back.deserialize(image)
    assert back.execute("SELECT count(*) FROM t").fetchone()[0] == 2000


def _grouped(path: Path, sealed_home: bool) -> pl.DataFrame:
    frame = pl.DataFrame({"batch": [f"b{i % 7}" for i in range(700)], "n": list(range(700)),
                          "text": [f"message {i}" for i in range(700)]})
    frame = frame.sort("batch", maintain_order=True)
    schema = frame.to_arrow().schema
    with files.parquet_writer(path, schema) as write:
        for part in frame.partition_by("batch", maintain_order=True):
            write(part.to_arrow())
    assert is_sealed(path.read_bytes()[:8]) == sealed_home
    return frame


@pytest.mark.parametrize("sealed_home", [False, True])
def test_read_parquet_where_reads_only_the_matching_row_groups(tmp_path, sealed_dir, sealed_home):
    path = (sealed_dir if sealed_home else tmp_path) / "m.parquet"
    frame = _grouped(path, sealed_home)
    for b in ("b0", "b3", "b6", "missing"):
        assert files.read_parquet_where(path, "batch", b).equals(frame.filter(pl.col("batch") == b))
    # only one of the 7 row groups is decoded for a batch: read_row_groups is asked for it alone
    asked = []
    real = pq.ParquetFile.read_row_groups
    pq.ParquetFile.read_row_groups = lambda self, groups, **kw: asked.append(list(groups)) or real(self, groups, **kw)
    try:
        files.read_parquet_where(path, "batch", "b4")
    finally:
        pq.ParquetFile.read_row_groups = real
    assert asked == [[4]]


def test_read_parquet_where_sees_a_rewritten_file_and_unsorted_files(tmp_path, sealed_dir):
    path = sealed_dir / "m.parquet"
    _grouped(path, True)
    assert files.read_parquet_where(path, "batch", "b1").height == 100
    # forget rewrites the file (fewer rows, one row group, any order): the next read sees that
    files.write_parquet(pa.table({"batch": ["b1", "b2", "b1"], "n": [1, 2, 3], "text": ["a", "b", "c"]}), path)
    assert files.read_parquet_where(path, "batch", "b1")["n"].to_list() == [1, 3]


def test_name_maps_match_the_contacts_frame(tmp_path, demo_archive_small):
    from brb_pipeline.stages import ingest
    from brb_pipeline.stages.embed import name_maps
    from brb_pipeline.config.settings import Settings

    s = Settings.load(tmp_path / "home", chat_db=demo_archive_small.chat_db,
                      addressbook_dir=demo_archive_small.addressbook_dir, whatsapp_enabled=True,
                      whatsapp_db=demo_archive_small.whatsapp_db)
    ingest.run_snapshot(s)
    ingest.run_parse(s)
    ingest.run_contacts(s)
    by_contact, by_handle = {}, {}
    for r in metadata.read_contacts(s.brb_db).iter_rows(named=True):  # what name_maps did before
        by_contact[r["contact_id"]] = r["display_name"]
        if r.get("kind") == "direct":
            for h in r.get("handles") or []:
                by_handle[h] = r["display_name"]
    assert len(by_handle) >= 5 and len(by_contact) > len(by_handle)
    assert name_maps(s) == (by_contact, by_handle)


def _one_batch_per_row_group(path: Path) -> bool:
    pf = pq.ParquetFile(path)
    return all(len(pf.read_row_group(i, columns=["batch"]).column("batch").unique()) == 1
               for i in range(pf.num_row_groups))


def test_forget_keeps_the_messages_file_grouped_by_batch(tmp_path, demo_archive_small):
    from brb_pipeline.stages import embed, ingest
    from brb_pipeline.privacy import forget as privacy
    from brb_pipeline.config.settings import Settings

    s = Settings.load(tmp_path / "home", chat_db=demo_archive_small.chat_db,
                      addressbook_dir=demo_archive_small.addressbook_dir, embedding_model="hash")
    ingest.run_snapshot(s)
    ingest.run_parse(s)
    ingest.run_contacts(s)
    before = pl.read_parquet(s.paths.messages)
    assert _one_batch_per_row_group(s.paths.messages) and before["batch"].n_unique() > 1
    contacts = metadata.read_contacts(s.brb_db).filter(pl.col("kind") == "direct")
    gone = contacts["contact_id"][1]
    privacy.forget_contacts(s, [gone])
    after = pl.read_parquet(s.paths.messages)
    assert gone not in after["contact_id"].to_list() and after.height < before.height
    assert _one_batch_per_row_group(s.paths.messages)
    for b in after["batch"].unique().to_list():
        assert embed.batch_messages(s, b).equals(after.filter(pl.col("batch") == b))


def test_a_sealed_snapshot_of_a_wal_source_holds_its_uncheckpointed_rows(tmp_path, sealed_dir):
    """The sealed snapshot serializes the source's pages itself: rows still only in the -wal file
    must be in the copy, as the backup API's copy has them."""
    from brb_pipeline.sources.snapshot import _backup
    from brb_pipeline.sources.sqlite_ro import FileIO

    src = tmp_path / "chat.db"
    w = sqlite3.connect(src)
    w.execute("PRAGMA journal_mode=WAL")
    w.execute("PRAGMA wal_autocheckpoint=0")
    w.execute("CREATE TABLE message (text TEXT)")
    w.executemany("INSERT INTO message VALUES (?)", [(f"m{i}",) for i in range(3000)])
    w.commit()  # kept open: nothing is checkpointed into chat.db itself
    assert Path(str(src) + "-wal").stat().st_size > src.stat().st_size
    io = FileIO(read=files.read_bytes, write=files.write_bytes)
    dst = sealed_dir / "snapshot" / "chat.db"
    _backup(src, dst, "chat.db", 5.0, io)
    assert is_sealed(dst.read_bytes()[:8])
    copy = sqlite3.connect(":memory:")
    copy.deserialize(files.read_bytes(dst))
    assert copy.execute("SELECT count(*), max(text) FROM message").fetchone() == (3000, "m999")
    assert copy.execute("PRAGMA journal_mode").fetchone()[0] == "memory"
    w.close()
