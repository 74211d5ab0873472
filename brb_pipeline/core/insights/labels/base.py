"""What every labeling step shares: a cluster as a labeler sees it, a label, and the two roles in
a label chain (the base labeler, which sees every cluster, and a refiner, which may improve the
base labels of the clusters it is asked about)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

NOISE_LABEL = "Unclustered"


@dataclass
class ClusterDocs:
    """What a labeler sees of one cluster.

    Attributes:
        cluster_id: the cluster's id (-1 is the noise bucket).
        texts: chunk contents of all (or a capped sample of) the cluster's members.
        centroid_texts: a few representative chunk contents (see
            :func:`~brb_pipeline.core.insights.labels.embed.representatives`).
        centroid: (dim,) float32 mean of the members' stored embeddings, or None when unknown.
        centroid_model: the model id those embeddings were made with. An embedding labeler
            uses ``centroid`` only when this is its embedder's ``model_id``, and otherwise
            embeds ``centroid_texts`` itself.
        corpus_mean: (dim,) float32 mean of every stored embedding (same model), or None. What
            all chats share ("talking", "chat", "met"); subtracted from the centroid so terms
            are scored against what sets this cluster apart.
    """

    cluster_id: int
    texts: list[str]
    centroid_texts: list[str] = field(default_factory=list)
    centroid: np.ndarray | None = field(default=None, compare=False, repr=False)
    centroid_model: str | None = None
    corpus_mean: np.ndarray | None = field(default=None, compare=False, repr=False)


@dataclass
class ClusterLabel:
    """A label for one cluster; ``source`` is "tfidf", "embedding", "llm" or "llm-fallback"."""

    cluster_id: int
    label: str
    terms: list[str]
    source: str


class Labeler(Protocol):
    """The base of a chain: labels every cluster, contrasting each with the others."""

    def label(self, clusters: Sequence[ClusterDocs]) -> list[ClusterLabel]:
        """One :class:`ClusterLabel` per input cluster, in input order."""
        ...


class Refiner(Protocol):
    """A later step of a chain: looks at one cluster at a time, starting from the labels so far.

    A refiner may decline a cluster: ``None`` keeps the label it was given.
    """

    def kind_of(self, base_kind: str) -> str:
        """Cache namespace of labels this refiner made from labels of ``base_kind``."""
        ...

    def refine(self, clusters: Sequence[ClusterDocs],
               base: Sequence[ClusterLabel]) -> list[ClusterLabel | None]:
        """One refined label (or None) per cluster, in input order; ``base`` is aligned with
        ``clusters``."""
        ...
