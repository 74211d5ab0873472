"""Labels from a local mlx-lm model: the prompt, the model, and defensive parsing of its answer.

:class:`MLXLMLabeler` asks for a 2-5 word topic per cluster, :func:`parse_topic` cleans the answer,
and junk keeps the labels it was given (marked "llm-fallback", so the model is asked again next
run). Nothing is downloaded: the model is a local directory.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from brb_pipeline.core import SEED
from brb_pipeline.core.errors import BrbError
from brb_pipeline.core.insights.labels.base import ClusterDocs, ClusterLabel
from brb_pipeline.core.insights.labels.text import message_bodies

log = logging.getLogger(__name__)


class LabelerModelMissingError(BrbError, FileNotFoundError):
    """``labeler_model_path`` does not point at a local model directory."""


_CHATTER = re.compile(
    r"^(?:(?:sure|okay|ok|certainly|of course|absolutely|here(?:'s| is| are)?|alright|great)"
    r"[\s,!.:;\-]*)+", re.IGNORECASE)
_LEAD_IN = re.compile(
    r"^(?:the\s+)?(?:(?:main|likely|conversation|chat)\s+)?(?:topic|label|theme|answer|title|"
    r"subject)s?(?:\s+(?:of|for)\s+(?:this|the)\s+(?:conversation|chat|cluster|messages))?"
    r"(?:\s+(?:is|would be|could be))?\s*[:\-–—]?\s*", re.IGNORECASE)
_MARKDOWN = re.compile(r"[*_`#>]+|^\s*(?:[-•]|\d+[.)])\s+")
_QUOTES = "\"'“”‘’«»「」`"
_DANGLING = frozenset("and or of the a an to for with in on at about & with from".split())
_ODD_CHARS = re.compile(r"[^\w&+\-'’./\u0300-\u036f\u064b-\u065f]|_|#")
MAX_LABEL_CHARS = 48
MAX_LABEL_WORDS = 6


def parse_topic(raw: str | None) -> str | None:
    """Extract a short topic from a model answer, or ``None`` when the answer is junk.

    Handles chatter ("Sure! The topic is: ..."), quotes, markdown, trailing punctuation,
    reasoning blocks (``<think>...</think>``, possibly unterminated), answers cut off by the
    token limit (dangling "and"/"of" dropped) and multi-line answers (first useful line).
    Junk: empty, more than 6 words or 48 characters, words without letters, repeated words,
    or mostly non-letter characters.

    Args:
        raw: the generated text.

    Returns:
        The topic with its first letter capitalized, or ``None``.
    """
    if not raw:
        return None
    text = re.sub(r"<think>.*?(?:</think>|$)", " ", raw, flags=re.DOTALL | re.IGNORECASE)
    text = re.sub(r"<\|?[a-z_]+\|?>|</?s>|\[/?INST\]", " ", text, flags=re.IGNORECASE)
    for line in text.splitlines():
        line = _MARKDOWN.sub(" ", line).strip()
        line = _CHATTER.sub("", line).strip()
        line = _LEAD_IN.sub("", line).strip()
        if ":" in line:  # "Topic for this chat: X" variants the patterns above missed
            head, _, tail = line.partition(":")
            if tail.strip() and len(head.split()) <= 6:
                line = tail.strip()
        line = line.strip(_QUOTES + " ").rstrip(".!?,;:-–— ").strip(_QUOTES + " ")
        if line:
            return _validate(line)
    return None


def _validate(text: str) -> str | None:
    words = text.split()
    while words and words[-1].lower().strip(_QUOTES) in _DANGLING:  # truncated mid-phrase
        words.pop()
    if not words or len(words) > MAX_LABEL_WORDS:
        return None
    text = " ".join(words).strip(_QUOTES + " ").rstrip(".!?,;:-–— ")
    if not text or len(text) > MAX_LABEL_CHARS:
        return None
    lowered = [w.lower().strip(_QUOTES + ".,!?") for w in words]
    if len(set(lowered)) < len(lowered):
        return None  # "the the the", "topic topic"
    letters = sum(ch.isalpha() for ch in text)
    if letters < 0.6 * len(text.replace(" ", "")):
        return None
    if any(not any(ch.isalpha() for ch in w) and w not in ("&", "+", "-") for w in words):
        return None
    if any(len(w) > 24 or _ODD_CHARS.search(w) for w in words):
        return None  # "<unk>", "##ing", "[PAD]", "a|b": tokenizer debris, not words
    return text[:1].upper() + text[1:]


PROMPT_INSTRUCTIONS = (
    "Here are excerpts from one group of similar chat conversations. "
    "Reply with a 2-5 word topic that describes what they are about. "
    "Reply with the topic only."
)


def build_prompt(tokenizer: Any, docs: ClusterDocs, terms: Sequence[str], *,
                 max_chars: int = 1800) -> str:
    """The prompt for one cluster: instructions, keywords, excerpts; chat template if present.

    Excerpts are message bodies (sender prefixes stripped), each capped so ``max_chars`` covers
    several of them.
    """
    texts = docs.centroid_texts or docs.texts[:8]
    per = max(80, max_chars // max(1, len(texts)))
    excerpts = []
    for content in texts:
        bodies, _ = message_bodies(content)
        excerpts.append("- " + " / ".join(bodies)[:per])
    user = PROMPT_INSTRUCTIONS
    if terms:
        user += "\nKeywords: " + ", ".join(terms[:8])
    user += "\nExcerpts:\n" + "\n".join(excerpts)
    template = getattr(tokenizer, "chat_template", None)
    if template:
        try:
            return tokenizer.apply_chat_template(
                [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # a broken template must not stop labelling
            log.warning("Labeling - chat template failed (%s), using a plain prompt",
                        type(exc).__name__)
    return user + "\nTopic:"


class MLXLMLabeler:
    """Refiner: labels from a local mlx-lm model; a junk answer keeps the label it was given.

    Args:
        model_path: a local model directory (config.json, *.safetensors, tokenizer files).
            Never a hub id: nothing is downloaded.
        max_tokens: generation cap per cluster (a topic is a few tokens).
        samples: representative texts per cluster put in the prompt.
        seed: seeds MLX's random state (generation itself is greedy).

    Attributes:
        fallbacks: number of clusters that kept their given label in the last ``refine`` call.
    """

    source = "llm"

    def __init__(self, model_path: Path, *, max_tokens: int = 24, samples: int = 8,
                 seed: int = SEED) -> None:
        self.model_path = Path(model_path).expanduser()
        self.max_tokens = max_tokens
        self.samples = samples
        self.seed = seed
        self.fallbacks = 0
        self._model: Any = None
        self._tokenizer: Any = None

    def kind_of(self, base_kind: str) -> str:
        """Cache namespace: the model directory's name and the kind of the labels it refines."""
        return f"llm:{self.model_path.name}|{base_kind}"

    def load(self) -> None:
        """Load the model once.

        Raises:
            LabelerModelMissingError: the path is not a local model directory (a
                :class:`~brb_pipeline.core.errors.BrbError` and a ``FileNotFoundError``).
        """
        if self._model is not None:
            return
        if not (self.model_path / "config.json").is_file():
            raise LabelerModelMissingError(
                f"no local labeler model at {self.model_path} (need config.json + *.safetensors "
                "+ tokenizer files); unset labeler_model_path to use offline labels")
        try:
            from brb_pipeline.core.embedding.blas import ensure_fast_blas

            ensure_fast_blas()  # before the first mlx import, or MLX keeps its slow BLAS
        except ImportError:
            pass
        # Local-first: a local directory never needs the hub; make sure nothing tries.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import mlx.core as mx
        from mlx_lm import load

        mx.random.seed(self.seed)
        self._model, self._tokenizer = load(str(self.model_path))
        log.info("Labeling - loaded local model %s", self.model_path.name)

    def generate(self, prompt: str) -> str:
        """Greedy generation of at most ``max_tokens`` tokens for one prompt."""
        from mlx_lm import generate

        self.load()
        return generate(self._model, self._tokenizer, prompt, max_tokens=self.max_tokens,
                        verbose=False)

    def refine(self, clusters: Sequence[ClusterDocs],
               base: Sequence[ClusterLabel]) -> list[ClusterLabel | None]:
        """One prompt per cluster (noise declined); a junk answer keeps the base label as
        "llm-fallback" (counted)."""
        self.load()
        out: list[ClusterLabel | None] = []
        self.fallbacks = 0
        for docs, lab in zip(clusters, base):
            if docs.cluster_id < 0:
                out.append(None)
                continue
            topic = self._topic(docs, lab.terms)
            if topic is None:
                self.fallbacks += 1
                out.append(ClusterLabel(docs.cluster_id, lab.label, lab.terms, "llm-fallback"))
            else:
                out.append(ClusterLabel(docs.cluster_id, topic, lab.terms, self.source))
        log.info("Labeling - model labels for %d clusters, %d fell back to c-TF-IDF",
                 len(out), self.fallbacks)
        return out

    def _topic(self, docs: ClusterDocs, terms: Sequence[str]) -> str | None:
        """The model's topic for one cluster, or None (junk, or generation failed)."""
        trimmed = ClusterDocs(docs.cluster_id, docs.texts, list(docs.centroid_texts[: self.samples]))
        prompt = build_prompt(self._tokenizer, trimmed, terms)
        try:
            return parse_topic(self.generate(prompt))
        except Exception as exc:  # generation failure for one cluster must not stop the map
            log.warning("Labeling - generation failed for cluster %d (%s)", docs.cluster_id,
                        type(exc).__name__)
            return None
