"""The whole graph in-process on a small demo archive: real SQLite, DuckDB and Dagster in tmp dirs.

The embedder is the fast deterministic HashEmbedder (these tests are not about embedding);
a counting wrapper shows which batches were embedded.
"""

import json
import sqlite3
from datetime import datetime, timezone

import dagster as dg
import polars as pl
import pytest

from brb_pipeline.core import metadata
from brb_pipeline.core.store import duck
from brb_pipeline.core.embedding.models import HashEmbedder
from brb_pipeline.core.records import UNKNOWN_CONTACT_ID
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline.search.query import run_search
from brb_pipeline.orchestration.runner import run_ingest
from brb_pipeline.config.settings import Settings
from brb_pipeline_tests.helpers.pipeline import CountingEmbedder
from brb_pipeline_tests.helpers.pipeline import append_messages as _append_messages


def _settings(home, archive, **kw):
    return Settings.load(home, chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir,
                         embedding_model="hash", hdbscan_min_cluster_size=8, umap_neighbors=10, **kw)


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    archive = build_demo_archive(root / "archive", messages=1500, seed=11)
    s = _settings(root / "home", archive)
    emb = CountingEmbedder()
    result = run_ingest(s, embedder=emb)
    return s, archive, result, emb


def _store_rows(s, where="TRUE", params=()):
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        return con.execute(f"SELECT count(*) FROM chunks WHERE {where}", list(params)).fetchone()[0]
    finally:
        con.close()


def test_first_ingest_fills_every_store(ingested):
    s, archive, result, emb = ingested
    contacts = metadata.read_contacts(s.brb_db)
    assert result["messages"] == archive.counts["expected_messages"]
    assert contacts.height > 10 and contacts["name_source"].eq("addressbook").sum() > 0
    assert sorted(result["batches_processed"]) == sorted(b["batch"] for b in metadata.all_batches(s.brb_db))
    assert result["chunks"] == _store_rows(s) > 0
    assert emb.chunk_texts(s) == result["chunks"]  # every chunk embedded exactly once
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        from brb_pipeline.core.store.index import index_status

        st = index_status(con)
        assert st["ready"] and st["hnsw"]["rows"] == st["fts"]["rows"] == result["chunks"]
        # every chunk's message lines have vectors (parent-child search), one row per chunk
        assert con.execute("SELECT count(*), count(DISTINCT chunk_id) FROM line_vectors").fetchone() == (
            result["chunks"], result["chunks"])
        assert con.execute("SELECT count(*) FROM chunks c LEFT JOIN line_vectors l USING (chunk_id) "
                           "WHERE l.chunk_id IS NULL").fetchone()[0] == 0
    finally:
        con.close()
    assert (s.insights_dir / "map.html").stat().st_size > 10_000
    assert metadata.count_clusters(s.brb_db) >= 1
    run = metadata.last_run(s.brb_db)
    assert run["status"] == "success" and run["messages"] == result["messages"]


def test_top_contacts_batches_of_ten(ingested):
    s, *_ = ingested
    contacts = metadata.read_contacts(s.brb_db).sort("rank")
    sizes = contacts.group_by("batch").len().sort("batch")["len"].to_list()
    assert sizes[0] == 10  # the busiest ten contacts share the first batch
    assert contacts["batch"][0] == "batch-000"


def test_no_change_rerun_does_no_embedding(ingested):
    s, _, first, _ = ingested
    emb = CountingEmbedder()
    again = run_ingest(s, embedder=emb, analyze=False)
    assert again["batches_processed"] == []
    assert emb.calls == 0
    assert not again["store_changed"]
    assert _store_rows(s) == first["chunks"]


def test_contact_backfill_touches_one_partition_and_keeps_counts(ingested):
    s, _, first, _ = ingested
    contacts = metadata.read_contacts(s.brb_db).sort("rank")
    target = contacts.row(3, named=True)
    emb = CountingEmbedder()
    res = run_ingest(s, embedder=emb, only_contacts=[target["contact_id"]], analyze=False)
    assert res["batches_processed"] == [target["batch"]]
    assert emb.texts == 0  # unchanged chunks keep their vectors
    emb = CountingEmbedder()
    res = run_ingest(s, embedder=emb, only_contacts=[target["contact_id"]], analyze=False, reembed=True)
    batch_chunks = _store_rows(s, "batch = ?", [target["batch"]])
    assert res["batches_processed"] == [target["batch"]]
    assert emb.texts == batch_chunks > 0  # --reembed: exactly that batch embedded again
    assert _store_rows(s) == first["chunks"]  # a rerun partition replaces, never duplicates
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        assert con.execute("SELECT count(*) - count(DISTINCT chunk_id) FROM chunks").fetchone()[0] == 0
    finally:
        con.close()


@pytest.mark.slow  # e2e: a re-ingest with another model
def test_model_change_reembeds_everything_and_never_mixes(tmp_path):
    archive = build_demo_archive(tmp_path / "archive", messages=500, seed=4)
    s = _settings(tmp_path / "home", archive)
    first = run_ingest(s, embedder=CountingEmbedder(), analyze=False)

    class Other(HashEmbedder):  # another model: other id, other dimension
        def __init__(self):
            super().__init__(dim=32)
            self.seen = []

        def embed(self, texts):
            self.seen.extend(texts)
            return super().embed(texts)

    other = Other()
    again = run_ingest(s, embedder=other, analyze=False)
    assert sorted(again["batches_processed"]) == sorted(first["batches_processed"])
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        stored = {t for (t,) in con.execute("SELECT embedding_text FROM chunks").fetchall()}
        assert sum(t in stored for t in other.seen) == again["chunks"] == first["chunks"]  # every chunk re-embedded
        assert con.execute("SELECT DISTINCT embedding_model FROM chunks").fetchall() == [("hash-32",)]
        assert duck.get_meta(con, "dim") == 32
        # the message lines too: with the new model, at its width
        assert duck.get_meta(con, "line_index")["embedding_model"] == "hash-32"
        assert con.execute("SELECT count(*), bool_and(octet_length(vectors) = lines * 32) FROM line_vectors"
                           ).fetchone() == (again["chunks"], True)
    finally:
        con.close()


def test_search_finds_and_routes(ingested):
    s, *_ = ingested
    emb = HashEmbedder(dim=64)
    out = run_search(s, "movies", embedder=emb, k=5)
    assert len(out["hits"]) == 5 and out["hits"][0]["text"]
    top = metadata.read_contacts(s.brb_db).sort("rank").row(0, named=True)
    first = top["display_name"].split()[0]
    routed = run_search(s, f"what did {top['display_name']} say about movies", embedder=emb, k=3)
    assert routed["routing"]["contact_ids"] == [top["contact_id"]]
    assert routed["hits"] and all(h["contact_id"] == top["contact_id"] for h in routed["hits"])
    assert first  # the routed query no longer names the contact
    assert top["display_name"] not in routed["routing"]["query"]


@pytest.mark.slow  # e2e: a second ingest after new messages
def test_incremental_new_messages_reembed_only_their_batch(tmp_path):
    archive = build_demo_archive(tmp_path / "archive", messages=800, seed=5)
    s = _settings(tmp_path / "home", archive)
    run_ingest(s, embedder=CountingEmbedder(), analyze=False)
    contacts = metadata.read_contacts(s.brb_db).sort("rank")
    target = contacts.filter(pl.col("kind") == "direct").row(2, named=True)
    msgs = pl.read_parquet(s.paths.messages).filter(pl.col("contact_id") == target["contact_id"])
    chat_guid = msgs["chat_id"][0].split(":", 1)[1]
    words = ["zanzibar snorkeling itinerary"] * 3 + ["booked the ferry to stone town"] * 3
    _append_messages(archive.chat_db, chat_guid, words, datetime(2019, 1, 5, 10, tzinfo=timezone.utc))
    batch_before = _store_rows(s, "batch = ?", [target["batch"]])
    emb = CountingEmbedder()
    res = run_ingest(s, embedder=emb, analyze=False)
    assert res["batches_processed"] == [target["batch"]]
    # only the windows touched by the 6 new messages are embedded, not the whole batch
    assert 0 < emb.chunk_texts(s) <= 4 < batch_before
    # and only their message lines (at most 8 to a window), not the batch's
    assert 0 < emb.texts - emb.chunk_texts(s) <= 4 * 8
    hits = run_search(s, "zanzibar ferry", embedder=HashEmbedder(dim=64), mode="lexical", k=3)["hits"]
    assert hits and hits[0]["contact_id"] == target["contact_id"]


@pytest.mark.slow  # e2e: forget then re-ingest
def test_forget_removes_contact_everywhere_and_stays_forgotten(tmp_path):
    from brb_pipeline.core.search.log import read_log
    from brb_pipeline.privacy.forget import forget_contacts

    archive = build_demo_archive(tmp_path / "archive", messages=800, seed=9)
    s = _settings(tmp_path / "home", archive)
    run_ingest(s, embedder=CountingEmbedder())
    contacts = metadata.read_contacts(s.brb_db).sort("rank")
    gone, kept = contacts.row(1, named=True), contacts.row(0, named=True)
    run_search(s, "hello", embedder=HashEmbedder(dim=64), contacts=[gone["contact_id"]], k=3)
    run_search(s, "hello", embedder=HashEmbedder(dim=64), contacts=[kept["contact_id"]], k=3)
    kept_rows = _store_rows(s, "contact_id = ?", [kept["contact_id"]])
    forget_contacts(s, [gone["contact_id"]])

    # raw storage, read directly
    con = sqlite3.connect(s.brb_db)
    assert con.execute("SELECT count(*) FROM contacts WHERE contact_id = ?", (gone["contact_id"],)).fetchone()[0] == 0
    con.close()
    assert _store_rows(s, "contact_id = ?", [gone["contact_id"]]) == 0
    assert _store_rows(s, "contact_id = ?", [kept["contact_id"]]) == kept_rows  # unrelated data untouched
    for p in (s.staging_dir).rglob("*.parquet"):
        df = pl.read_parquet(p)
        if "contact_id" in df.columns:
            assert gone["contact_id"] not in df["contact_id"].to_list(), p
        if "sender" in df.columns:
            assert not set(gone["handles"]) & set(df["sender"].drop_nulls().to_list()), p
    assert not s.snapshot_dir.exists()
    assert not (s.insights_dir / "map.html").exists()
    logged = read_log(s.brb_db, 50)
    assert logged and all(gone["contact_id"] not in json.dumps(r) for r in logged)
    # a later ingestion from the unchanged source does not bring them back
    run_ingest(s, embedder=CountingEmbedder(), analyze=False)
    assert gone["contact_id"] not in metadata.read_contacts(s.brb_db)["contact_id"].to_list()
    assert _store_rows(s, "contact_id = ?", [gone["contact_id"]]) == 0


def test_delete_all_leaves_nothing(tmp_path):
    from brb_pipeline.privacy.forget import delete_all

    archive = build_demo_archive(tmp_path / "archive", messages=300, seed=3)
    s = _settings(tmp_path / "home", archive)
    run_ingest(s, embedder=CountingEmbedder(), analyze=False)
    assert s.brb_db.exists() and s.duckdb_path.exists()
    delete_all(s)
    assert list(s.home.iterdir()) == []
    assert archive.chat_db.exists()  # the source is never touched


def test_unknown_bucket_and_orphans_counted(ingested):
    s, archive, *_ = ingested
    contacts = metadata.read_contacts(s.brb_db)
    if archive.counts.get("orphans", 0):
        assert UNKNOWN_CONTACT_ID in contacts["contact_id"].to_list()


def test_search_passages_are_distinct_with_context_outside_them(ingested):
    """Through the real store of an ingest: no two hits share a window's messages, each hit
    lists its merged chunks, --context adds only chunks outside the passage, and a filter still
    applies before top-k."""
    s, *_ = ingested
    emb = HashEmbedder(dim=64)
    out = run_search(s, "movies", embedder=emb, k=10, context=True)
    hits = out["hits"]
    assert len(hits) == 10
    for i, h in enumerate(hits):
        assert h["chunk_id"] == h["chunk_ids"][0]
        assert not set(c["chunk_id"] for c in h["context"]) & set(h["chunk_ids"])
        for e in hits[:i]:
            overlap = h["chat_id"] == e["chat_id"] and h["start"] <= e["end"] and e["start"] <= h["end"]
            assert not overlap, (h["chunk_ids"], e["chunk_ids"])
    unmerged = run_search(s, "movies", embedder=emb, k=10, merge=False)
    assert all(len(h["chunk_ids"]) == 1 for h in unmerged["hits"])
    assert out["merged"] >= 0 and "confident" in out and "top_similarity" in out
    top = metadata.read_contacts(s.brb_db).sort("rank").row(0, named=True)
    only = run_search(s, "movies", embedder=emb, k=10, contacts=[top["contact_id"]])
    assert only["hits"] and {h["contact_id"] for h in only["hits"]} == {top["contact_id"]}


def test_searcher_open_loads_the_model_beside_the_store_and_cleans_up_on_failure(ingested):
    from brb_pipeline.core.errors import BrbError
    from brb_pipeline.search.query import Searcher

    s, *_ = ingested
    with Searcher.open(s, load=lambda _s: HashEmbedder(dim=64)) as searcher:
        assert searcher.embedder.model_id == "hash-64" and searcher.refs
        assert searcher.search("movies", k=3, log=False)["hits"]

    def broken(_s):
        raise BrbError("model missing")

    with pytest.raises(BrbError, match="model missing"):
        Searcher.open(s, load=broken)
    con = duck.connect(s.duckdb_path)  # the read-only store of the failed open was closed
    con.close()
    with Searcher.open(s, mode="lexical", load=broken) as lexical:  # lexical needs no model
        assert lexical.embedder is None and lexical.search("movies", mode="lexical", k=3, log=False)["hits"]
