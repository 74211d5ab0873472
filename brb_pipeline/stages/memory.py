"""Per contact-batch memory stages: topics from the local model, then the people's profiles.

``run_topics`` writes ``staging/topics/batch=<key>.parquet`` and ``run_profiles``
``staging/profiles/batch=<key>.parquet`` (:mod:`.paths`); each file records in its Parquet
metadata the key it was made from (the batch's messages fingerprint, the model id and
:data:`PROMPT_VERSION`), and a stage whose key is unchanged does nothing. The store load
(:mod:`.store`) puts every file into the ``topics`` and ``profiles`` tables. Without
``llm_model_path`` both stages report a skip with its reason. Metadata is counts only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from brb_pipeline.core import metadata
from brb_pipeline.core.crypto import files
from brb_pipeline.core.memory.generate import Generator, MLXGenerator
from brb_pipeline.core.memory.parse import Losses
from brb_pipeline.core.memory.profile import derive_profiles
from brb_pipeline.core.memory.prompts import PROMPT_VERSION
from brb_pipeline.core.memory.topics import TOPIC_SCHEMA, distill
from brb_pipeline.stages.embed import batch_messages
from brb_pipeline.config.settings import Settings

NO_MODEL = "no local model configured: set BRB_LLM_MODEL_PATH"
_KEY = b"brb.memory_key"
_LOSSES = b"brb.memory_losses"


@functools.lru_cache(maxsize=2)
def _generator(path: Path, max_tokens: int) -> MLXGenerator:
    return MLXGenerator(path, max_tokens=max_tokens)


def load_generator(s: Settings) -> Generator | None:
    """The process's generator for ``llm_model_path`` (weights loaded on first use), or None."""
    return _generator(s.llm_model_path, s.llm_max_tokens) if s.llm_model_path else None


def topics_key(s: Settings, batch: str, model_id: str) -> str:
    """What a batch's topics depend on: its messages, the model and the prompt."""
    fp = (metadata.get_batch(s.brb_db, batch) or {}).get("fingerprint", "")
    parts = [fp, model_id, str(PROMPT_VERSION), str(s.memory_window_chars), str(s.llm_max_tokens)]
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:24]


def file_info(path: Path) -> dict[str, Any]:
    """``{"key", "losses", "rows"}`` a memory file recorded ({} when missing or unreadable)."""
    try:
        md = files.parquet_file(path).metadata
    except (OSError, ValueError, pa.ArrowException):
        return {}
    kv = md.metadata or {}
    return {"key": (kv.get(_KEY) or b"").decode(), "losses": json.loads(kv.get(_LOSSES) or b"{}"),
            "rows": md.num_rows}


def _write(frame: pl.DataFrame, path: Path, key: str, losses: Losses | None = None) -> None:
    meta = {_KEY: key.encode(), _LOSSES: json.dumps((losses or Losses()).as_dict()).encode()}
    table = frame.to_arrow()
    files.write_parquet(table.replace_schema_metadata({**(table.schema.metadata or {}), **meta}), path)


def _skip(reason: str, t0: float, **counts: Any) -> dict[str, Any]:
    return {"skipped": True, "reason": reason, **counts, **Losses().as_dict(),
            "seconds": round(time.perf_counter() - t0, 3)}


def run_topics(s: Settings, batch: str, generator: Generator | None = None,
               progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Distil one batch's messages into topics, unless its key is what its file was made from.

    Args:
        generator: the model (default: ``llm_model_path``'s); none at all is a skip.
        progress: ``progress(windows done, windows total)`` after each prompt window.
    """
    t0 = time.perf_counter()
    gen = generator or load_generator(s)
    if gen is None:
        return _skip(NO_MODEL, t0, topics=0)
    key = topics_key(s, batch, gen.model_id)
    out = s.paths.topics(batch)
    info = file_info(out)
    if info.get("key") == key:
        return _skip("unchanged since the last distillation", t0, topics=info["rows"], model_id=gen.model_id)
    msgs = batch_messages(s, batch)
    result = distill(msgs, batch, gen, max_chars=s.memory_window_chars, on_window=progress)
    _write(result.topics, out, key, result.losses)
    secs = time.perf_counter() - t0
    return {"skipped": False, "topics": result.topics.height, "messages": msgs.height,
            "windows": result.windows, "glue_windows": result.glue_windows,
            "languages": ", ".join(f"{k} {v}" for k, v in sorted(result.languages.items())) or "none",
            **result.losses.as_dict(), "model_id": gen.model_id, "prompt_version": PROMPT_VERSION,
            "seconds": round(secs, 3),
            "seconds_per_1k_messages": round(1000 * secs / msgs.height, 3) if msgs.height else 0.0}


def run_profiles(s: Settings, batch: str, generator: Generator | None = None,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Derive the profiles of the batch's people from their topics (all of them, every time the
    batch's topics changed)."""
    t0 = time.perf_counter()
    gen = generator or load_generator(s)
    if gen is None:
        return _skip(NO_MODEL, t0, profiles=0)
    src, out = s.paths.topics(batch), s.paths.profiles(batch)
    topics_info = file_info(src)
    if not topics_info:
        return _skip("no topics for this batch yet", t0, profiles=0)
    key = f"{topics_info['key']}|profile"
    info = file_info(out)
    if info.get("key") == key:
        return _skip("unchanged since the last derivation", t0, profiles=info["rows"])
    topics = files.read_parquet(src)
    contacts = batch_messages(s, batch)["contact_id"].drop_nulls().unique().to_list()
    profiles = derive_profiles(topics if topics.height else pl.DataFrame(schema=TOPIC_SCHEMA), contacts,
                               gen.model_id)
    _write(profiles, out, key)
    if progress:
        progress(1, 1)
    with_commitments = int((profiles["commitments"] != "[]").sum()) if profiles.height else 0
    return {"skipped": False, "profiles": profiles.height, "with_commitments": with_commitments,
            "topics": topics.height, **Losses().as_dict(), "model_id": gen.model_id,
            "seconds": round(time.perf_counter() - t0, 3)}


def pending(s: Settings, batches: list[str], model_id: str | None) -> list[str]:
    """The ``batches`` whose topics or profiles are missing or were made from another key."""
    if model_id is None:
        return []
    return [b for b in batches
            if file_info(s.paths.topics(b)).get("key") != topics_key(s, b, model_id)
            or not file_info(s.paths.profiles(b))]


def run_summary(s: Settings, topic_metas: list[dict[str, Any]],
                profile_metas: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's memory, for its JSON-lines result and ``brb status``: topics and profiles made,
    losses summed, and the skip reason when no model is configured (counts only).

    Args:
        topic_metas, profile_metas: what ``run_topics`` and ``run_profiles`` returned this run.
    """
    losses = Losses()
    for m in topic_metas:
        losses.add(Losses(**{k: int(m.get(k, 0)) for k in Losses().as_dict()}))
    topics = sum(int(m.get("topics", 0)) for m in topic_metas if not m.get("skipped"))
    profiles = sum(int(m.get("profiles", 0)) for m in profile_metas if not m.get("skipped"))
    skipped = s.llm_model_path is None
    return {"skipped": skipped, "reason": NO_MODEL if skipped else None, "topics_written": topics,
            "profiles_written": profiles, "losses": losses.as_dict()}


def memory_files(s: Settings, batches: set[str]) -> tuple[list[Path], list[Path], str]:
    """The topics and profiles files of ``batches`` and a key of what they hold (names, sizes,
    times), which the store records to know when to load them again."""
    topics = [p for b in sorted(batches) if (p := s.paths.topics(b)).exists()]
    profiles = [p for b in sorted(batches) if (p := s.paths.profiles(b)).exists()]
    h = hashlib.sha1(b"memory-v1")
    for p in topics + profiles:
        st = p.stat()
        h.update(f"{p.parent.name}/{p.name}:{st.st_size}:{st.st_mtime_ns}|".encode())
    return topics, profiles, h.hexdigest()[:24]
