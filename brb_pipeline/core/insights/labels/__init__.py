"""Human-readable cluster labels, as a chain (BERTopic's representation models).

Owns: chat text cleaning for labels (:mod:`.text`), the c-TF-IDF base labels every chain starts
with (:mod:`.ctfidf`), the refiners that may improve them cluster by cluster, an embedding
re-rank (:mod:`.embed`) and a local mlx-lm model (:mod:`.llm`), the chain that runs them and the
one the settings ask for (:mod:`.chain`), and the label cache keyed by labeler kind and cluster
membership (:mod:`.cache`). Imports nothing of the pipeline but :mod:`brb_pipeline.core.errors`,
:mod:`brb_pipeline.core.crypto` (the cache file, sealed in an encrypted home) and, when an LLM is
loaded, the embedding package's BLAS setup. Nothing here logs message text; log lines carry
counts only.
"""

from brb_pipeline.core.insights.labels.base import (
    NOISE_LABEL,
    ClusterDocs,
    ClusterLabel,
    Labeler,
    Refiner,
)
from brb_pipeline.core.insights.labels.cache import (
    LABEL_KEEP_OVERLAP,
    LabelCache,
    keep_by_overlap,
    label_clusters,
    membership_hash,
)
from brb_pipeline.core.insights.labels.chain import LabelChain, labeler_kind, make_labeler
from brb_pipeline.core.insights.labels.ctfidf import TfidfLabeler, label_phrase
from brb_pipeline.core.insights.labels.embed import EmbeddingLabeler, mmr, representatives
from brb_pipeline.core.insights.labels.llm import (
    LabelerModelMissingError,
    MLXLMLabeler,
    build_prompt,
    parse_topic,
)
from brb_pipeline.core.insights.labels.text import (
    CHAT_FILLER,
    MASH_TERM,
    keyboard_mash,
    message_bodies,
    name_tokens,
    normalize_case,
    stop_words,
    tokenize,
)

__all__ = [
    "CHAT_FILLER", "LABEL_KEEP_OVERLAP", "MASH_TERM", "NOISE_LABEL", "ClusterDocs", "ClusterLabel",
    "EmbeddingLabeler", "LabelCache", "LabelChain", "Labeler", "LabelerModelMissingError",
    "MLXLMLabeler", "Refiner", "TfidfLabeler", "build_prompt", "keep_by_overlap",
    "keyboard_mash", "label_clusters", "label_phrase", "labeler_kind", "make_labeler", "membership_hash",
    "message_bodies", "mmr", "name_tokens", "normalize_case", "parse_topic", "representatives",
    "stop_words", "tokenize",
]
