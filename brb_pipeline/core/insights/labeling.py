"""Human-readable cluster labels: offline c-TF-IDF, an embedding re-rank of it, and mlx-lm.

- :class:`TfidfLabeler` (the default, deterministic, no model): each cluster's chunk texts form
  one class document; terms frequent in the cluster and rare elsewhere win (c-TF-IDF, as in
  BERTopic: ``tf(t, c) * log(1 + avg_words_per_class / freq(t))``). Sender prefixes and header
  lines are stripped first and the sender names dropped, so labels describe what people talk
  about, not who talks. The token pattern is Unicode-aware (Turkish, Arabic with diacritics,
  Cyrillic, CJK runs).
- :class:`EmbeddingLabeler` (the default when the pipeline has its embedder): re-ranks the
  c-TF-IDF candidates (words and 2-word phrases) by cosine similarity to the cluster's centroid
  in the store's embedding space, with MMR for diversity (BERTopic's ``KeyBERTInspired``), after
  dropping people's names and chat filler. c-TF-IDF finds words that are *frequent* in a
  cluster; many of those ("alrighty", a nickname, "df") are not what the cluster is *about*.
- :class:`MLXLMLabeler`: asks a local mlx-lm model for a 2-5 word topic per cluster, parses the
  answer defensively (:func:`parse_topic`) and falls back to the offline label on junk.
- :class:`LabelCache`: labels keyed by labeler kind (:func:`labeler_kind`: name, version,
  model) and cluster membership (sha1 of the sorted chunk ids), so an unchanged cluster is not
  re-labelled on the next run and a changed labeler never reuses an older one's labels.

Labelers chain as in BERTopic's representation models: a :class:`RefiningLabeler` refines the
labels of its ``fallback`` cluster by cluster (c-TF-IDF -> embedding re-rank -> LLM).

Nothing here logs message text; log lines carry counts only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from brb_pipeline.core.errors import BrbError

log = logging.getLogger(__name__)


class LabelerModelMissingError(BrbError, FileNotFoundError):
    """``labeler_model_path`` does not point at a local model directory."""

# --- Text cleaning --------------------------------------------------------------------------

# "<sender> (HH:MM): <text>" as written by core/chunking.message_line.
_MESSAGE_LINE = re.compile(r"^(?P<sender>.{1,120}?) \((?:[01]?\d|2[0-3]):[0-5]\d\): ?(?P<text>.*)$")
_HEADER_LINE = re.compile(r"^(?:search_document:\s*)?Conversation with .*\d{4}-\d{2}-\d{2}")
# Attachment tags and the trailing tapback list ("  [♥ 👍]") added by the chunker.
_TAGS = re.compile(r"\[(?:\d+ )?attachments?\]|\s{2}\[[^\]]*\]\s*$")
_URL = re.compile(r"\b(?:https?://|www\.)\S+", re.IGNORECASE)

# A word: a letter, then letters or combining marks (Arabic harakat, Devanagari vowel signs,
# decomposed accents), optionally hyphenated. Python's \w excludes combining marks, which would
# shred vocalized Arabic into single letters. Apostrophes split ("İstanbul'a" -> "istanbul",
# "don't" -> "don"), which drops Turkish case suffixes and English contractions alike.
_MARKS = "\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed" \
         "\u0900-\u0903\u093a-\u094f\u0e31\u0e34-\u0e3a\u0e47-\u0e4e\u200c\u200d"
_LETTERS = rf"(?:[^\W\d_]|[{_MARKS}])*"
_WORD = re.compile(rf"[^\W\d_]{_LETTERS}(?:-[^\W\d_]{_LETTERS})*")

# Chat filler and very common words in the languages the corpus is known to contain. English
# stop words come from scikit-learn; these are added on top.
CHAT_FILLER = frozenset("""
lol lmao lmfao rofl haha hahaha hahahaha hehe hehehe heh hah ha ah ahh oh ohh ooh uh uhh um umm hmm
hmmm hm mm mmm yeah yea yeh yep yup yes yess ya yah nah nope no ok okay okk kk k sure fine cool nice
great good thanks thank thx ty pls plz please sorry hey hi hello hiya yo bye gonna wanna gotta
like just really actually literally maybe probably pretty lot lots thing things stuff dont don
doesnt didnt cant couldnt wont wouldnt isnt im ive ill id youre youve theyre thats whats lets
omg idk tbh imo btw brb ttyl np wow woah aw aww awww xd xo xoxo ok'd u ur r y n tho though gotcha
oh yeah alright right know think got get going want need said say tell told
did does doing done mean means meant guess called true wait heard feel feel felt wanted make
makes made go goes went come comes came look looks looking way kind sort agree totally hope
says saying talk talking thought thinking something anything everything nothing someone
anyone everyone bit sounds sound try trying tried better best new time times people person
day days today tomorrow yesterday tonight fun crazy interesting awesome amazing funny
definitely exactly absolutely favorite favourite stop guys guy man dude bro omg wtf yesterday
gosh goodness honestly basically seriously wanna anyway anyways sounds
isn aren wasn weren hasn haven hadn shouldn ain didn doesn couldn wouldn won ll ve re
attachment attachments emoji image http https www com
alrighty alrite aight ight yeet yeeted welp yikes oof bruh lmk ikr smh ngl fr rn tbf hbu wyd
yall gg ooo oooh ahhh hehehe lolol okie okey oki kay ayy ayyy mhm nvm jk anyways
hahah lmaooo omgg heyy ugh ew meh dang damn darn geez jeez whoa yay woo woohoo kinda sorta
asdf sdf df
ve bir bu da de ne mi mı mu mü ama için çok evet hayır tamam şey gibi ben sen o biz siz onlar
var yok daha kadar sonra şimdi abi ya yani hadi tamamdır tmm slm mrb
و في من على إلى أن هذا هذه ما لا نعم كان مع عن يا انا أنا انت هو هي
el la los las de del que y en un una es por con para no si lo le se al mas pero como
jaja jajaja jeje jiji vale bueno pues oye sí claro vamos venga
ouais oui non mdr ptdr bah bon voilà merci ben hein quoi alors
ja nein genau naja halt mal doch jo na danke bitte
valla vallahi yaa evt tşk tşkler sağol eyvallah
يلا طيب خلاص والله هههه ههههه اوك تمام شكرا
""".split())

# Tokens of contact display names that are not a person's name (a handle's email domain).
_NOT_NAMES = frozenset(
    "gmail googlemail icloud me mac hotmail outlook live yahoo example com org net edu mail "
    "unknown".split())

_STOP_WORDS: frozenset[str] | None = None


def stop_words() -> frozenset[str]:
    """English stop words (scikit-learn) plus :data:`CHAT_FILLER`."""
    global _STOP_WORDS
    if _STOP_WORDS is None:
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        _STOP_WORDS = frozenset(ENGLISH_STOP_WORDS) | CHAT_FILLER
    return _STOP_WORDS


def normalize_case(text: str) -> str:
    """Lower-case, NFC; Turkish dotted capital I becomes ``i`` (``"İ".lower()`` is 2 chars)."""
    return unicodedata.normalize("NFC", text.replace("İ", "i").lower())


def message_bodies(content: str) -> tuple[list[str], set[str]]:
    """Split chunk content into message texts and sender names.

    Drops the header line ("Conversation with ..., date") and the ``<sender> (HH:MM):``
    prefixes, attachment tags, tapback lists and URLs. Lines that do not look like a message or
    a header (a wrapped continuation) are kept as text.

    Args:
        content: chunk text, one message per line, optionally preceded by a header line.

    Returns:
        (texts, senders): message texts in order, and the set of sender names seen.
    """
    texts: list[str] = []
    senders: set[str] = set()
    for i, line in enumerate(content.splitlines()):
        line = line.strip()
        if not line:
            continue
        m = _MESSAGE_LINE.match(line)
        if m:
            senders.add(m.group("sender").strip())
            body = m.group("text")
        elif i == 0 and _HEADER_LINE.match(line):
            continue
        else:
            body = line
        body = " ".join(_URL.sub(" ", _TAGS.sub(" ", body)).split())
        if body:
            texts.append(body)
    return texts, senders


_ELONGATED = re.compile(r"(.)\1{2,}")  # "yesss" -> "yes", "soooo" -> "so"
_LAUGH_FIRST = frozenset("ahlxjkwхه")
_LAUGH = re.compile(r"^(?:(?:a?h+a+)+h?|(?:h+e+)+h?|l+o+l+(?:o+l+)*|x+d+|(?:ja)+j?|(?:ha)+|"
                    r"(?:ah)+|k{3,}|(?:ха)+|(?:هه)+|w{3,})$")


def tokenize(text: str, drop: frozenset[str] | set[str] = frozenset(), *,
             keep_gaps: bool = False) -> list[str | None]:
    """Unicode-aware word tokens (length >= 2), lower-cased; stop words, laughter and ``drop``
    removed; letters repeated 3+ times collapsed ("yesss" -> "yes").

    Args:
        text: one message text.
        drop: extra tokens to remove (e.g. sender-name parts).
        keep_gaps: put ``None`` where a token was removed, so n-grams are not formed across
            removed words ("science (is) born" must not become the bigram "science born").

    Returns:
        Tokens in order (with ``None`` gaps when ``keep_gaps``).
    """
    stops = stop_words()
    out: list[str | None] = []
    for tok in _WORD.findall(_ELONGATED.sub(r"\1", normalize_case(text))):
        if (len(tok) < 2 or tok in stops or tok in drop
                or (tok[0] in _LAUGH_FIRST and _LAUGH.match(tok))):
            if keep_gaps and (not out or out[-1] is not None):
                out.append(None)
            continue
        out.append(tok)
    return out


def _name_tokens(names: Iterable[str]) -> set[str]:
    toks: set[str] = set()
    for name in names:
        toks.update(t.strip("'’-") for t in _WORD.findall(normalize_case(name)))
    return toks


def name_tokens(names: Iterable[str]) -> frozenset[str]:
    """Lower-cased word tokens of people's display names, for dropping from labels.

    ``"Théo Dubois"`` -> {"théo", "dubois"}; an email handle gives its local part
    (``"noor.950@example.org"`` -> {"noor"}); phone numbers give nothing.
    """
    toks: set[str] = set()
    for name in names:
        name = str(name or "")
        if "@" in name:
            name = name.split("@", 1)[0].replace(".", " ").replace("_", " ")
        toks |= _name_tokens([name])
    return frozenset(t for t in toks if len(t) >= 2 and t not in _NOT_NAMES)


# --- Interfaces -----------------------------------------------------------------------------


@dataclass
class ClusterDocs:
    """What a labeler sees of one cluster.

    Attributes:
        cluster_id: the cluster's id (-1 is the noise bucket).
        texts: chunk contents of all (or a capped sample of) the cluster's members.
        centroid_texts: a few representative chunk contents (see :func:`representatives`).
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
    def label(self, clusters: Sequence[ClusterDocs]) -> list[ClusterLabel]:
        """One :class:`ClusterLabel` per input cluster, in input order."""
        ...


@runtime_checkable
class RefiningLabeler(Protocol):
    """A labeler that refines the labels of another (its ``fallback``) cluster by cluster.

    c-TF-IDF contrasts each cluster with all the others, so it must see every cluster; a
    refiner (embedding re-rank, LLM) looks at one cluster at a time, so :func:`label_clusters`
    asks it only about the clusters missing from the cache, handing it the fallback's labels.
    """

    fallback: Labeler

    def label(self, clusters: Sequence[ClusterDocs], *,
              offline: Sequence[ClusterLabel] | None = None) -> list[ClusterLabel]:
        """Refine ``offline`` (the fallback's labels of ``clusters``; computed when None)."""
        ...


NOISE_LABEL = "Unclustered"


# --- Offline c-TF-IDF -----------------------------------------------------------------------


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
    VERSION = 2  # 2: more chat filler, contact names dropped
    kind = f"tfidf/v{VERSION}"

    def __init__(self, *, n_terms: int = 10, label_terms: int = 3,
                 ngram_range: tuple[int, int] = (1, 2), min_df: int = 2, max_docs: int = 1500,
                 seed: int = 42, names: Iterable[str] = ()) -> None:
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
                drop = _name_tokens(senders) | self.names
                doc: list[str | None] = []
                for text in texts:  # a gap between messages too: no n-gram spans two
                    doc += tokenize(text, drop, keep_gaps=True) + [None]
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


# --- Representatives ------------------------------------------------------------------------


def representatives(embeddings: np.ndarray, labels: np.ndarray, cluster_id: int, n: int,
                    seed: int = 42, *, max_candidates: int = 4000) -> np.ndarray:
    """Pick ``n`` representative members: closest to the centroid, then diverse.

    The first ceil(n/2) are the members most similar to the cluster centroid (typical chunks);
    the rest are chosen by farthest-point sampling (each next pick is the member least similar
    to everything picked so far), so several sub-topics get a voice.

    Args:
        embeddings: (N, dim) float L2-normalized embeddings.
        labels: (N,) int cluster ids.
        cluster_id: the cluster to sample.
        n: number of representatives wanted.
        seed: seeds the candidate subsample used for very large clusters.
        max_candidates: cap on members considered by farthest-point sampling.

    Returns:
        (m,) int64 indices into ``embeddings``, m = min(n, cluster size), in pick order.
    """
    members = np.flatnonzero(np.asarray(labels) == cluster_id)
    if members.size == 0 or n <= 0:
        return np.empty(0, dtype=np.int64)
    if members.size <= n:
        cent = embeddings[members].mean(axis=0)
        sims = embeddings[members] @ cent
        return members[np.argsort(-sims, kind="stable")].astype(np.int64)
    emb = np.asarray(embeddings[members], dtype=np.float32)
    cent = emb.mean(axis=0)
    cent /= max(float(np.linalg.norm(cent)), 1e-12)
    sims = emb @ cent
    order = np.argsort(-sims, kind="stable")
    n_close = (n + 1) // 2
    picked = order[:n_close].tolist()
    pool = order[n_close:]
    if pool.size > max_candidates:
        rng = np.random.default_rng(seed)
        pool = np.sort(rng.choice(pool, size=max_candidates, replace=False))
    best = (emb[pool] @ emb[picked].T).max(axis=1)  # similarity to the nearest pick
    while len(picked) < n and pool.size:
        j = int(np.argmin(best))
        picked.append(int(pool[j]))
        best = np.maximum(best, emb[pool] @ emb[pool[j]])
        best[j] = np.inf
    return members[np.asarray(picked, dtype=np.int64)]


# --- Embedding re-rank (KeyBERT-inspired) --------------------------------------------------


class EmbeddingLabeler:
    """c-TF-IDF candidates re-ranked by closeness to the cluster in embedding space.

    As BERTopic's ``KeyBERTInspired``: the fallback's top ``candidates`` terms (words and 2-word
    phrases) are embedded with the store's model, scored by cosine similarity to the cluster's
    centroid, and picked by maximal marginal relevance, so the label's words are about the
    cluster and not three near-synonyms. The centroid is :attr:`ClusterDocs.centroid` minus
    :attr:`ClusterDocs.corpus_mean` when they come from the same model (so a word close to every
    chat, "chatting", does not win everywhere), else the mean of the cluster's embedded
    representative texts. Terms containing a person's name or chat filler are
    dropped before ranking; a cluster left without candidates keeps the fallback's label.

    Args:
        embedder: anything with ``embed(texts) -> (n, dim)`` L2-normalized float32 rows and a
            ``model_id`` (the :class:`~brb_pipeline.core.embedding.models.Embedder` protocol).
        fallback: the candidate source; default a :class:`TfidfLabeler` with ``candidates``
            terms and ``names``.
        candidates: c-TF-IDF terms considered per cluster.
        n_terms: terms kept in ``ClusterLabel.terms``, in pick order.
        label_terms: terms joined into the label phrase.
        diversity: MMR trade-off in [0, 1]: 0 ranks by similarity alone, 1 by novelty alone.
        names: people's display names; terms containing one of their words are dropped.
    """

    source = "embedding"
    VERSION = 1

    def __init__(self, embedder: Any, fallback: Labeler | None = None, *, candidates: int = 30,
                 n_terms: int = 10, label_terms: int = 3, diversity: float = 0.3,
                 names: Iterable[str] = ()) -> None:
        if not 0.0 <= diversity <= 1.0:
            raise ValueError(f"diversity must be in [0, 1], not {diversity}")
        self.embedder = embedder
        self.fallback: Labeler = fallback or TfidfLabeler(n_terms=candidates, names=names)
        self.candidates = candidates
        self.n_terms = n_terms
        self.label_terms = label_terms
        self.diversity = diversity
        self.names = name_tokens(names)

    @property
    def kind(self) -> str:
        """Cache namespace: the fallback's kind, this version, its parameters and the model."""
        return (f"{labeler_kind(self.fallback)}+embed/v{self.VERSION}"
                f"(c={self.candidates},d={self.diversity:g}):{getattr(self.embedder, 'model_id', '?')}")

    def keep_term(self, term: str) -> bool:
        """False for a term with a name, filler or stop word in it (also "yeet" inside "yeet lol")."""
        stops = stop_words()
        words = normalize_case(term).split()
        return bool(words) and not any(w in stops or w in self.names for w in words)

    def label(self, clusters: Sequence[ClusterDocs], *,
              offline: Sequence[ClusterLabel] | None = None) -> list[ClusterLabel]:
        """Re-rank the fallback's terms of every cluster (one ``embed`` call for all terms).

        Args:
            clusters: the clusters to label.
            offline: the fallback's labels of ``clusters`` (same order), e.g. c-TF-IDF computed
                against every cluster while only some are asked; computed when None.
        """
        if offline is None:
            offline = self.fallback.label(clusters)
        pools: list[list[str]] = []
        for docs, base in zip(clusters, offline):
            pool = [] if docs.cluster_id < 0 else [t for t in base.terms if self.keep_term(t)]
            pools.append(list(dict.fromkeys(pool))[: self.candidates])
        vocab = sorted({t for pool in pools for t in pool})
        if not vocab:
            return [self._as_is(base) for base in offline]
        prefix = str(getattr(self.embedder, "document_prefix", "") or "")
        vecs = _unit(np.asarray(self.embedder.embed([prefix + t for t in vocab]), np.float32))
        row = {t: i for i, t in enumerate(vocab)}
        centroids = self._centroids(clusters, pools, vecs.shape[1], prefix)
        out: list[ClusterLabel] = []
        for docs, base, pool, cent in zip(clusters, offline, pools, centroids):
            if not pool or cent is None:
                out.append(self._as_is(base))
                continue
            emb = vecs[[row[t] for t in pool]]
            order = mmr(emb, emb @ cent, min(self.n_terms, len(pool)), self.diversity)
            terms = [pool[j] for j in order]
            label = label_phrase(terms, self.label_terms) or base.label
            out.append(ClusterLabel(docs.cluster_id, label, terms, self.source))
        log.info("Labeling - embedding re-rank of %d terms for %d clusters", len(vocab), len(out))
        return out

    def _as_is(self, base: ClusterLabel) -> ClusterLabel:
        return ClusterLabel(base.cluster_id, base.label, list(base.terms[: self.n_terms]),
                            base.source)

    def _centroids(self, clusters: Sequence[ClusterDocs], pools: Sequence[list[str]], dim: int,
                   prefix: str) -> list[np.ndarray | None]:
        """(dim,) unit centroid per cluster: the stored one when it fits, else embedded texts."""
        out: list[np.ndarray | None] = [None] * len(clusters)
        todo: list[tuple[int, list[str]]] = []
        model = getattr(self.embedder, "model_id", None)
        for i, (docs, pool) in enumerate(zip(clusters, pools)):
            if not pool:
                continue
            cent = docs.centroid
            if (cent is not None and docs.centroid_model == model
                    and np.asarray(cent).shape == (dim,)):
                cent = _unit(np.asarray(cent, np.float32)[None, :])[0]
                bg = docs.corpus_mean
                if bg is not None and np.asarray(bg).shape == (dim,):
                    apart = cent - np.asarray(bg, np.float32)
                    if np.linalg.norm(apart) > 0.05:  # else the cluster is (nearly) the corpus
                        cent = apart
                out[i] = _unit(cent[None, :])[0]
            else:
                texts = docs.centroid_texts or docs.texts[:8]
                if texts:
                    todo.append((i, [prefix + t for t in texts]))
        if todo:
            vecs = _unit(np.asarray(self.embedder.embed([t for _, ts in todo for t in ts]),
                                    np.float32))
            at = 0
            for i, ts in todo:
                out[i] = _unit(vecs[at:at + len(ts)].mean(axis=0, keepdims=True))[0]
                at += len(ts)
        return out


def _unit(v: np.ndarray) -> np.ndarray:
    """Rows of ``v`` (n, dim) scaled to length 1 (zero rows stay zero)."""
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def mmr(emb: np.ndarray, relevance: np.ndarray, k: int, diversity: float) -> list[int]:
    """Maximal marginal relevance: ``k`` row indices, each maximizing
    ``(1 - diversity) * relevance - diversity * (max similarity to the rows already picked)``.

    Args:
        emb: (n, dim) unit rows.
        relevance: (n,) similarity of each row to the target.
        k: rows to pick (at most n).
        diversity: in [0, 1].

    Returns:
        Picked indices in pick order; ties go to the lower index (the fallback's rank).
    """
    n = emb.shape[0]
    k = min(k, n)
    if k <= 0:
        return []
    picked = [int(np.argmax(relevance))]
    redundancy = emb @ emb[picked[0]]
    while len(picked) < k:
        score = (1.0 - diversity) * relevance - diversity * redundancy
        score[picked] = -np.inf
        j = int(np.argmax(score))
        picked.append(j)
        redundancy = np.maximum(redundancy, emb @ emb[j])
    return picked


# --- mlx-lm labeler -------------------------------------------------------------------------

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
    """Labels from a local mlx-lm model, with the offline labeler as fallback.

    Args:
        model_path: a local model directory (config.json, *.safetensors, tokenizer files).
            Never a hub id: nothing is downloaded.
        fallback: labeler used for keywords and whenever the model's answer is junk.
        max_tokens: generation cap per cluster (a topic is a few tokens).
        samples: representative texts per cluster put in the prompt.
        seed: seeds MLX's random state (generation itself is greedy).

    Attributes:
        fallbacks: number of clusters that got the fallback label in the last ``label`` call.
    """

    source = "llm"

    def __init__(self, model_path: Path, fallback: Labeler, *, max_tokens: int = 24,
                 samples: int = 8, seed: int = 42) -> None:
        self.model_path = Path(model_path).expanduser()
        self.fallback = fallback
        self.max_tokens = max_tokens
        self.samples = samples
        self.seed = seed
        self.fallbacks = 0
        self._model: Any = None
        self._tokenizer: Any = None

    @property
    def kind(self) -> str:
        """Cache namespace: the model directory's name and the fallback's kind."""
        return f"llm:{self.model_path.name}|{labeler_kind(self.fallback)}"

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

    def label(self, clusters: Sequence[ClusterDocs], *,
              offline: Sequence[ClusterLabel] | None = None) -> list[ClusterLabel]:
        """One prompt per cluster; junk answers get the fallback label (counted).

        Args:
            clusters: the clusters to label.
            offline: fallback labels for ``clusters`` (same order) when the caller already has
                them, e.g. c-TF-IDF computed against every cluster while only some are asked.
        """
        self.load()
        if offline is None:
            offline = self.fallback.label(clusters)
        out: list[ClusterLabel] = []
        self.fallbacks = 0
        for docs, base in zip(clusters, offline):
            if docs.cluster_id < 0:
                out.append(base)
                continue
            trimmed = ClusterDocs(docs.cluster_id, docs.texts,
                                  list(docs.centroid_texts[: self.samples]))
            prompt = build_prompt(self._tokenizer, trimmed, base.terms)
            try:
                topic = parse_topic(self.generate(prompt))
            except Exception as exc:  # generation failure for one cluster must not stop the map
                log.warning("Labeling - generation failed for cluster %d (%s)", docs.cluster_id,
                            type(exc).__name__)
                topic = None
            if topic is None:
                self.fallbacks += 1
                out.append(ClusterLabel(docs.cluster_id, base.label, base.terms, "llm-fallback"))
            else:
                out.append(ClusterLabel(docs.cluster_id, topic, base.terms, self.source))
        log.info("Labeling - model labels for %d clusters, %d fell back to c-TF-IDF",
                 len(out), self.fallbacks)
        return out


def make_labeler(settings: object, embedder: Any | None = None,
                 names: Iterable[str] = ()) -> Labeler:
    """The configured labeler chain: c-TF-IDF, re-ranked by ``embedder`` when one is given,
    then mlx-lm when ``settings.labeler_model_path`` is set.

    Args:
        settings: anything with ``labeler_model_path`` and ``seed``.
        embedder: the store's embedding model (see :class:`EmbeddingLabeler`); None for plain
            c-TF-IDF.
        names: people's display names, never used in labels.

    The LLM is loaded lazily, on the first ``label`` call.
    """
    path = getattr(settings, "labeler_model_path", None)
    offline: Labeler = TfidfLabeler(names=names)
    if embedder is not None:
        offline = EmbeddingLabeler(embedder, names=names)
    if path:
        return MLXLMLabeler(Path(path), offline, seed=int(getattr(settings, "seed", 42)))
    return offline


# --- Cache ----------------------------------------------------------------------------------


def membership_hash(chunk_ids: Iterable[str]) -> str:
    """sha1 hex of the sorted, newline-joined chunk ids of one cluster."""
    h = hashlib.sha1()
    for cid in sorted(chunk_ids):
        h.update(cid.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


class LabelCache:
    """Labels keyed by (labeler kind, membership hash), stored as one small JSON file.

    Args:
        path: JSON file; created on :meth:`save`, a damaged file is treated as empty.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._data: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            try:
                loaded = json.loads(self.path.read_text(encoding="utf-8"))
                if isinstance(loaded, dict):
                    self._data = loaded
            except (OSError, ValueError):
                log.warning("Labeling - label cache %s unreadable, starting empty", self.path.name)

    def __len__(self) -> int:
        return len(self._data)

    @staticmethod
    def key(kind: str, member_hash: str) -> str:
        return f"{kind}:{member_hash}"

    def get(self, kind: str, member_hash: str, cluster_id: int) -> ClusterLabel | None:
        entry = self._data.get(self.key(kind, member_hash))
        if not entry:
            return None
        return ClusterLabel(cluster_id, entry["label"], list(entry["terms"]), entry["source"])

    def put(self, kind: str, member_hash: str, label: ClusterLabel) -> None:
        self._data[self.key(kind, member_hash)] = {
            "label": label.label, "terms": label.terms, "source": label.source}

    def save(self) -> None:
        """Write atomically (temp file + rename)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".labels-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self._data, f, ensure_ascii=False, sort_keys=True)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def labeler_kind(labeler: Any) -> str:
    """Cache namespace of a labeler: its ``kind`` (name, version, parameters, models, e.g.
    "tfidf/v2+embed/v1(c=30,d=0.3):all-MiniLM-L6-v2@051e2de6"), else its ``source``."""
    return str(getattr(labeler, "kind", None) or getattr(labeler, "source", type(labeler).__name__))


def label_clusters(labeler: Labeler, clusters: Sequence[ClusterDocs],
                   members: Mapping[int, Sequence[str]], cache: LabelCache | None = None,
                   reuse: Mapping[int, ClusterLabel] | None = None,
                   ) -> tuple[list[ClusterLabel], int]:
    """Label clusters, reusing cached labels for clusters whose membership did not change.

    Args:
        labeler: any :class:`Labeler`.
        clusters: the clusters to label.
        members: cluster id -> its chunk ids (the membership that is hashed).
        cache: optional :class:`LabelCache`; saved when anything new was labelled.
        reuse: cluster id -> a label to keep as is (the caller judged the membership close
            enough to the one it was made from); neither asked for nor written to the cache.

    Returns:
        (labels in input order, number of cache hits; reused labels are not counted).
    """
    reuse = reuse or {}
    if cache is None and not reuse:
        return labeler.label(clusters), 0
    kind = labeler_kind(labeler)
    hashes = [membership_hash(members.get(c.cluster_id, ())) for c in clusters]
    kept = [_relabel(reuse.get(c.cluster_id), c.cluster_id) for c in clusters]
    result: list[ClusterLabel | None] = [
        k or (cache.get(kind, h, c.cluster_id) if cache is not None else None)
        for c, h, k in zip(clusters, hashes, kept)]
    hits = sum(r is not None and k is None for r, k in zip(result, kept))
    todo = [i for i, r in enumerate(result) if r is None]
    if todo:
        for i, lab in zip(todo, _label_some(labeler, clusters, todo)):
            result[i] = lab
        if cache is not None:
            for i in todo:
                lab = result[i]
                if lab is not None and lab.source != "llm-fallback":  # retry the model next time
                    cache.put(kind, hashes[i], lab)
            cache.save()
    log.info("Labeling - %d clusters, %d from cache, %d kept", len(clusters), hits,
             sum(k is not None for k in kept))
    return [r for r in result if r is not None], hits


def _label_some(labeler: Labeler, clusters: Sequence[ClusterDocs],
                todo: Sequence[int]) -> list[ClusterLabel]:
    """Labels of ``clusters[i] for i in todo``. A plain labeler (c-TF-IDF contrasts a cluster
    with the rest) sees every cluster; a :class:`RefiningLabeler` down the chain is asked only
    about the missing ones, with its fallback's labels of them."""
    if isinstance(labeler, RefiningLabeler):
        base = _label_some(labeler.fallback, clusters, todo)
        return labeler.label([clusters[i] for i in todo], offline=base)
    fresh = labeler.label(clusters)
    return [fresh[i] for i in todo]


def _relabel(label: ClusterLabel | None, cluster_id: int) -> ClusterLabel | None:
    """``label`` carried to ``cluster_id`` (None stays None)."""
    if label is None:
        return None
    return ClusterLabel(cluster_id, label.label, list(label.terms), label.source)
