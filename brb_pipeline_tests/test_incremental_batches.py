"""Incremental re-ingestion across contact batches: sticky batch assignment and vector reuse.

A contact that gains messages must move only itself (and the contact it pushes out of the top
tier), and chunks whose text is unchanged keep their vectors even when their contact moved to
another batch: only chunks with new text reach the embedder.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timezone

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from brb_pipeline.core import metadata
from brb_pipeline.core.contacts.batching import assign_batches
from brb_pipeline.core.embedding.models import HashEmbedder
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline.privacy import forget
from brb_pipeline.stages import embed, ingest
from brb_pipeline.stages.incremental import pending_work
from brb_pipeline.privacy.forget import forget_contacts
from brb_pipeline.stages.store import run_load
from brb_pipeline.orchestration.runner import run_ingest
from brb_pipeline.config.settings import Settings
from brb_pipeline_tests.helpers.pipeline import CountingEmbedder
from brb_pipeline_tests.helpers.pipeline import append_messages as _append_messages

# Small tiers so a demo archive spans several batches: 2 top batches of 1, rest batches of 2.
TIERS = dict(top_n=2, top_size=1, rest_size=2)


def _assign(counts: dict[str, int], previous: dict[str, str] | None = None, **tiers) -> dict[str, str]:
    stats = pl.DataFrame({"contact_id": list(counts), "messages": list(counts.values())})
    a = assign_batches(stats, **{**TIERS, **tiers}, previous=previous)
    return dict(zip(a["contact_id"], a["batch"]))


# a..f ranked by messages: a, b are the top tier (batch-000, batch-001), the rest go 2 a batch.
BASE = {"a": 60, "b": 50, "c": 40, "d": 30, "e": 20, "f": 10}
BASE_BATCHES = {"a": "batch-000", "b": "batch-001", "c": "batch-002", "d": "batch-002",
                "e": "batch-003", "f": "batch-003"}


@pytest.mark.parametrize(
    "counts, previous, tiers, expected",
    [
        # nothing changed: everybody keeps their batch
        (BASE, BASE_BATCHES, {}, BASE_BATCHES),
        # f jumps to rank 0: it takes b's top slot, b (pushed out of the top) takes f's rest slot
        ({**BASE, "f": 100}, BASE_BATCHES, {},
         {**BASE_BATCHES, "f": "batch-001", "b": "batch-003"}),
        # d gains messages but stays in the rest tier: nobody moves although ranks changed
        ({**BASE, "d": 45}, BASE_BATCHES, {}, BASE_BATCHES),
        # d removed, g new: g fills d's free slot instead of opening a batch
        ({**{k: v for k, v in BASE.items() if k != "d"}, "g": 5}, BASE_BATCHES, {},
         {**{k: v for k, v in BASE_BATCHES.items() if k != "d"}, "g": "batch-002"}),
        # g new and ranked mid-table, all batches full: a new key after the highest, no shifting
        ({**BASE, "g": 35}, BASE_BATCHES, {}, {**BASE_BATCHES, "g": "batch-004"}),
        # e and f removed: batch-003 disappears and its key is the next one opened
        ({**{k: v for k, v in BASE.items() if k not in "ef"}, "g": 5}, BASE_BATCHES, {},
         {"a": "batch-000", "b": "batch-001", "c": "batch-002", "d": "batch-002", "g": "batch-003"}),
        # rest batches shrink from 3 to 2: the busiest keep batch-002, e moves to the free slot
        (BASE, {"a": "batch-000", "b": "batch-001", "c": "batch-002", "d": "batch-002", "e": "batch-002",
                "f": "batch-003"}, {}, BASE_BATCHES),
        # the top tier grows to 3: c keeps batch-002 (now a top key), d (rest) may not, e/f stay
        (BASE, BASE_BATCHES, {"top_n": 3}, {**BASE_BATCHES, "d": "batch-004"}),
        # a key we did not make is ignored: a takes the free top key
        (BASE, {**BASE_BATCHES, "a": "weird"}, {}, BASE_BATCHES),
        # a top-tier key claimed by a rest contact does not count: c goes back to the rest tier
        ({**BASE, "c": 40}, {**BASE_BATCHES, "c": "batch-000", "a": "batch-002"}, {},
         {**BASE_BATCHES, "a": "batch-000", "c": "batch-002"}),
    ],
)
def test_sticky_assignment(counts, previous, tiers, expected):
    assert _assign(counts, previous, **tiers) == expected


@pytest.mark.parametrize("previous", [None, {}, {"nobody": "batch-000"}])
def test_without_previous_is_rank_order(previous):
    stats = pl.DataFrame({"contact_id": [f"c{i:03d}" for i in range(137)], "messages": list(range(137, 0, -1))})
    plain = assign_batches(stats, top_n=50, top_size=10, rest_size=50)
    assert assign_batches(stats, top_n=50, top_size=10, rest_size=50, previous=previous).equals(plain)
    # rank order: contact i has rank i; the top 50 ten to a batch, then 50 to a batch
    assert plain["batch"].to_list() == ([f"batch-{i // 10:03d}" for i in range(50)]
                                        + [f"batch-{5 + (i - 50) // 50:03d}" for i in range(50, 137)])


def test_rank_is_the_true_rank_and_the_empty_case():
    a = assign_batches(pl.DataFrame({"contact_id": ["x", "y", "z"], "messages": [1, 9, 5]}), **TIERS,
                       previous={"x": "batch-000", "y": "batch-002", "z": "batch-003"})
    assert a.rows() == [("y", "batch-000", 0), ("z", "batch-001", 1), ("x", "batch-002", 2)]
    empty = pl.DataFrame({"contact_id": [], "messages": []}, schema={"contact_id": pl.Utf8, "messages": pl.Int64})
    assert assign_batches(empty, **TIERS, previous={"x": "batch-000"}).height == 0


def test_random_histories_never_overfill_and_keep_whoever_fits():
    rng = random.Random(7)
    counts = {f"c{i:03d}": rng.randint(0, 500) for i in range(120)}
    tiers = dict(top_n=12, top_size=4, rest_size=9)
    top_batches = 3
    previous: dict[str, str] | None = None
    for _ in range(25):
        for cid in rng.sample(sorted(counts), 10):  # some contacts gain messages
            counts[cid] += rng.randint(1, 400)
        for cid in rng.sample(sorted(counts), 3):  # some vanish, some arrive
            del counts[cid]
        counts.update({f"n{rng.randrange(10**6):06d}": rng.randint(0, 500) for _ in range(3)})
        stats = pl.DataFrame({"contact_id": list(counts), "messages": list(counts.values())})
        a = assign_batches(stats, **tiers, previous=previous)
        ranked = sorted(counts, key=lambda c: (-counts[c], c))
        assert a["contact_id"].to_list() == ranked and a["rank"].to_list() == list(range(len(ranked)))
        index = {cid: int(b[6:]) for cid, b in zip(a["contact_id"], a["batch"])}
        sizes = Counter(index.values())
        for cid, rank in zip(a["contact_id"], a["rank"]):
            top = rank < tiers["top_n"]
            assert (index[cid] < top_batches) == top  # tier membership is exact
            assert sizes[index[cid]] <= (tiers["top_size"] if top else tiers["rest_size"])
            old = previous.get(cid) if previous else None
            if old and (int(old[6:]) < top_batches) == top:
                # a valid previous batch is kept (its batches never overflow, sizes are unchanged)
                assert index[cid] == int(old[6:])
        previous = dict(zip(a["contact_id"], a["batch"]))


def _vector_home(tmp_path):
    """Settings, an 8-d hash embedder, its config and an empty partitions folder."""
    s = Settings.load(tmp_path / "home", embedding_model="hash")
    emb = HashEmbedder(dim=8)
    chunks_dir = s.staging_dir / "chunks"
    chunks_dir.mkdir(parents=True)
    return s, emb, embed.embed_config(emb), chunks_dir


def _write_vectors(path, emb, texts, cfg, contact=None, row_group_size=None):
    """A partition-like file of ``texts`` and their vectors (and a contact_id column if given)."""
    cols = {} if contact is None else {"contact_id": [contact] * len(texts)}
    cols |= {"embedding_text": texts,
             "embedding": pa.FixedSizeListArray.from_arrays(pa.array(emb.embed(texts).reshape(-1)), 8)}
    pq.write_table(pa.table(cols), path, row_group_size=row_group_size)
    path.with_name(path.name + ".embedcfg").write_text(cfg)


def test_other_vectors_reads_matching_rows_of_other_batches_and_retired(tmp_path):
    s, emb, config, chunks_dir = _vector_home(tmp_path)

    def write(path, texts, cfg):
        _write_vectors(path, emb, texts, cfg, row_group_size=3)  # several row groups: rows map across them

    write(chunks_dir / "batch=batch-001.parquet", [f"t{i}" for i in range(10)], config)
    write(chunks_dir / "batch=batch-002.parquet", ["other model"], "another|max_tokens=1")
    write(chunks_dir / "batch=batch-000.parquet", ["own partition"], config)
    retired = embed.retire_vectors(s, "batch-003", dict(zip(["gone", "kept"], emb.embed(["gone", "kept"]))),
                                   ["kept"], config)
    assert retired == 1 and s.paths.retired("batch-003").exists()
    wanted = {"t1", "t7", "t8", "gone", "own partition", "other model", "nowhere"}
    found = embed.other_vectors(s, "batch-000", wanted, config, 8)
    assert sorted(found) == ["gone", "t1", "t7", "t8"]
    for text, v in found.items():
        np.testing.assert_array_equal(v, emb.embed([text])[0])
    assert embed.other_vectors(s, "batch-000", wanted, config, 16) == {}  # another dimension
    assert forget.drop_retired(s) == 1 and not s.paths.retired_dir.exists()


def test_other_vectors_searches_only_partitions_holding_the_batch_contacts(tmp_path):
    s, emb, config, chunks_dir = _vector_home(tmp_path)
    for batch, contact, texts in (("batch-001", "ann", ["a0", "a1"]), ("batch-002", "bob", ["b0", "same"]),
                                  ("batch-003", "cy", ["same"])):
        _write_vectors(chunks_dir / f"batch={batch}.parquet", emb, texts, config, contact=contact)
    wanted = {"a1", "b0", "same"}
    assert sorted(embed.other_vectors(s, "batch-000", wanted, config, 8)) == ["a1", "b0", "same"]
    assert sorted(embed.other_vectors(s, "batch-000", wanted, config, 8, {"bob"})) == ["b0", "same"]
    assert sorted(embed.other_vectors(s, "batch-000", wanted, config, 8, {"ann", "cy"})) == ["a1", "same"]
    assert embed.other_vectors(s, "batch-000", wanted, config, 8, {"dee"}) == {}


# End to end ---------------------------------------------------------------------------------


def _settings(home, archive):
    return Settings.load(home, chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir,
                         embedding_model="hash", top_contacts=2, top_batch_size=1, rest_batch_size=2)


def _partitions(s) -> pl.DataFrame:
    """(batch, contact_id, embedding_text, embedding (n, 64)) of every current partition."""
    keys = [b["batch"] for b in metadata.all_batches(s.brb_db)]
    frames = [pl.read_parquet(s.paths.partition(b),
                              columns=["batch", "contact_id", "embedding_text", "embedding"]) for b in keys]
    return pl.concat(frames)


def _jump_to_the_top(s, archive) -> tuple[dict, dict]:
    """Append enough messages to the lowest-ranked direct contact to make it rank 0.

    Returns:
        (the jumper's contact row, the row of the contact it pushes out of the top tier).
    """
    contacts = metadata.read_contacts(s.brb_db).sort("rank")
    jumper = contacts.filter(pl.col("kind") == "direct").row(-1, named=True)
    leaver = contacts.row(s.top_contacts - 1, named=True)
    assert jumper["rank"] >= s.top_contacts + 2  # well inside the rest tier: many ranks shift
    msgs = pl.read_parquet(s.paths.messages).filter(pl.col("contact_id") == jumper["contact_id"])
    chat_guid = msgs["chat_id"][0].split(":", 1)[1]
    n = int(contacts["messages"].max()) + 20
    texts = [f"day {i} of the zanzibar trip, snorkeling log number {i}" for i in range(n)]
    _append_messages(archive.chat_db, chat_guid, texts, datetime(2024, 6, 1, 9, tzinfo=timezone.utc))
    return jumper, leaver


@pytest.mark.slow  # e2e: two full ingests
def test_reingest_embeds_only_new_text_when_contacts_change_batch(tmp_path):
    archive = build_demo_archive(tmp_path / "archive", messages=800, seed=5)
    s = _settings(tmp_path / "home", archive)
    run_ingest(s, embedder=CountingEmbedder(), analyze=False)
    before = _partitions(s)
    was = dict(metadata.read_contacts(s.brb_db).select("contact_id", "batch").iter_rows())
    jumper, leaver = _jump_to_the_top(s, archive)

    emb = CountingEmbedder()
    res = run_ingest(s, embedder=emb, analyze=False)
    after = _partitions(s)
    contacts = metadata.read_contacts(s.brb_db)
    now = dict(contacts.select("contact_id", "batch").iter_rows())
    assert now[jumper["contact_id"]] == leaver["batch"]  # the jumper took the freed top slot
    assert now[leaver["contact_id"]] == jumper["batch"]  # and the leaver the jumper's rest slot
    assert {c for c in now if now[c] != was[c]} == {jumper["contact_id"], leaver["contact_id"]}
    assert sorted(res["batches_processed"]) == sorted({jumper["batch"], leaver["batch"]})
    # rank-order batches (no previous assignment) would have moved every contact whose rank changed
    plain = assign_batches(contacts.select("contact_id", "messages"), top_n=2, top_size=1, rest_size=2)
    assert sum(was[c] != b for c, b in plain.select("contact_id", "batch").iter_rows()) > 2

    new_text = ~after["embedding_text"].is_in(before["embedding_text"].implode())
    moved_rows = after.filter(~new_text & pl.col("contact_id").is_in([jumper["contact_id"], leaver["contact_id"]]))
    assert moved_rows.height > 0  # chunks that changed batch with unchanged text...
    assert emb.chunk_texts(s) == int(new_text.sum()) > 0  # ...were not embedded again: only new text was
    assert emb.texts - emb.chunk_texts(s) <= 8 * int(new_text.sum())  # and the new chunks' message lines only
    fresh = HashEmbedder(dim=64).embed(after["embedding_text"].to_list())
    np.testing.assert_allclose(after["embedding"].to_numpy(), fresh, rtol=0, atol=1e-6)
    assert not s.paths.retired_dir.exists()  # the load cleared the cache of retired vectors


def _stages(s, emb) -> dict[str, dict]:
    """ingest -> changed batches chunked and embedded, without the store load; metadata per batch."""
    ingest.run_snapshot(s)
    ingest.run_parse(s)
    ingest.run_contacts(s)
    keys, changed, _ = ingest.run_batches(s, emb.model_id)
    todo = pending_work(s, emb.model_id)["to_embed"]  # what the runner runs
    # the changed batches run_batches reports (display metadata) plus those without a partition
    assert todo == sorted(set(changed) | {b for b in keys if not s.paths.partition(b).exists()})
    out = {}
    for b in todo:
        embed.run_chunk(s, b, emb.document_prefix)
        out[b] = embed.run_embed(s, b, emb)
    return out


def test_moved_vectors_come_from_other_batches_and_retired_files_and_forget_clears_them(tmp_path):
    archive = build_demo_archive(tmp_path / "archive", messages=800, seed=5)
    s = _settings(tmp_path / "home", archive)
    _stages(s, CountingEmbedder())
    run_load(s)
    before = _partitions(s)
    jumper, leaver = _jump_to_the_top(s, archive)

    emb = CountingEmbedder()
    metas = _stages(s, emb)
    after = _partitions(s)
    assert sorted(metas) == sorted({jumper["batch"], leaver["batch"]})
    new_text = ~after["embedding_text"].is_in(before["embedding_text"].implode())
    moved = after.filter(~new_text & pl.col("contact_id").is_in([jumper["contact_id"], leaver["contact_id"]]))
    assert sum(m["chunks_embedded"] for m in metas.values()) == emb.texts == int(new_text.sum())
    assert sum(m["chunks_reused_other_batches"] for m in metas.values()) == moved.height > 0
    # The leaver's batch (lower key) is rewritten first: the leaver's vectors are retired there
    # and found by the jumper's old batch, embedded after it.
    assert leaver["batch"] < jumper["batch"] and metas[leaver["batch"]]["vectors_retired"] > 0
    leaver_rows = before.filter(pl.col("contact_id") == leaver["contact_id"])
    retired = pl.read_parquet(s.paths.retired(leaver["batch"]))
    assert set(leaver_rows["embedding_text"]) <= set(retired["embedding_text"])

    report = forget_contacts(s, [leaver["contact_id"]])
    assert report["retired_removed"] == 1 and not s.paths.retired_dir.exists()
    # no staging Parquet (partitions, chunked, retired, parsed) keeps the leaver's chunk text
    gone = set(leaver_rows["embedding_text"])
    assert gone
    for p in s.staging_dir.rglob("*.parquet"):
        if "embedding_text" in pq.read_schema(p).names:
            assert not gone & set(pl.read_parquet(p, columns=["embedding_text"])["embedding_text"]), p


@pytest.mark.slow  # e2e: ingest, forget and re-ingest
def test_stale_partitions_are_filtered_by_forget_and_pruned_at_load(tmp_path):
    """Files of a batch key that no longer exists still hold message text: forget filters them
    too, and the next load deletes them."""
    import shutil

    archive = build_demo_archive(tmp_path / "archive", messages=800, seed=5)
    s = _settings(tmp_path / "home", archive)
    run_ingest(s, embedder=CountingEmbedder(), analyze=False)
    person = metadata.read_contacts(s.brb_db).filter(pl.col("kind") == "direct").row(0, named=True)
    stale = "batch-099"  # as a batch that was emptied (its contacts left) would leave behind
    for src, dst in ((s.paths.partition(person["batch"]), s.paths.partition(stale)),
                     (s.paths.chunks(person["batch"]), s.paths.chunks(stale))):
        shutil.copy(src, dst)
    texts = set(pl.read_parquet(s.paths.chunks(stale)).filter(pl.col("contact_id") == person["contact_id"])["content"])
    assert texts

    forget_contacts(s, [person["contact_id"]])
    for p in (s.paths.partition(stale), s.paths.chunks(stale)):
        assert not texts & set(pl.read_parquet(p, columns=["content"])["content"]), p

    res = run_load(s)
    assert res["staged_files_pruned"] >= 2
    assert not s.paths.partition(stale).exists() and not s.paths.chunks(stale).exists()
    assert s.paths.partition(person["batch"]).exists()  # live batches are kept
