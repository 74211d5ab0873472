"""The embedding model is one setting: `brb ingest --embedding-model M` on an existing home
re-embeds every chunk with M, remembers M, and search works with it afterwards (issue 29 item 6).

Real processes, real DuckDB/SQLite/Dagster; the models are the deterministic hash embedders of
two widths (384 and 64 dimensions), so a switch is visible in the store's dimension and in every
row's ``embedding_model``. No ``BRB_EMBEDDING_MODEL`` in the environment: the flag alone decides.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from brb_pipeline.demo.generate import build_demo_archive

ENV = {k: v for k, v in os.environ.items() if k != "BRB_EMBEDDING_MODEL"}
ENV.update(BRB_HDBSCAN_MIN_CLUSTER_SIZE="8", PYTHONUNBUFFERED="1")


def brb(*args, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "brb_pipeline.cli", *map(str, args), "--home", str(home)],
                          capture_output=True, text=True, timeout=600, env=ENV, stdin=subprocess.DEVNULL)


def store_models(home: Path) -> tuple[list[tuple[str, int]], int]:
    """(model, rows) per model in the chunks table; and the number of chunks."""
    con = duckdb.connect(str(home / "brb.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT embedding_model, count(*) FROM chunks GROUP BY 1 ORDER BY 1").fetchall()
        return rows, con.execute("SELECT count(*) FROM chunks").fetchone()[0]
    finally:
        con.close()


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    archive = build_demo_archive(tmp_path_factory.mktemp("switch_archive"), messages=400, seed=29)
    home = tmp_path_factory.mktemp("switch_home")
    r = brb("ingest", "--chat-db", archive.chat_db, "--addressbook", archive.addressbook_dir, "--no-insights",
            "--no-encryption", "--progress", "none", "--embedding-model", "hash", home=home)
    assert r.returncode == 0, r.stderr
    return home


def test_switch_reembeds_everything_and_search_uses_the_new_model(home):
    before, n = store_models(home)
    assert before == [("hash-384", n)] and n > 20
    first = json.loads(brb("search", "dinner plans", "--json", "-k", "3", home=home).stdout)
    assert first["model"] == "hash-384" and first["hits"]

    r = brb("ingest", "--no-insights", "--progress", "none", "--embedding-model", "hash-64", home=home)
    assert r.returncode == 0, r.stderr
    after, n_after = store_models(home)
    assert n_after == n and after == [("hash-64", n)]  # every chunk, none of the old vectors left
    assert json.loads((home / "config.json").read_text())["embedding_model"] == "hash-64"  # remembered

    status = json.loads(brb("status", "--json", home=home).stdout)
    assert status["embedding_model"].startswith("hash-64")
    out = brb("search", "dinner plans", "--json", "-k", "3", home=home)  # no flag: the remembered model
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["model"] == "hash-64" and res["hits"]
    assert [h["text"] for h in res["hits"]] != [h["text"] for h in first["hits"]] or res["hits"][0]["scores"][
        "vector"] != first["hits"][0]["scores"]["vector"]  # ranked by other vectors


def test_a_model_that_is_not_here_is_one_line_and_keeps_the_store(home, tmp_path):
    before = store_models(home)
    r = brb("ingest", "--no-insights", "--progress", "none", "--embedding-model", str(tmp_path / "no-such-model"),
            home=home)
    assert r.returncode == 2
    assert r.stderr.startswith("brb: error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert store_models(home) == before
    ok = brb("search", "dinner plans", "--json", "-k", "3", home=home)
    assert ok.returncode == 0 and json.loads(ok.stdout)["hits"], ok.stderr
