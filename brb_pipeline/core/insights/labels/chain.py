"""The label chain: c-TF-IDF base labels, then each refiner in turn (as BERTopic's
representation models), and the chain the settings ask for."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from brb_pipeline.core import SEED
from brb_pipeline.core.insights.labels.base import ClusterDocs, ClusterLabel, Labeler, Refiner
from brb_pipeline.core.insights.labels.ctfidf import TfidfLabeler
from brb_pipeline.core.insights.labels.embed import EmbeddingLabeler
from brb_pipeline.core.insights.labels.llm import MLXLMLabeler


def labeler_kind(labeler: Any) -> str:
    """Cache namespace of a base labeler: its ``kind`` (name, version, e.g. "tfidf/v3"), else its
    ``source``."""
    return str(getattr(labeler, "kind", None) or getattr(labeler, "source", type(labeler).__name__))


class LabelChain:
    """A base labeler, then refiners, each refining (or keeping) the labels before it.

    Args:
        base: labels every cluster against all the others (c-TF-IDF).
        refiners: applied in order, each only to the clusters asked about.
    """

    def __init__(self, base: Labeler, *refiners: Refiner) -> None:
        self.base = base
        self.refiners = refiners

    @property
    def kind(self) -> str:
        """Cache namespace of the chain's labels: each refiner wraps the kind before it, e.g.
        "llm:model|tfidf/v3+embed/v3(c=30,d=0.3,w=0.3,core):all-MiniLM-L6-v2@051e2de6"."""
        kind = labeler_kind(self.base)
        for refiner in self.refiners:
            kind = refiner.kind_of(kind)
        return kind

    @property
    def name(self) -> str:
        """The class name of the last step (what a run reports as its labeler)."""
        return type(self.refiners[-1] if self.refiners else self.base).__name__

    def label(self, clusters: Sequence[ClusterDocs]) -> list[ClusterLabel]:
        """One label per cluster, in input order."""
        return self.label_some(clusters, range(len(clusters)))

    def label_some(self, clusters: Sequence[ClusterDocs], todo: Iterable[int]) -> list[ClusterLabel]:
        """Labels of ``clusters[i] for i in todo``. The base sees every cluster (c-TF-IDF
        contrasts a cluster with the rest); the refiners only the asked ones."""
        todo = list(todo)
        base = self.base.label(clusters)
        labels = [base[i] for i in todo]
        asked = [clusters[i] for i in todo]
        for refiner in self.refiners:
            refined = refiner.refine(asked, labels)
            labels = [old if new is None else new for old, new in zip(labels, refined)]
        return labels


def make_labeler(model_path: Path | None = None, embedder: Any | None = None,
                 names: Iterable[str] = (), seed: int = SEED) -> LabelChain:
    """The configured chain: c-TF-IDF, re-ranked by ``embedder`` when one is given, then mlx-lm
    when ``model_path`` (the ``labeler_model_path`` setting) is given.

    Args:
        model_path: a local mlx-lm instruct model directory, or None.
        embedder: the store's embedding model (see :class:`EmbeddingLabeler`); None for plain
            c-TF-IDF.
        names: people's display names, never used in labels.
        seed: the LLM's sampling seed.

    The LLM is loaded lazily, on the first labels it refines.
    """
    names = list(names)
    refiners: list[Refiner] = []
    base = TfidfLabeler(names=names)
    if embedder is not None:
        rerank = EmbeddingLabeler(embedder, names=names)
        base = TfidfLabeler(n_terms=rerank.candidates, names=names)
        refiners.append(rerank)
    if model_path:
        refiners.append(MLXLMLabeler(Path(model_path), seed=seed))
    return LabelChain(base, *refiners)
