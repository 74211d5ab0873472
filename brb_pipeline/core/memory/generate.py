"""Generators: anything callable as ``(prompt) -> text`` with a ``model_id``.

:class:`MLXGenerator` runs a local mlx-lm model (loaded once, greedy, at most ``max_tokens``
tokens, the tokenizer's chat template when it has one); :class:`ScriptedGenerator` replays
replies for tests. Nothing is downloaded: a model is a local directory.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from brb_pipeline.core import SEED
from brb_pipeline.core.errors import BrbError
from brb_pipeline.core.memory.params import MAX_TOKENS

log = logging.getLogger(__name__)


class MemoryModelMissingError(BrbError, FileNotFoundError):
    """``llm_model_path`` does not point at a local model directory."""


class Generator(Protocol):
    """A text generator: ``model_id`` names the model and its weights (part of every row's key)."""

    model_id: str

    def __call__(self, prompt: str) -> str: ...


def model_id_of(path: Path) -> str:
    """``<dir name>@<hash>`` of a model directory's config and weight files (names and sizes)."""
    h = hashlib.sha1()
    for f in sorted(path.iterdir()):
        if f.suffix in (".json", ".safetensors") and f.is_file():
            h.update(f"{f.name}:{f.stat().st_size}|".encode())
    h.update((path / "config.json").read_bytes())
    return f"{path.name}@{h.hexdigest()[:12]}"


class MLXGenerator:
    """A local mlx-lm model, loaded on first use.

    Args:
        model_path: a local model directory (config.json, *.safetensors, tokenizer files).
        max_tokens: generation cap per prompt.
        seed: seeds MLX's random state (decoding itself is greedy).

    Raises:
        MemoryModelMissingError: the path holds no config.json.
    """

    def __init__(self, model_path: Path, *, max_tokens: int = MAX_TOKENS, seed: int = SEED) -> None:
        self.model_path = Path(model_path).expanduser()
        if not (self.model_path / "config.json").is_file():
            raise MemoryModelMissingError(
                f"no local model at {self.model_path} (need config.json + *.safetensors + tokenizer "
                "files): fix or unset BRB_LLM_MODEL_PATH")
        self.model_id = model_id_of(self.model_path)
        self.max_tokens = max_tokens
        self.seed = seed
        self._model: Any = None
        self._tokenizer: Any = None

    def _load(self) -> None:
        if self._model is not None:
            return
        try:
            from brb_pipeline.core.embedding.blas import ensure_fast_blas

            ensure_fast_blas()  # before the first mlx import, or MLX keeps its slow BLAS
        except ImportError:
            pass
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory never needs the hub
        import mlx.core as mx
        from mlx_lm import load

        mx.random.seed(self.seed)
        self._model, self._tokenizer = load(str(self.model_path))
        log.info("Memory - loaded local model %s", self.model_path.name)

    def _wrap(self, prompt: str) -> str:
        if getattr(self._tokenizer, "chat_template", None):
            try:
                return self._tokenizer.apply_chat_template(
                    [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
            except Exception as exc:  # a broken template must not stop distilling
                log.warning("Memory - chat template failed (%s), using a plain prompt", type(exc).__name__)
        return prompt

    def __call__(self, prompt: str) -> str:
        from mlx_lm import generate

        self._load()
        return generate(self._model, self._tokenizer, self._wrap(prompt), max_tokens=self.max_tokens,
                        verbose=False)


class ScriptedGenerator:
    """Replays ``replies`` in order (the last one again once they run out), recording prompts.

    A reply may be a callable ``(prompt) -> text`` or an exception instance to raise (fault
    injection).
    """

    def __init__(self, replies: Iterable[str | BaseException | Callable[[str], str]], model_id: str = "scripted"):
        self.replies = list(replies)
        self.model_id = model_id
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        reply = self.replies[min(len(self.prompts), len(self.replies)) - 1]
        if isinstance(reply, BaseException):
            raise reply
        return reply(prompt) if callable(reply) else reply
