"""Offline, deterministic base labels: class-based TF-IDF over each cluster's message words.

Each cluster's chunk texts form one class document; terms frequent in the cluster and rare
elsewhere win (c-TF-IDF, as in BERTopic: ``tf(t, c) * log(1 + avg_words_per_class / freq(t))``).
Sender prefixes and header lines are stripped first and the sender names dropped, so labels
describe what people talk about, not who talks. Keyboard mash ("asdfas", "dfd") is never a term
itself: each run of it counts as the term "keyboard mash", so a cluster of mashed keys is called
that and any other cluster loses nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from brb_pipeline.core import SEED
from brb_pipeline.core.insights.labels.base import NOISE_LABEL, ClusterDocs, ClusterLabel
from brb_pipeline.core.insights.labels.text import message_bodies, name_tokens, name_words, tokenize

log = logging.getLogger(__name__)


class TfidfLabeler:
    """Class-based TF-IDF labels ("Travel · flights · airport"). Deterministic, offline.

    Args:
        n_terms: terms kept per cluster in ``ClusterLabel.terms``.
        label_terms: terms joined into the label phrase (2-3 reads well).
        ngram_range: word n-grams counted; (1, 2) adds bigrams such as "birthday party".
        min_df: smallest number of chunks a term must occur in (across all clusters);
            applied only when there are at least 20 chunks, so tiny inputs still get labels.
        max_docs: chunks read per cluster at most (a seeded sample beyond it): top terms of a
            large cluster are stable long before its 10,000th chunk, and this bounds the time
            and memory of a full-corpus run.
        seed: seeds that sample.
        names: people's display names (contacts); their words are never terms (each chunk's
            own senders are dropped regardless). See :func:`name_tokens`.
    """

    source = "tfidf"
    VERSION = 3  # 2: more chat filler, contact names dropped; 3: keyboard mash is one term
    kind = f"tfidf/v{VERSION}"

    def __init__(self, *, n_terms: int = 10, label_terms: int = 3,
                 ngram_range: tuple[int, int] = (1, 2), min_df: int = 2, max_docs: int = 1500,
                 seed: int = SEED, names: Iterable[str] = ()) -> None:
        self.names = name_tokens(names)
        self.n_terms = n_terms
        self.max_docs = max_docs
        self.seed = seed
        self.label_terms = label_terms
        self.ngram_range = ngram_range
        self.min_df = min_df

    def label(self, clusters: Sequence[ClusterDocs]) -> list[ClusterLabel]:
        """Label every cluster against all the others. Noise (-1) gets "Unclustered"."""
        from sklearn.feature_extraction.text import CountVectorizer

        docs: list[list[str]] = []  # per chunk: tokens after cleaning
        owner: list[int] = []  # per chunk: index into clusters
        rng = np.random.default_rng(self.seed)
        for ci, c in enumerate(clusters):
            texts_in = c.texts
            if len(texts_in) > self.max_docs:
                keep = np.sort(rng.choice(len(texts_in), self.max_docs, replace=False))
                texts_in = [texts_in[i] for i in keep]
            for content in texts_in:
                texts, senders = message_bodies(content)
                drop = name_words(senders) | self.names
                doc: list[str | None] = []
                for text in texts:  # a gap between messages too: no n-gram spans two
                    doc += tokenize(text, drop, keep_gaps=True, mash=True) + [None]
                docs.append(doc)
                owner.append(ci)
        results: list[ClusterLabel] = []
        scores = None
        vocab = np.empty(0, dtype=object)
        if any(t is not None for doc in docs for t in doc):
            lo, hi = self.ngram_range

            def analyzer(tokens: list[str | None]) -> list[str]:
                grams = [t for t in tokens if t is not None] if lo <= 1 else []
                for k in range(max(2, lo), hi + 1):
                    for i in range(len(tokens) - k + 1):
                        window = tokens[i:i + k]
                        # No n-gram across a removed word; "wait wait" is not a phrase.
                        if None not in window and len(set(window)) == k:
                            grams.append(" ".join(window))  # type: ignore[arg-type]
                return grams

            min_df = self.min_df if len(docs) >= 20 else 1
            try:
                vec = CountVectorizer(analyzer=analyzer, min_df=min_df)
                counts = vec.fit_transform(docs)
            except ValueError:  # every term below min_df
                vec = CountVectorizer(analyzer=analyzer, min_df=1)
                counts = vec.fit_transform(docs)
            vocab = vec.get_feature_names_out()
            scores = _ctfidf(counts, np.asarray(owner), len(clusters))
        for ci, c in enumerate(clusters):
            if c.cluster_id < 0:
                results.append(ClusterLabel(c.cluster_id, NOISE_LABEL, [], self.source))
                continue
            terms = _top_terms(scores[ci], vocab, self.n_terms) if scores is not None else []
            label = label_phrase(terms, self.label_terms) or f"Cluster {c.cluster_id}"
            results.append(ClusterLabel(c.cluster_id, label, terms, self.source))
        log.info("Labeling - c-TF-IDF labels for %d clusters", len(clusters))
        return results


def _ctfidf(counts: Any, owner: np.ndarray, n_classes: int) -> np.ndarray:
    """c-TF-IDF (k, V) dense scores from a (docs, V) count matrix and each doc's class index."""
    import scipy.sparse as sp

    onehot = sp.csr_matrix((np.ones(owner.size), (owner, np.arange(owner.size))),
                           shape=(n_classes, owner.size))
    per_class = (onehot @ counts).toarray().astype(np.float64)  # (k, V)
    words = per_class.sum(axis=1, keepdims=True)
    tf = per_class / np.maximum(words, 1.0)
    freq = per_class.sum(axis=0)
    avg = words.sum() / max(1, int((words[:, 0] > 0).sum()))
    idf = np.log1p(avg / np.maximum(freq, 1.0))
    return tf * idf[None, :]


def _top_terms(row: np.ndarray, vocab: np.ndarray, n: int) -> list[str]:
    """Top ``n`` terms by score; ties broken alphabetically so the result is deterministic."""
    nz = np.flatnonzero(row > 0)
    if nz.size == 0:
        return []
    if nz.size > 4 * n + 64:  # only the best few need the exact tie-broken sort
        cut = np.partition(row[nz], -(4 * n))[-(4 * n)]
        nz = nz[row[nz] >= cut]
    order = sorted(nz.tolist(), key=lambda j: (-round(float(row[j]), 12), vocab[j]))
    return [str(vocab[j]) for j in order[:n]]


def label_phrase(terms: Sequence[str], k: int = 3) -> str:
    """Short readable label from ranked terms: "Travel · flights · airport".

    A bigram whose words are both already chosen replaces them, in the place of the first one
    ("tarifi, çorbası, mercimek, ..., mercimek çorbası" -> "Tarifi · mercimek çorbası · ...");
    a term overlapping a chosen term otherwise (same word, or its plural) is skipped so the label
    does not repeat itself ("birthday party · birthday" -> "Birthday party · cake",
    "school · schools" -> "School · ...").
    """
    def overlaps(term: str, chosen: list[str]) -> bool:
        mine = {_stem(w) for w in term.split()}
        return any(mine & {_stem(w) for w in c.split()} for c in chosen)

    chosen: list[str] = []
    for term in terms:
        words = term.split()
        chosen_words = {c: i for i, c in enumerate(chosen) if " " not in c}  # unigram -> slot
        if len(words) > 1 and all(w in chosen_words for w in words):
            first = min(chosen_words[w] for w in words)
            chosen = [term if i == first else c for i, c in enumerate(chosen)
                      if i == first or c not in words]
            continue
        if len(chosen) >= k or overlaps(term, chosen):
            continue
        chosen.append(term)
    if len(chosen) < k:  # a merge freed a slot: fill it from the ranking
        for term in terms:
            if len(chosen) >= k:
                break
            if term not in chosen and not overlaps(term, chosen):
                chosen.append(term)
    if not chosen:
        return ""
    first = chosen[0]
    return " · ".join([first[:1].upper() + first[1:]] + chosen[1:])


def _stem(word: str) -> str:
    """Crude plural folding for overlap checks only ("schools" ~ "school", "smells" ~ "smell")."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word

