"""The chunk-count check fits every channel's density: a home that is only Mail, or mostly Mail,
ingests through the real pipeline (Dagster, DuckDB, SQLite; hash embedder), and the check still
fails on what it is for (chunks loaded twice, under the same ids or new ones).

Mail replies hours or days apart are one conversation, so one chunk, each: the old ceiling
(messages / 2 + 10) assumed chat density and refused such a home."""

from __future__ import annotations

import polars as pl
import pytest

from brb_pipeline.core import checks
from brb_pipeline.core.chunking import ChunkParams
from brb_pipeline.core.crypto import files
from brb_pipeline.core.embedding.models import HashEmbedder
from brb_pipeline.core.store import duck
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline.stages import embed
from brb_pipeline.orchestration.runner import run_ingest
from brb_pipeline.config.settings import Settings


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return build_demo_archive(tmp_path_factory.mktemp("dense") / "demo", messages=300, seed=7, mail=True,
                              mail_messages=500)


def _ingest(root, archive, imessage: bool) -> Settings:
    s = Settings(home=root / ("heavy" if imessage else "mail-only"), chat_db=archive.chat_db,
                 addressbook_dir=archive.addressbook_dir, imessage_enabled=imessage, mail_dir=archive.mail_dir,
                 mail_enabled=True, embedding_model="hash", encryption=False)
    run_ingest(s, embedder=HashEmbedder(), analyze=False)  # raises when a blocking check fails
    return s


def _check(s: Settings) -> tuple[bool, dict]:
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        return checks.chunk_count_sane(con, files.scan_parquet(s.paths.messages), embed.chunk_params(s))
    finally:
        con.close()


@pytest.mark.parametrize("imessage", [False, True], ids=["mail-only", "mail-heavy"])
def test_mail_homes_ingest_and_the_check_fits_them(tmp_path, archive, imessage):
    s = _ingest(tmp_path, archive, imessage)
    channels = files.scan_parquet(s.paths.messages).group_by("channel").len().collect()
    per = dict(channels.iter_rows())
    assert per["mail"] >= 500 and per.get("imessage", 0) < per["mail"]
    assert set(per) == ({"imessage", "mail"} if imessage else {"mail"})
    ok, d = _check(s)
    assert ok and d["duplicate_ids"] == 0 and d["chunks"] <= d["windows"]
    # the density the old rule refused: more chunks than messages / 2 + 10
    assert d["chunks"] > d["messages"] / 2 + 10
    assert s.duckdb_path.exists() and not s.paths.store_next.exists()


@pytest.mark.slow  # e2e: a whole ingest, then a damaged store
def test_the_check_still_catches_chunks_loaded_twice(tmp_path, archive):
    s = _ingest(tmp_path, archive, True)
    assert _check(s)[0]
    con = duck.connect(s.duckdb_path)
    con.execute("CREATE TABLE keep AS SELECT * FROM chunks")
    con.execute("INSERT INTO chunks SELECT * FROM keep")  # the same chunks again
    con.close()
    ok, d = _check(s)
    assert not ok and d["duplicate_ids"] == d["chunks"] // 2 > 0
    con = duck.connect(s.duckdb_path)
    con.execute("DELETE FROM chunks")
    con.execute("INSERT INTO chunks SELECT * FROM keep")
    # again under new ids, as a chunking that windows every conversation twice would
    con.execute("INSERT INTO chunks SELECT * REPLACE (md5(chunk_id) AS chunk_id) FROM keep")
    con.close()
    ok, d = _check(s)
    assert not ok and d["duplicate_ids"] == 0 and d["chunks"] > d["ceiling"]


def test_ceiling_counts_windows_per_conversation():
    """Exact window counts: 20 messages in one conversation, 3 replies days apart, a long body
    (several lines), an undated message joining the conversation before it by ROWID."""
    from datetime import datetime, timedelta, timezone

    t0 = datetime(2024, 3, 1, tzinfo=timezone.utc)
    rows = [("c1", "chat", t0 + timedelta(minutes=i), i, "hi there") for i in range(20)]
    rows += [("c2", "mail", t0 + timedelta(days=2 * i), i, "reply") for i in range(3)]
    rows += [("c3", "long", t0, 1, "x " * 3000), ("c3", "long", None, 2, "undated, after row 1")]
    frame = pl.DataFrame(rows, schema={"contact_id": pl.Utf8, "chat_id": pl.Utf8, "ts": pl.Datetime("us", "UTC"),
                                        "source_rowid": pl.Int64, "text": pl.Utf8}, orient="row")
    p = ChunkParams(window=8, stride=4, gap_s=6 * 3600, max_message_chars=2000)
    # c1: ceil((20 - 8) / 4) + 1 = 4; c2: 3 conversations of 1; c3: 6000 chars -> 6000 // 1600 + 2 = 5 lines
    # plus the undated one: 6 lines, one window
    assert checks.chunk_ceiling(frame.lazy(), p) == (25, 4 + 3 + 1)


@pytest.mark.slow  # scale: `brb demo` with a larger mailbox
def test_brb_demo_with_a_larger_mailbox_ingests(tmp_path):
    """`brb demo --mail-messages N` (implies --mail): more mail than iMessage, one run, exit 0."""
    import json

    from brb_pipeline_tests.helpers.cli import cli

    r = cli("demo", "--messages", "200", "--mail-messages", "400", "--progress", "none", "--no-encryption",
            home=tmp_path / "demo")
    assert r.exit_code == 0, r.stderr[-2000:]
    st = json.loads(r.stdout)
    assert st["channels"]["mail"] is True and st["search_ready"] and st["messages"] > 600
    per = dict(files.scan_parquet(Settings(home=tmp_path / "demo").paths.messages).group_by("channel").len()
               .collect().iter_rows())
    assert per["mail"] >= 400 > per["imessage"]
