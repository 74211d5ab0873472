"""Parent-child retrieval: the message-line vectors kept in step with the chunks
(core/store/line_index.py), and hybrid search re-ranking its candidates by their best line
(core/search/lines.py), on a real DuckDB store, from SQL and from memory alike."""

from __future__ import annotations

import numpy as np
import pytest

from brb_pipeline.core.embedding.hashing import HashEmbedder
from brb_pipeline.core.search import lines
from brb_pipeline.core.search.hybrid import search
from brb_pipeline.core.search.resident import Resident
from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.store import duck, index
from brb_pipeline.core.store.compact import compact_without
from brb_pipeline.core.store.duck import get_meta, set_meta
from brb_pipeline.core.store import line_index
from brb_pipeline.core.store.line_index import (LINE_KEY_INDEX, LINE_VECTORS, child_texts, dequantize, fetch_sql,
                                                index_lines, line_index_due, present, quantize, save_for_resume)
from brb_pipeline_tests.helpers.store import DIM, make_chunks

MODEL = "m@1"


class _Embedder(HashEmbedder):
    """Hashed n-grams under the store's model id; counts the texts it is asked to embed."""

    def __init__(self) -> None:
        super().__init__(dim=DIM)
        self.model_id = MODEL
        self.asked: list[str] = []

    def embed(self, texts):
        self.asked.extend(texts)
        return super().embed(texts)


def _window(i: int, contact: str) -> str:
    lines_ = [f"{contact.title()}: filler talk number {i} {j} about nothing much" for j in range(7)]
    if i == 5:
        lines_[3] = f"{contact.title()}: the pottery fair in Leeds was on Saturday"
    return "\n".join([f"Conversation with {contact.title()}, 2024-01-0{1 + i % 9}", *lines_])


def _store(tmp_path, n=12):
    emb = _Embedder()
    paths = {}
    for b, contact in (("batch-001", "ann"), ("batch-002", "bob")):
        texts = [_window(i, contact) for i in range(n)]
        frame = make_chunks(b, contact, n, texts=texts)
        vecs = emb.embed(texts)
        paths[b] = store.write_partition(tmp_path / "st", b, frame, vecs, MODEL)
    emb.asked.clear()
    con = duck.connect(tmp_path / "brb.duckdb")
    store.load_partitions(con, paths)
    index.build_indexes(con, m=8, ef_construction=64)
    return con, emb


def _has_key_index(con) -> bool:
    return con.execute("SELECT count(*) FROM duckdb_indexes() WHERE index_name = ?", [LINE_KEY_INDEX]).fetchone()[0] == 1


def _never():
    raise AssertionError("the embedder was asked for with nothing to embed")


def test_child_texts_put_the_header_above_each_line():
    assert child_texts("Conversation with Ann, 2024-01-01\nAnn: hi\n\nBob: yo") == [
        "Conversation with Ann, 2024-01-01\nAnn: hi", "Conversation with Ann, 2024-01-01\nBob: yo"]
    assert child_texts("Conversation with Ann") == [] and child_texts(None) == []


def test_int8_vectors_keep_the_cosine_order():
    rng = np.random.default_rng(1)
    v = rng.standard_normal((200, DIM)).astype(np.float32)
    q = rng.standard_normal(DIM).astype(np.float32)
    back = dequantize(quantize(v), DIM)
    assert back.shape == (200, DIM)
    exact = (v / np.linalg.norm(v, axis=1, keepdims=True)) @ (q / np.linalg.norm(q))
    approx = back @ (q / np.linalg.norm(q))
    assert np.max(np.abs(exact - approx)) < 0.01
    assert np.argmax(exact) == np.argmax(approx)


def test_lines_are_embedded_once_and_kept_in_step_with_the_chunks(tmp_path):
    con, emb = _store(tmp_path)
    assert line_index_due(con) and not present(con)
    out = index_lines(con, lambda: emb)
    assert out["line_chunks"] == 24 and present(con) and not line_index_due(con)
    assert out["lines_embedded"] == len(emb.asked) == len(set(emb.asked)) == 24 * 7
    assert con.execute(f"SELECT sum(lines), min(octet_length(vectors)) FROM {LINE_VECTORS}").fetchone() == (
        24 * 7, 7 * DIM)
    assert _has_key_index(con)
    ids = ["chat-ann:1", "chat-bob:2", "no such chunk", "it's"]  # a quote in an id is a literal, not SQL
    assert sorted(r[0] for r in con.execute(fetch_sql(ids)).fetchall()) == ["chat-ann:1", "chat-bob:2"]
    assert con.execute(fetch_sql([])).fetchall() == []
    # nothing changed: nothing embedded, the embedder never loaded
    assert index_lines(con, _never)["lines_embedded"] == 0
    # a chunk gone and a chunk whose text grew: one row deleted, one embedded again
    con.execute("DELETE FROM chunks WHERE chunk_id = 'chat-bob:3'")
    con.execute("UPDATE chunks SET embedding_text = embedding_text || '\nAnn: one more line' "
                "WHERE chunk_id = 'chat-ann:2'")
    assert line_index_due(con)
    emb.asked.clear()
    out = index_lines(con, lambda: emb)
    assert out["line_chunks"] == 23 and sorted(set(emb.asked)) == sorted(set(child_texts(
        con.execute("SELECT embedding_text FROM chunks WHERE chunk_id = 'chat-ann:2'").fetchone()[0])))
    ids = {r[0] for r in con.execute(f"SELECT chunk_id FROM {LINE_VECTORS}").fetchall()}
    assert ids == {r[0] for r in con.execute("SELECT chunk_id FROM chunks").fetchall()}
    # another model in the store: every line again
    set_meta(con, "embedding_model", "other@2")
    assert line_index_due(con) and not present(con)
    other = _Embedder()
    other.model_id = "other@2"
    assert index_lines(con, lambda: other)["lines_embedded"] == 23 * 7 + 1  # ann:2 has an eighth line
    assert get_meta(con, "line_index")["embedding_model"] == "other@2"


def test_an_embedder_of_another_model_writes_nothing(tmp_path):
    con, _ = _store(tmp_path)
    wrong = _Embedder()
    wrong.model_id = "not-the-store's@9"
    out = index_lines(con, lambda: wrong)
    assert out["lines_skipped"] and out["lines_embedded"] == 0 and not wrong.asked
    assert con.execute(f"SELECT count(*) FROM {LINE_VECTORS}").fetchone()[0] == 0 and line_index_due(con)


def test_forgetting_a_contact_leaves_none_of_its_line_vectors(tmp_path):
    con, emb = _store(tmp_path)
    index_lines(con, lambda: emb)
    con.close()
    assert compact_without(tmp_path / "brb.duckdb", ["bob"]) == 12
    con = duck.connect(tmp_path / "brb.duckdb", read_only=True)
    ids = [r[0] for r in con.execute(f"SELECT chunk_id FROM {LINE_VECTORS} ORDER BY chunk_id").fetchall()]
    assert ids == [f"chat-ann:{i}" for i in sorted(range(12), key=str)]
    assert present(con) and not line_index_due(con) and _has_key_index(con)


class _Interrupt(Exception):
    pass


class _Stopping(_Embedder):
    """Raises on its ``stop_at``-th call (a cancellation half-way through the lines)."""

    def __init__(self, stop_at: int) -> None:
        super().__init__()
        self.calls, self.stop_at = 0, stop_at

    def embed(self, texts):
        self.calls += 1
        if self.calls == self.stop_at:
            raise _Interrupt
        return super().embed(texts)


def _rows(con) -> dict:
    return {r[0]: r[1:] for r in con.execute(f"SELECT chunk_id, text_md5, lines, vectors FROM {LINE_VECTORS}").fetchall()}


def test_an_interrupted_line_embedding_resumes_from_the_kept_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(line_index, "_CHUNKS_PER_BATCH", 4)
    clean, emb = _store(tmp_path / "clean")
    index_lines(clean, lambda: emb)
    want = _rows(clean)
    clean.close()
    con, _ = _store(tmp_path / "run")
    stopping = _Stopping(stop_at=3)
    with pytest.raises(_Interrupt):
        index_lines(con, lambda: stopping)
    done = _rows(con)
    assert len(done) == 8  # two batches of four chunks were in when it stopped
    resume = tmp_path / "brb.duckdb.lines"
    assert save_for_resume(con, resume) == 8 and resume.exists()
    assert save_for_resume(con, resume) == 0  # kept once: a second discard adds nothing
    # rows the published store holds as well (same texts, same model) are not kept
    assert save_for_resume(con, tmp_path / "other.lines", published=tmp_path / "clean" / "brb.duckdb") == 0
    assert not (tmp_path / "other.lines").exists()  # with nothing to take, no file is left behind
    # the next run's copy: the chunks again (one of the kept ones has grown since), no line rows
    con.execute(f"DROP TABLE {LINE_VECTORS}")
    grown = sorted(done)[0]
    con.execute("UPDATE chunks SET embedding_text = embedding_text || '\nAnn: later' WHERE chunk_id = ?", [grown])
    fresh = _Embedder()
    out = index_lines(con, lambda: fresh, resume=resume)
    assert out["lines_resumed"] == 7 and out["line_chunks"] == 24 and not resume.exists()
    kept_texts = {t for cid in done if cid != grown for t in child_texts(
        con.execute("SELECT embedding_text FROM chunks WHERE chunk_id = ?", [cid]).fetchone()[0])}
    assert len(kept_texts) == 7 * 7 and not kept_texts & set(fresh.asked)  # (this fixture's lines are all distinct)
    assert len(fresh.asked) == 24 * 7 - 7 * 7 + 1  # the rest, and the grown chunk's eight lines
    got = _rows(con)
    assert {c: v for c, v in got.items() if c != grown} == {c: v for c, v in want.items() if c != grown}
    assert got[grown][0] != want[grown][0]  # the grown chunk was embedded for its new text


def test_kept_rows_of_another_model_or_a_damaged_file_are_not_taken(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(line_index, "_CHUNKS_PER_BATCH", 4)
    con, _ = _store(tmp_path)
    with pytest.raises(_Interrupt):
        index_lines(con, lambda: _Stopping(stop_at=2))
    resume = tmp_path / "brb.duckdb.lines"
    assert save_for_resume(con, resume) == 4
    con.execute(f"DROP TABLE {LINE_VECTORS}")
    set_meta(con, "embedding_model", "other@2")  # the store moved to another model meanwhile
    other = _Embedder()
    other.model_id = "other@2"
    assert index_lines(con, lambda: other, resume=resume)["lines_resumed"] == 0 and not resume.exists()
    assert len(other.asked) == 24 * 7
    # a resume file that is not a database: logged, deleted, every line embedded
    resume.write_bytes(b"\x00not a database" * 100)
    con.execute(f"DROP TABLE {LINE_VECTORS}")
    other.asked.clear()
    with caplog.at_level("WARNING"):
        out = index_lines(con, lambda: other, resume=resume)
    assert out["lines_resumed"] == 0 and out["line_chunks"] == 24 and len(other.asked) == 24 * 7
    assert not resume.exists() and "were not read" in caplog.text


def test_line_orders_rank_windows_by_their_best_line():
    q = np.eye(4, dtype=np.float32)[0]
    vecs = {"a": np.eye(4, dtype=np.float32)[[1, 2]], "b": np.eye(4, dtype=np.float32)[[1, 0]],
            "d": np.array([[0.6, 0.8, 0, 0]], np.float32)}
    # c has no line vectors; b holds the query's direction in one line; a in none
    assert lines.line_vector_order(["a", "b", "c", "d"], vecs, q) == ["b", "d", "a"]
    assert lines.line_vector_order(["d", "a"], {"a": vecs["a"], "d": np.zeros((0, 4), np.float32)}, q) == ["a"]
    fused = [("a", 0.9), ("b", 0.8), ("c", 0.7)]
    assert lines.rerank(fused, []) == fused and lines.rerank(fused, ["c"], weight=0) == fused
    # the default: the line order at half the fused order's weight (RRF k = 60) lifts its best
    # window over a two-place gap; a far smaller weight does not
    assert lines.WEIGHT == 0.5
    assert [c for c, _ in lines.rerank(fused, ["b"])] == ["b", "a", "c"]
    assert [c for c, _ in lines.rerank(fused, ["c"])] == ["c", "a", "b"]
    assert [c for c, _ in lines.rerank(fused, ["c"], weight=0.01)] == ["a", "b", "c"]
    assert {c for c, _ in lines.rerank(fused, ["zz", "c"])} == {"a", "b", "c"}  # never adds a window


def test_hybrid_search_reranks_by_lines_the_same_from_sql_and_memory(tmp_path):
    con, emb = _store(tmp_path)
    q = "pottery fair Leeds Saturday"
    vec = emb.embed_query(q) if hasattr(emb, "embed_query") else emb.embed([q])[0]
    before = search(con, query_text=q, query_vec=vec, mode="hybrid", k=5)
    assert not before.lines_reranked
    index_lines(con, lambda: emb)
    after = search(con, query_text=q, query_vec=vec, mode="hybrid", k=5)
    held = search(con, query_text=q, query_vec=vec, mode="hybrid", k=5, resident=Resident.load(con))
    assert after.lines_reranked and held.lines_reranked
    assert [h.chunk_id for h in after.hits] == [h.chunk_id for h in held.hits]
    assert [h.score for h in after.hits] == pytest.approx([h.score for h in held.hits], abs=1e-9)
    assert {after.hits[0].chunk_id, after.hits[1].chunk_id} == {"chat-ann:5", "chat-bob:5"}
    for mode in ("vector", "lexical"):  # the single modes stay themselves
        kw = dict(query_text=q, query_vec=vec if mode == "vector" else None, mode=mode, k=5)
        assert not search(con, **kw).lines_reranked


def test_a_damaged_line_row_is_left_out_and_search_still_answers(tmp_path):
    con, emb = _store(tmp_path)
    index_lines(con, lambda: emb)
    con.execute(f"UPDATE {LINE_VECTORS} SET vectors = '\\x01\\x02\\x03'::BLOB WHERE chunk_id = 'chat-ann:5'")
    q = "pottery fair Leeds Saturday"
    vec = emb.embed([q])[0]
    sql = search(con, query_text=q, query_vec=vec, mode="hybrid", k=24, merge=False)
    held = search(con, query_text=q, query_vec=vec, mode="hybrid", k=24, merge=False, resident=Resident.load(con))
    assert sql.lines_reranked and held.lines_reranked
    assert [h.chunk_id for h in sql.hits] == [h.chunk_id for h in held.hits]
    assert "chat-ann:5" in [h.chunk_id for h in sql.hits]  # still a candidate, ranked by its window alone
