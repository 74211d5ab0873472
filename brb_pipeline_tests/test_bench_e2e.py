"""Smoke test of ``benchmarks/bench_e2e.py`` at a tiny size with the hash embedder (speed is never
asserted: only that every measurement is there and the numbers are consistent)."""

import json
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_e2e  # noqa: E402

from brb_pipeline.core import metadata  # noqa: E402
from brb_pipeline.core.progress import STAGES  # noqa: E402
from brb_pipeline.config.settings import Settings  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    out = tmp / "e2e.json"
    # The incremental re-ingest is left out to stay well under a minute (the UMAP JIT alone takes
    # 15-40 s per process here); append_messages, its input, is tested on this run's home below.
    res = bench_e2e.main(["--messages", "300", "--sample", "200", "--model", "hash", "--queries", "5",
                          "--skip-incremental", "--workdir", str(tmp / "work"), "--out", str(out), "--quiet"])
    return res, out, tmp / "work"


def test_json_has_every_stage_with_consistent_numbers(result):
    res, out, _ = result
    written = json.loads(out.read_text())
    assert written["command"].endswith("--quiet") and written["config"]["model"] == "hash"
    full = written["full"]
    assert set(full["stages"]) == {*STAGES, "orchestration"}
    for stage in STAGES:
        v = full["stages"][stage]
        assert v["seconds"] > 0, stage  # every stage function ran
        assert v["peak_rss_mb"] > 50, stage  # a Python process with polars and duckdb loaded
    assert sum(v["seconds"] for v in full["stages"].values()) == pytest.approx(full["total_s"], rel=0.01)
    assert abs(sum(v["share"] for v in full["stages"].values()) - 1.0) < 0.01
    # every chunk embedded exactly once and stored once
    assert full["embedded_texts"] == full["summary"]["chunks"] == full["store"]["rows"] > 0
    assert full["store"]["duckdb_bytes"] > 0 and full["store"]["hnsw_build_s"] is not None
    assert full["throughput"]["tokens"] is None  # the hash embedder has no tokenizer
    assert full["search"]["queries"] == 5 and full["search"]["p50_ms"] <= full["search"]["p95_ms"]
    assert full["search"]["cold_queries"] > 0 and full["search"]["engine_p50_ms"] <= full["search"]["p50_ms"]
    assert {m: written["machine"][m] for m in ("cores", "python")} and written["machine"]["versions"]["duckdb"]


def test_append_messages_adds_rows_to_existing_chats_after_their_last_message(result):
    res, _, work = result
    s = Settings.load(work / "home")
    chat_db = work / "archive" / "chat.db"
    con = sqlite3.connect(chat_db)
    before_n = con.execute("SELECT count(*) FROM message").fetchone()[0]
    con.close()
    appended = bench_e2e.append_messages(s, chat_db, 7, contacts=3, seed=1)
    assert appended["messages"] == 7 and len(appended["contacts"]) == 3
    assert set(appended["batches"]) <= {b["batch"] for b in metadata.all_batches(s.brb_db)}
    con = sqlite3.connect(chat_db)
    try:
        rows = con.execute(
            "SELECT m.date, c.guid, cmj.message_date FROM message m JOIN chat_message_join cmj ON cmj.message_id = m.ROWID "
            "JOIN chat c ON c.ROWID = cmj.chat_id WHERE m.guid LIKE 'BENCH-APPENDED-%'").fetchall()
        assert con.execute("SELECT count(*) FROM message").fetchone()[0] == before_n + 7
        last_before = {g: con.execute(
            "SELECT max(m.date) FROM message m JOIN chat_message_join cmj ON cmj.message_id = m.ROWID "
            "JOIN chat c ON c.ROWID = cmj.chat_id WHERE c.guid = ? AND m.guid NOT LIKE 'BENCH-APPENDED-%'",
            (g,)).fetchone()[0] for _, g, _ in rows}
    finally:
        con.close()
    assert len(rows) == 7 and all(d == md for d, _, md in rows)  # joined, dated consistently
    assert len({g for _, g, _ in rows}) == 3  # three existing chats, one per contact
    assert all(d > last_before[g] for d, g, _ in rows)  # appended after each chat's last message


def test_baseline_comparison_uses_the_same_chunks(result):
    res, out, _ = result
    cmp_ = res["comparison"]
    assert cmp_["chunks"] > 0 and cmp_["fts_rebuilds"] == -(-cmp_["chunks"] // 32)
    # same (hash) model on the same chunks in the same order: identical vectors
    assert cmp_["cosine_default_vs_baseline"]["min"] == pytest.approx(1.0, abs=1e-5)
    for name in ("embedding", "saving", "embedding + saving"):
        row = cmp_["rows"][name]
        assert row["default_s"] > 0 and row["baseline_s"] > 0
        a, b = row["default_s"], row["baseline_s"]  # rounded to ms; the ratio was taken before rounding
        assert (b - 5e-4) / (a + 5e-4) - 0.005 <= row["ratio"] <= (b + 5e-4) / max(a - 5e-4, 1e-9) + 0.005
    md = out.with_suffix(".md").read_text()
    assert "| embedding |" in md and "Baseline vs default" in md and "## Targets" in md
    assert [t["pass"] for t in res["targets"]][-1] is None  # RSS target needs --rss-sizes
    assert "incremental" not in res and len(res["targets"]) == 5  # + the search latency target


def test_recorder_attributes_peak_rss_to_the_running_stage():
    rec = bench_e2e.Recorder(every_s=0.05)

    def allocate():
        block = np.ones(80 * 2**20 // 8)  # 80 MB, touched
        rec.sample()
        return float(block[-1])

    with rec:
        rec.wrap(allocate, "allocate", "embedding")()
    assert rec.peak["embedding"] - rec.start_rss > 60 * 2**20
    assert rec.calls["allocate"]["calls"] == 1 and rec.busy["embedding"] > 0


def test_tokens_counted_with_the_bundled_tokenizer():
    s = Settings(home=Path("/nonexistent"), embedding_model="bundled:all-MiniLM-L6-v2", max_tokens=8)
    n, how = bench_e2e.count_tokens(s, object(), ["hello world", "one two three four five six seven eight nine"])
    assert n == 4 + 8  # [CLS] hello world [SEP]; the second truncated at max_tokens
    assert "tokenizer.json" in how
    n, how = bench_e2e.count_tokens(Settings(home=Path("/nonexistent"), embedding_model="hash"), object(), ["x"])
    assert n is None and "chunks/s only" in how


@pytest.mark.parametrize("sizes", ["ten,20", "5000", "0,100"])  # not numbers; one size; a zero size
def test_bad_rss_sizes_fail_with_a_clear_error(tmp_path, capsys, sizes):
    with pytest.raises(SystemExit):
        bench_e2e.main(["--rss-sizes", sizes, "--model", "hash", "--out", str(tmp_path / "x.json"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--rss-sizes" in err and "50000,250000" in err
    assert not (tmp_path / "x.json").exists()
