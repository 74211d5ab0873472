"""Per contact-batch stages: chunk the batch's messages, then embed the chunks to Parquet."""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from brb_pipeline.core import metadata
from brb_pipeline.core.chunking import CHUNK_FORMAT, CHUNK_SCHEMA, ChunkParams, chunk_messages
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.store import partition_path, write_partition
from brb_pipeline.pipeline import paths
from brb_pipeline.settings import Settings

log = logging.getLogger("brb")

EMBED_GROUP = 256  # chunks per embed() call: the unit of progress and cancellation


def chunk_params(s: Settings, document_prefix: str = "") -> ChunkParams:
    return ChunkParams(window=s.window, stride=s.stride, gap_s=s.conversation_gap_s, min_chars=s.min_chars,
                       document_prefix=document_prefix)


def batch_messages(s: Settings, batch: str) -> pl.DataFrame:
    """The messages of one batch, read with predicate push-down from the staging Parquet."""
    src = paths.messages(s)
    if not src.exists():
        raise StoreError(f"no parsed messages in {s.staging_dir}: run `brb ingest` first")
    return pl.scan_parquet(src).filter(pl.col("batch") == batch).collect()


def name_maps(s: Settings) -> tuple[dict[str, str], dict[str, str]]:
    """(contact_id -> display name, handle -> display name) from brb.db."""
    contacts = metadata.read_contacts(s.brb_db)
    by_contact: dict[str, str] = {}
    by_handle: dict[str, str] = {}
    for r in contacts.iter_rows(named=True):
        by_contact[r["contact_id"]] = r["display_name"]
        if r.get("kind") == "direct":
            for h in r.get("handles") or []:
                by_handle[h] = r["display_name"]
    return by_contact, by_handle


def configured_model_id(s: Settings) -> str:
    """The model id (name@weights-hash) the settings select, loading it once per process."""
    return _model_id(s.embedding_model, s.embedding_backend, s.max_tokens, s.token_budget)


@functools.lru_cache(maxsize=8)
def _model_id(name: str, backend: str, max_tokens: int, token_budget: int) -> str:
    from brb_pipeline.core.embedding import load_embedder

    return load_embedder(SimpleNamespace(embedding_model=name, embedding_backend=backend, max_tokens=max_tokens,
                                         token_budget=token_budget)).model_id


def embed_keys(s: Settings, fingerprints: dict[str, str], model_id: str | None = None) -> dict[str, str]:
    """batch -> what its embeddings depend on: messages, contact names, model and chunking.

    A batch whose key equals the one stored with its partition file needs no embedding.

    Args:
        model_id: the embedder's id (name@weights-hash), so new weights under the same name
            re-embed; defaults to the configured model's.
    """
    model_id = model_id or configured_model_id(s)
    contacts = metadata.read_contacts(s.brb_db)
    members: dict[str, list[str]] = {}
    for r in contacts.iter_rows(named=True):
        members.setdefault(r.get("batch") or "", []).append(f"{r['contact_id']}={r['display_name']}")
    settings_part = [model_id, CHUNK_FORMAT, str(s.max_tokens), str(s.window), str(s.stride),
                     str(s.conversation_gap_s), str(s.min_chars)]
    return {
        b: hashlib.sha1("|".join([fp, *settings_part, *sorted(members.get(b, []))]).encode()).hexdigest()[:24]
        for b, fp in fingerprints.items()
    }


def run_chunk(s: Settings, batch: str, document_prefix: str = "") -> dict[str, Any]:
    """Chunk one batch into ``staging/chunked/batch=<key>.parquet``."""
    t0 = time.perf_counter()
    msgs = batch_messages(s, batch)
    contact_names, sender_names = name_maps(s)
    chunks = chunk_messages(msgs, batch=batch, contact_names=contact_names, sender_names=sender_names,
                            params=chunk_params(s, document_prefix))
    paths.atomic_write_parquet(chunks, paths.chunks(s, batch))
    n = chunks.height
    return {
        "messages": msgs.height,
        "contacts": msgs["contact_id"].n_unique() if msgs.height else 0,
        "chunks": n,
        "avg_chunk_chars": round(float(chunks["content"].str.len_chars().mean()), 1) if n else 0.0,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def run_embed(
    s: Settings,
    batch: str,
    embedder: Any,
    *,
    progress: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    reuse: bool = True,
) -> dict[str, Any]:
    """Embed one batch's chunks into its Parquet partition, unless nothing changed.

    Skips the model entirely when the batch's messages, contact names, model and chunking
    settings are what its existing partition file was made from. Otherwise only chunks whose
    text is new are embedded; ``reuse=False`` re-embeds every chunk (``brb ingest --reembed``).
    """
    from brb_pipeline.core.errors import CancelledError

    t0 = time.perf_counter()
    row = metadata.get_batch(s.brb_db, batch) or {}
    key = embed_keys(s, {batch: row.get("fingerprint", "")}, embedder.model_id)[batch]
    out = partition_path(s.staging_dir, batch)
    if row.get("embedded_fingerprint") == key and row.get("embedding_model") and out.exists():
        if progress:
            progress(1, 1)
        return {"skipped": True, "reason": "unchanged since last embedding", "chunks": row.get("chunks") or 0,
                "embedding_model": row.get("embedding_model"), "seconds": round(time.perf_counter() - t0, 3)}
    src = paths.chunks(s, batch)
    chunks = pl.read_parquet(src) if src.exists() else pl.DataFrame(schema=CHUNK_SCHEMA)
    texts = chunks["embedding_text"].to_list()
    # Chunks whose text is unchanged keep their vectors from the previous partition file (same
    # model only): appending to a conversation re-embeds its last window and the new ones.
    config = embed_config(embedder)
    cached = previous_vectors(out, config) if reuse else {}
    emb = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    todo = []
    for i, t in enumerate(texts):
        v = cached.get(t)
        if v is not None and v.shape[0] == embedder.dim:
            emb[i] = v
        else:
            todo.append(i)
    for j in range(0, len(todo), EMBED_GROUP):
        if cancel and cancel():
            raise CancelledError(f"cancelled while embedding {batch}; earlier batches and the store are intact")
        idx = todo[j:j + EMBED_GROUP]
        emb[idx] = embedder.embed([texts[i] for i in idx])
        if progress:
            progress(min(j + EMBED_GROUP, len(todo)), len(todo))
    write_partition(s.staging_dir, batch, chunks, emb, embedder.model_id)
    _config_path(out).write_text(config)
    metadata.mark_embedded(s.brb_db, batch, key, embedder.model_id, chunks.height)
    secs = time.perf_counter() - t0
    if progress:
        progress(1, 1)
    return {
        "skipped": False,
        "chunks": chunks.height,
        "chunks_embedded": len(todo),
        "chunks_reused": chunks.height - len(todo),
        "dim": int(embedder.dim),
        "embedding_model": embedder.model_id,
        "seconds": round(secs, 3),
        "chunks_per_s": round(len(todo) / secs, 1) if secs > 0 and todo else 0.0,
    }



def embed_config(embedder: Any) -> str:
    """What a vector depends on besides the text: the model (name@weights) and the truncation."""
    return f"{embedder.model_id}|max_tokens={getattr(embedder, 'max_tokens', '')}"


def _config_path(partition: Path) -> Path:
    return partition.with_name(partition.name + ".embedcfg")


def previous_vectors(partition: Path, config: str) -> dict[str, np.ndarray]:
    """embedding_text -> vector from an existing partition file embedded with ``config``."""
    cfg = _config_path(partition)
    if not partition.exists() or not cfg.exists() or cfg.read_text() != config:
        return {}
    try:
        table = pq.read_table(partition, columns=["embedding_text", "embedding"])
    except (OSError, ValueError, pa.ArrowException):
        return {}  # a damaged file only costs re-embedding
    if table.num_rows == 0:
        return {}
    vecs = table.column("embedding").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    vecs = vecs.reshape(table.num_rows, -1).astype(np.float32, copy=False)
    return dict(zip(table.column("embedding_text").to_pylist(), vecs))
