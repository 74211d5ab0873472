"""Per contact-batch stages: chunk the batch's messages, then embed the chunks to Parquet."""

from __future__ import annotations

import dataclasses

import hashlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from brb_pipeline.core import faults, metadata
from brb_pipeline.core.chunking import CHUNK_FORMAT, CHUNK_SCHEMA, ChunkParams, chunk_messages, time_zone_key
from brb_pipeline.core.crypto import files
from brb_pipeline.core.errors import CancelledError, StoreError
from brb_pipeline.core.store.chunks import write_partition
from brb_pipeline.core.store import parquet_files
from brb_pipeline.stages.batch_progress import BatchProgress
from brb_pipeline.config.settings import Settings

log = logging.getLogger("brb")

EMBED_GROUP = 256  # chunks per embed() call: the unit of progress and cancellation


def chunk_params(s: Settings, document_prefix: str = "") -> ChunkParams:
    """The settings' chunking with the embedding model's document prefix."""
    return dataclasses.replace(s.chunking, document_prefix=document_prefix)


def batch_messages(s: Settings, batch: str) -> pl.DataFrame:
    """The messages of one batch: only its row groups of the staging Parquet are decoded (the file
    is grouped by batch, see ``ingest._write_messages``)."""
    src = s.paths.messages
    if not src.exists():
        raise StoreError(f"no parsed messages in {s.staging_dir}: run `brb ingest` first")
    return files.read_parquet_where(src, "batch", batch)


def name_maps(s: Settings) -> tuple[dict[str, str], dict[str, str]]:
    """(contact_id -> display name, handle -> display name of the person it belongs to).

    Lean queries, as every batch asks (building the whole contacts frame per batch made chunking
    grow with batches x contacts). Every handle seen in a chat has a person (``people``), so a
    group member who never wrote 1:1 is named too; the direct contacts' names stay the fallback
    for a store made before people existed.
    """
    with metadata.connect(s.brb_db) as c:
        by_contact = dict(c.execute("SELECT contact_id, display_name FROM contacts ORDER BY rank").fetchall())
        by_handle = dict(c.execute(
            "SELECT j.value, c.display_name FROM contacts c, json_each(c.handles_json) j "
            "WHERE c.kind = 'direct' ORDER BY c.rank, j.key").fetchall())
        by_handle.update(c.execute(
            "SELECT j.value, p.display_name FROM people p, json_each(p.handles_json) j "
            "ORDER BY p.person_id DESC, j.key").fetchall())
    return by_contact, by_handle


def _group_speakers(s: Settings) -> dict[str, list[str]]:
    """batch -> ``person_id=name`` of the members of its group chats: a renamed card changes the
    group passages' lines, so their embeddings. 1:1-only batches get none (their key is unchanged)."""
    with metadata.connect(s.brb_db) as c:
        rows = c.execute(
            "SELECT DISTINCT c.batch, p.person_id, p.display_name FROM members m JOIN contacts c "
            "ON c.contact_id = m.contact_id JOIN people p ON p.person_id = m.person_id WHERE m.kind = 'group'").fetchall()
    out: dict[str, list[str]] = {}
    for batch, pid, name in rows:
        out.setdefault(batch or "", []).append(f"{pid}={name}")
    return out


def configured_model_id(s: Settings) -> str:
    """The model id (name@weights-hash) the settings select, from the process's embedder."""
    from brb_pipeline.core.embedding.models import load_embedder

    return load_embedder(s.embedding).model_id


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
    for b, speakers in _group_speakers(s).items():
        members.setdefault(b, []).extend(speakers)
    settings_part = [model_id, CHUNK_FORMAT, str(s.max_tokens), str(s.window), str(s.stride),
                     str(s.conversation_gap_s), str(s.min_chars), time_zone_key(s.time_zone)]
    return {
        b: hashlib.sha1("|".join([fp, *settings_part, *sorted(members.get(b, []))]).encode()).hexdigest()[:24]
        for b, fp in fingerprints.items()
    }


def run_chunk(s: Settings, batch: str, document_prefix: str = "",
              progress: BatchProgress | None = None) -> dict[str, Any]:
    """Chunk one batch into ``staging/chunked/batch=<key>.parquet``.

    ``progress`` reports the chunking stage of the run's batch loop as this batch starts.
    """
    if progress:
        progress.chunking(batch)
    t0 = time.perf_counter()
    msgs = batch_messages(s, batch)
    contact_names, sender_names = name_maps(s)
    chunks = chunk_messages(msgs, batch=batch, contact_names=contact_names, sender_names=sender_names,
                            params=chunk_params(s, document_prefix))
    parquet_files.atomic_write_parquet(chunks, s.paths.chunks(batch))
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
    progress: Callable[..., None] | None = None,
    cancel: Callable[[], bool] | None = None,
    reuse: bool = True,
) -> dict[str, Any]:
    """Embed one batch's chunks into its Parquet partition, unless nothing changed.

    Skips the model entirely when the batch's messages, contact names, model and chunking
    settings are what its existing partition file was made from. Otherwise only chunks whose
    text is new are embedded: the others take their vectors from the batch's previous partition,
    from other batches' partitions (a contact that moved batch) or from the vectors a partition
    rewritten earlier dropped (see :func:`retire_vectors`). ``reuse=False`` re-embeds every chunk
    (``brb ingest --reembed``).

    ``progress(done, total, contact_id=...)`` is called with the chunks embedded so far out of
    those this batch embeds, and the contact whose chunks are embedded next: (0, 0) when nothing
    is embedded.
    """
    t0 = time.perf_counter()
    row = metadata.get_batch(s.brb_db, batch) or {}
    key = embed_keys(s, {batch: row.get("fingerprint", "")}, embedder.model_id)[batch]
    out = s.paths.partition(batch)
    if row.get("embedded_fingerprint") == key and row.get("embedding_model") and out.exists():
        if progress:
            progress(0, 0)
        return {"skipped": True, "reason": "unchanged since last embedding", "chunks": row.get("chunks") or 0,
                "embedding_model": row.get("embedding_model"), "seconds": round(time.perf_counter() - t0, 3)}
    src = s.paths.chunks(batch)
    chunks = files.read_parquet(src) if src.exists() else pl.DataFrame(schema=CHUNK_SCHEMA)
    texts = chunks["embedding_text"].to_list()
    config = embed_config(embedder)
    cached = previous_vectors(out, config) if reuse else {}
    emb, todo, reused_other = _reused_vectors(s, batch, chunks, texts, embedder.dim, config, cached, reuse)
    _embed_new(batch, texts, chunks["contact_id"].to_list(), todo, emb, embedder, progress, cancel)
    retired = retire_vectors(s, batch, cached, texts, config)
    write_partition(s.staging_dir, batch, chunks, emb, embedder.model_id, region=s.default_region)
    files.write_text(_config_path(out), config)
    faults.point("partition_written")
    metadata.mark_embedded(s.brb_db, batch, key, embedder.model_id, chunks.height)
    secs = time.perf_counter() - t0
    if progress:
        progress(len(todo), len(todo))
    return {
        "skipped": False,
        "chunks": chunks.height,
        "chunks_embedded": len(todo),
        "chunks_reused": chunks.height - len(todo),
        "chunks_reused_other_batches": reused_other,
        "vectors_retired": retired,
        "dim": int(embedder.dim),
        "embedding_model": embedder.model_id,
        "embedding_device": embedder.device,
        "seconds": round(secs, 3),
        "chunks_per_s": round(len(todo) / secs, 1) if secs > 0 and todo else 0.0,
    }


def _reused_vectors(s: Settings, batch: str, chunks: pl.DataFrame, texts: list[str], dim: int, config: str,
                    cached: dict[str, np.ndarray], reuse: bool) -> tuple[np.ndarray, list[int], int]:
    """The vectors the batch already has somewhere, and which chunks still need the model.

    Chunks whose text is unchanged keep their vectors from the previous partition file
    (``cached``, same model only): appending to a conversation re-embeds its last window and the
    new ones. With ``reuse``, the rest are looked up in other batches and the retired vectors.

    Returns:
        (vectors (n, dim) float32, zero where missing; the indexes still to embed; how many
        were found outside the batch's own partition).
    """
    emb = np.zeros((len(texts), dim), dtype=np.float32)
    todo = []
    for i, t in enumerate(texts):
        v = cached.get(t)
        if v is not None and v.shape[0] == dim:
            emb[i] = v
        else:
            todo.append(i)
    reused_other = 0
    if reuse and todo:
        contacts = set(chunks["contact_id"].drop_nulls().unique().to_list())
        todo, reused_other = _fill_from_other_batches(s, batch, texts, todo, emb, config, contacts)
    return emb, todo, reused_other


def _embed_new(batch: str, texts: list[str], owners: list[str | None], todo: list[int], emb: np.ndarray,
               embedder: Any, progress: Callable[..., None] | None, cancel: Callable[[], bool] | None) -> None:
    """Embed ``texts[todo]`` into ``emb`` in groups of :data:`EMBED_GROUP`, checking ``cancel``
    before each group and reporting ``progress`` after it (``owners``: each chunk's contact)."""
    if progress and todo:
        progress(0, len(todo), contact_id=owners[todo[0]])
    for j in range(0, len(todo), EMBED_GROUP):
        if cancel and cancel():
            raise CancelledError(f"cancelled while embedding {batch}; earlier batches and the store are intact")
        idx = todo[j:j + EMBED_GROUP]
        emb[idx] = embedder.embed([texts[i] for i in idx])
        faults.point("embedding")
        if progress:
            done = min(j + EMBED_GROUP, len(todo))
            progress(done, len(todo), contact_id=owners[todo[min(done, len(todo) - 1)]])


def embed_config(embedder: Any) -> str:
    """What a vector depends on besides the text: the model (name@weights) and the truncation."""
    return f"{embedder.model_id}|max_tokens={getattr(embedder, 'max_tokens', '')}"


def _config_path(partition: Path) -> Path:
    return partition.with_name(partition.name + ".embedcfg")


def previous_vectors(partition: Path, config: str) -> dict[str, np.ndarray]:
    """embedding_text -> vector from an existing partition file embedded with ``config``."""
    cfg = _config_path(partition)
    if not partition.exists() or _read_text(cfg) != config:
        return {}
    try:
        table = files.read_arrow(partition, columns=["embedding_text", "embedding"])
    except (OSError, ValueError, pa.ArrowException):
        return {}  # a damaged file only costs re-embedding
    if table.num_rows == 0:
        return {}
    vecs = table.column("embedding").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    vecs = vecs.reshape(table.num_rows, -1).astype(np.float32, copy=False)
    return dict(zip(table.column("embedding_text").to_pylist(), vecs))


_RETIRED_CONFIG = b"brb.embedcfg"


def _fill_from_other_batches(s: Settings, batch: str, texts: list[str], todo: list[int], emb: np.ndarray,
                             config: str, contacts: set[str]) -> tuple[list[int], int]:
    """Copy vectors of ``texts[todo]`` found elsewhere into ``emb`` (n, dim).

    Returns:
        (the indexes still without a vector, how many were found).
    """
    found = other_vectors(s, batch, {texts[i] for i in todo}, config, emb.shape[1], contacts)
    left = []
    for i in todo:
        v = found.get(texts[i])
        if v is None:
            left.append(i)
        else:
            emb[i] = v
    return left, len(todo) - len(left)


def other_vectors(s: Settings, batch: str, wanted: set[str], config: str, dim: int,
                  contacts: set[str] | None = None) -> dict[str, np.ndarray]:
    """embedding_text -> vector for the ``wanted`` texts found outside ``batch``'s partition.

    Looks in the other batches' partition files, then in the retired vectors, reading only files
    embedded with ``config``. Each file is matched on its ``embedding_text`` column and only the
    matching rows' vectors are kept, so memory grows with the matches, not with the store.

    Args:
        wanted: texts without a vector yet.
        dim: the embedder's dimension; files with vectors of another size are skipped.
        contacts: when given, only partitions holding one of these contacts are searched (a
            chunk's text starts with its contact's name, so a text moves with its contact). A
            fresh run would otherwise read every earlier partition for every batch: 40 files and
            1.3 s for a 30-chunk batch at 250K messages. Retired vectors are always searched.

    Returns:
        Vectors of shape (dim,) float32 for the texts found (a subset of ``wanted``).
    """
    own = s.paths.partition(batch)
    sources = [p for p in sorted(own.parent.glob("batch=*.parquet"))
               if p.name != own.name and _read_text(_config_path(p)) == config
               and (contacts is None or _holds_contact(p, contacts))]
    sources += [p for p in sorted(s.paths.retired_dir.glob("batch=*.parquet")) if _retired_config(p) == config]
    found: dict[str, np.ndarray] = {}
    left = set(wanted)
    for p in sources:
        if not left:
            break
        hits = _matching_vectors(p, left, dim)
        found.update(hits)
        left.difference_update(hits)
    return found


def _holds_contact(path: Path, contacts: set[str]) -> bool:
    """Whether a partition file has chunks of any of ``contacts`` (reads its contact_id column)."""
    try:
        col = files.read_arrow(path, columns=["contact_id"]).column("contact_id")
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return False  # unreadable: it could not give vectors either
    return bool(pc.any(pc.is_in(col, value_set=pa.array(sorted(contacts), pa.string()))).as_py())


def _matching_vectors(path: Path, wanted: set[str], dim: int) -> dict[str, np.ndarray]:
    """Vectors of the rows of one Parquet file whose embedding_text is in ``wanted``."""
    try:
        table = files.read_arrow(path, columns=["embedding_text", "embedding"])
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return {}  # a damaged or foreign file only costs re-embedding
    kind = table.schema.field("embedding").type
    if not pa.types.is_fixed_size_list(kind) or kind.list_size != dim:
        return {}
    # One file at a time, so memory is bounded by the largest partition; only matches are kept.
    hits = table.filter(pc.fill_null(pc.is_in(table.column("embedding_text"),
                                               value_set=pa.array(list(wanted), pa.string())), False))
    if hits.num_rows == 0:
        return {}
    flat = hits.column("embedding").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return dict(zip(hits.column("embedding_text").to_pylist(),
                    flat.astype(np.float32, copy=False).reshape(hits.num_rows, dim)))


def retire_vectors(s: Settings, batch: str, previous: dict[str, np.ndarray], texts: list[str], config: str) -> int:
    """Keep the vectors a rewrite of ``batch`` drops, for batches embedded after it to reuse.

    Batches are embedded one at a time, so a contact that moved from this batch to one embedded
    later would otherwise find its vectors gone. Saved to ``staging/retired/batch=<key>.parquet``
    (embedding_text, embedding; ``config`` in the file's metadata) and merged with what an
    earlier rewrite retired there; the files live until the next store load or forget.

    Args:
        previous: embedding_text -> vector (dim,) of the partition about to be overwritten,
            embedded with ``config``.
        texts: the embedding texts of the new partition.

    Returns:
        How many vectors were retired.
    """
    keep = set(texts)
    gone = [t for t in previous if t not in keep]
    if not gone:
        return 0
    vecs = np.stack([previous[t] for t in gone]).astype(np.float32, copy=False)
    dim = vecs.shape[1]
    table = pa.table({"embedding_text": pa.array(gone, pa.string()),
                      "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), dim)})
    path = s.paths.retired(batch)
    if _retired_config(path) == config:
        try:
            old = files.read_arrow(path, columns=["embedding_text", "embedding"])
            if old.schema.field("embedding").type == table.schema.field("embedding").type:
                mask = pc.invert(pc.is_in(old.column("embedding_text"), value_set=table.column("embedding_text")))
                table = pa.concat_tables([table, old.filter(mask).select(table.schema.names)])
        except (OSError, ValueError, KeyError, pa.ArrowException):
            pass  # a damaged cache is replaced
    files.write_parquet(table.replace_schema_metadata({_RETIRED_CONFIG: config.encode()}), path,
                        compression="snappy", use_dictionary=False)
    return len(gone)


def _retired_config(path: Path) -> str | None:
    try:
        md = files.read_parquet_schema(path).metadata or {}
    except (OSError, ValueError, pa.ArrowException):
        return None
    v = md.get(_RETIRED_CONFIG)
    return v.decode() if v is not None else None


def _read_text(path: Path) -> str | None:
    try:
        return files.read_text(path)
    except OSError:
        return None
