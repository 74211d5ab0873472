"""The naive embedding + write path that ``bench_e2e.py`` compares the pipeline's default path to.

What a straightforward tool does with the same chunks:

* **Embedding**: chunks in their natural (unsorted) order, fixed batches of 32, each padded to
  its longest row (truncated at ``max_tokens``), through the stock ``mlx-embeddings`` BERT
  (``mlx_embeddings.utils.load``) and its mean pooling + L2 norm (``text_embeds``). No length
  sorting, no token budget, no packed forward.
* **Writing**: the HNSW index is created on the empty table *before* inserting (so DuckDB
  maintains the graph on every insert), rows go in with ``executemany`` one batch of 32 at a
  time, and the BM25 index is rebuilt after every insert batch (DuckDB's FTS index is a static
  snapshot, so a tool that wants new rows searchable right away must rebuild it).

``MLXEmbedder(backend="reference")`` cannot stand in for the naive path: it runs the same stock
model but still length-sorts and cuts batches by token budget, so the loop is written out here.

The same process has already loaded OpenBLAS for MLX (:mod:`brb_pipeline.core.embedding.blas`), so the
baseline gets fast GEMMs too: the comparison is about batching and write strategy, not the BLAS.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from brb_pipeline.core.store import duck
from brb_pipeline.core.store.index import FTS_PARAMS, HNSW_INDEX, lexical_extra

BATCH = 32

_DDL = (
    "CREATE TABLE chunks ("
    "chunk_id VARCHAR NOT NULL, batch VARCHAR NOT NULL, contact_id VARCHAR, chat_id VARCHAR, "
    "channel VARCHAR, conversation INTEGER, position INTEGER, "
    "first_message_id VARCHAR, last_message_id VARCHAR, "
    "start_ts TIMESTAMPTZ, end_ts TIMESTAMPTZ, message_count INTEGER, "
    "content VARCHAR, embedding_text VARCHAR, lexical_extra VARCHAR, "
    "embedding FLOAT[{dim}] NOT NULL, embedding_model VARCHAR NOT NULL)"
)
_COLUMNS = [
    "chunk_id", "batch", "contact_id", "chat_id", "channel", "conversation", "position",
    "first_message_id", "last_message_id", "start_ts", "end_ts", "message_count",
    "content", "embedding_text",
]  # fmt: skip


class NaiveMLXEmbedder:
    """Stock ``mlx-embeddings`` BERT, fixed batches in the order given, padded per batch.

    Args:
        model_dir: a local Hugging Face BERT directory (config, safetensors, tokenizer).
        batch_size: rows per forward.
        max_tokens: truncation length (tokens).
    """

    def __init__(self, model_dir: str | Path, *, batch_size: int = BATCH, max_tokens: int = 256) -> None:
        from brb_pipeline.core.embedding.blas import ensure_fast_blas

        ensure_fast_blas()
        import mlx.core as mx
        from mlx_embeddings.utils import load

        self._mx = mx
        self.model, wrapper = load(str(model_dir))
        self.tokenizer = getattr(wrapper, "_tokenizer", wrapper)
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.dim = int(self.model.config.hidden_size)
        self.model_id = f"naive:{Path(model_dir).name}"
        self.tokens = 0  # real (unpadded) tokens embedded
        self.padded_tokens = 0  # rows x padded length, what the forward actually computed

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` in fixed batches of ``batch_size``, in order.

        Returns:
            ``(len(texts), dim)`` float32, L2-normalized.
        """
        mx = self._mx
        out = []
        for i in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(texts[i:i + self.batch_size], padding=True, truncation=True,
                                 max_length=self.max_tokens, return_tensors="np")
            mask = enc["attention_mask"]
            self.tokens += int(mask.sum())
            self.padded_tokens += int(mask.size)
            res = self.model(mx.array(enc["input_ids"]), attention_mask=mx.array(mask),
                             token_type_ids=mx.array(enc.get("token_type_ids", np.zeros_like(mask))))
            emb = res.text_embeds
            mx.eval(emb)
            out.append(np.array(emb, dtype=np.float32))
        return np.concatenate(out) if out else np.zeros((0, self.dim), dtype=np.float32)


class FixedBatches:
    """Any embedder (the hash one in tests) called in fixed batches of ``batch_size``, in order."""

    def __init__(self, embedder: Any, batch_size: int = BATCH) -> None:
        self.inner = embedder
        self.batch_size = batch_size
        self.dim = int(embedder.dim)
        self.model_id = f"naive:{embedder.model_id}"
        self.tokens = 0
        self.padded_tokens = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        parts = [np.asarray(self.inner.embed(texts[i:i + self.batch_size]), dtype=np.float32)
                 for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)


def naive_embed(embedder: Any, texts: list[str]) -> tuple[np.ndarray, float]:
    """Returns ``((n, dim) float32 embeddings, seconds)``."""
    t0 = time.perf_counter()
    emb = embedder.embed(texts)
    return emb, time.perf_counter() - t0


def naive_write(db_path: Path, chunks: pl.DataFrame, embeddings: np.ndarray, model_id: str, *,
                batch_size: int = BATCH, m: int = 16, ef_construction: int = 128) -> dict[str, float]:
    """Insert ``chunks`` row by row (``executemany`` per batch) under a live HNSW index, rebuilding
    the BM25 index after every batch.

    Args:
        db_path: a new DuckDB file.
        chunks: the chunk frame (``core.chunking.CHUNK_SCHEMA`` columns), ``n`` rows.
        embeddings: ``(n, dim)`` float32, row i embeds ``chunks[i]``.
        model_id: stored in each row.

    Returns:
        Seconds: ``insert_hnsw`` (executemany with HNSW maintained), ``fts_rebuilds`` (all BM25
        rebuilds), ``checkpoint``, ``total``, and ``fts_rebuild_count``.
    """
    dim = int(embeddings.shape[1])
    con = duck.connect(db_path)
    t_all = time.perf_counter()
    try:
        con.execute(_DDL.format(dim=dim))
        con.execute(f"CREATE INDEX {HNSW_INDEX} ON chunks USING HNSW (embedding) "
                    f"WITH (metric = 'cosine', M = {int(m)}, ef_construction = {int(ef_construction)})")
        rows = chunks.select(_COLUMNS).rows()
        placeholders = ", ".join(["?"] * (len(_COLUMNS) + 3))
        sql = f"INSERT INTO chunks ({', '.join(_COLUMNS)}, lexical_extra, embedding, embedding_model) VALUES ({placeholders})"
        p = FTS_PARAMS
        ignore = p["ignore"].replace("'", "''")
        fts_sql = (
            "PRAGMA create_fts_index('chunks', 'chunk_id', 'content', 'lexical_extra', "
            f"stemmer = '{p['stemmer']}', stopwords = '{p['stopwords']}', ignore = '{ignore}', "
            f"strip_accents = {p['strip_accents']}, lower = {p['lower']}, overwrite = 1)"
        )
        t_insert = t_fts = 0.0
        rebuilds = 0
        for i in range(0, len(rows), batch_size):
            batch = [(*r, lexical_extra(r[12]), embeddings[i + j].tolist(), model_id)
                     for j, r in enumerate(rows[i:i + batch_size])]
            t = time.perf_counter()
            con.executemany(sql, batch)
            t_insert += time.perf_counter() - t
            t = time.perf_counter()
            con.execute(fts_sql)
            t_fts += time.perf_counter() - t
            rebuilds += 1
        t = time.perf_counter()
        con.execute("CHECKPOINT")
        t_ckpt = time.perf_counter() - t
        stored = int(con.execute("SELECT count(*) FROM chunks").fetchone()[0])
    finally:
        con.close()
    if stored != chunks.height:
        raise RuntimeError(f"baseline stored {stored} of {chunks.height} chunks")
    return {"insert_hnsw": round(t_insert, 3), "fts_rebuilds": round(t_fts, 3), "checkpoint": round(t_ckpt, 3),
            "total": round(time.perf_counter() - t_all, 3), "fts_rebuild_count": rebuilds, "rows": stored}
