"""Cluster labels: c-TF-IDF on multilingual chat, the answer parser, the mlx-lm labeler on a
tiny random-weight model built here, and the membership-keyed cache."""

from __future__ import annotations


import numpy as np
import pytest

from brb_pipeline.core.insights.labels import (
    NOISE_LABEL,
    ClusterDocs,
    ClusterLabel,
    LabelCache,
    MASH_TERM,
    LabelChain,
    MLXLMLabeler,
    TfidfLabeler,
    build_prompt,
    label_clusters,
    keyboard_mash,
    label_phrase,
    membership_hash,
    message_bodies,
    parse_topic,
    representatives,
    tokenize,
)
from brb_pipeline_tests.helpers.tiny_model import tiny_model as _tiny_model


def _chunk(lines: list[tuple[str, str]], header: bool = True) -> str:
    body = [f"{who} ({9 + i % 12:02d}:{(7 * i) % 60:02d}): {text}" for i, (who, text) in
            enumerate(lines)]
    head = ["Conversation with Ayşe Yılmaz, 2024-03-01 09:00–10:00"] if header else []
    return "\n".join(head + body)


TRAVEL = [
    [("Ayşe Yılmaz", "did you book the flights to Lisbon yet"), ("Me", "yes flights booked, airport at 6am lol")],
    [("Me", "the airport shuttle leaves at 5"), ("Ayşe Yılmaz", "ok haha bring passports, flights are early")],
    [("Ayşe Yılmaz", "hotel near the airport?"), ("Me", "yeah hotel booked, flights confirmed")],
    [("Me", "passport renewal done for the flights"), ("Ayşe Yılmaz", "airport lounge then!")],
]
TURKISH = [
    [("Mehmet", "akşam yemeği için mercimek çorbası yaptım"), ("Me", "tarifi gönderir misin, çorbası harika")],
    [("Mehmet", "börek için yufka aldım, akşam yemeği bizde"), ("Me", "tamam geliyorum, mercimek çorbası da olsun")],
    [("Me", "annemin börek tarifi çok güzel"), ("Mehmet", "yufka ve peynir lazım, tarifi at")],
    [("Mehmet", "çorbası için mercimek ıslatılmalı mı"), ("Me", "evet, tarifi öyle diyor")],
]
FOOTBALL = [
    [("Sam", "did you watch the match, that penalty was a joke"), ("Me", "referee was blind, penalty never")],
    [("Me", "league table looks rough after that match"), ("Sam", "goalkeeper saved a penalty though")],
    [("Sam", "tickets for the match on saturday"), ("Me", "stadium seats near the goalkeeper end")],
    [("Me", "the referee gave another penalty"), ("Sam", "league is rigged haha")],
]
ARABIC = [
    [("Omar", "مَرْحَبًا، هل رأيت مباراة كرة القدم"), ("Me", "نعم المباراة كانت رائعة")],
    [("Omar", "المباراة غدا في الملعب"), ("Me", "سأشتري التذاكر للمباراة")],
    [("Me", "الملعب مزدحم جدا"), ("Omar", "المباراة النهائية الأسبوع القادم")],
]


def _docs() -> list[ClusterDocs]:
    groups = [TRAVEL, TURKISH, FOOTBALL, ARABIC]
    docs = [ClusterDocs(i, [_chunk(c, header=(j % 2 == 0)) for j, c in enumerate(g)])
            for i, g in enumerate(groups)]
    for d in docs:
        d.centroid_texts = d.texts[:2]
    return docs


# --- Cleaning and tokens --------------------------------------------------------------------


def test_message_bodies_strip_header_prefixes_and_tags():
    texts, senders = message_bodies(
        "Conversation with Ayşe, 2024-01-02 10:00–11:00\n"
        "Ayşe (19:38): see you tomorrow [attachment]\n"
        "Me (19:40): ok  [♥ 👍]\n"
        "check https://example.com/x now")
    assert texts == ["see you tomorrow", "ok", "check now"]
    assert senders == {"Ayşe", "Me"}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Flights to LISBON lol", ["flights", "lisbon"]),  # case folded, filler dropped
        ("İSTANBUL'a gidiyoruz", ["istanbul", "gidiyoruz"]),  # dotted İ, apostrophe suffix
        ("مَرْحَبًا بِكَ", ["مَرْحَبًا", "بِكَ"]),  # harakat kept inside the word
        ("東京 trip 2024 x", ["東京", "trip"]),  # CJK run is a token; digits, 1-letter dropped
        ("Sooo hungryyy hahaha LOOOL xD", ["hungry"]),  # elongation folded, laughter dropped
    ],
)
def test_tokenize_is_unicode_aware(text, expected):
    assert tokenize(text) == expected


# --- c-TF-IDF -------------------------------------------------------------------------------


def test_tfidf_labels_are_topical_and_multilingual():
    labels = TfidfLabeler().label(_docs())
    by_id = {lab.cluster_id: lab for lab in labels}
    assert [lab.source for lab in labels] == ["tfidf"] * 4
    assert {"flights", "airport"} <= set(by_id[0].terms[:4])
    # The Turkish cluster is labelled with Turkish words.
    assert set(by_id[1].terms[:5]) & {"mercimek", "çorbası", "tarifi", "börek", "yufka"}
    assert {"penalty"} <= set(by_id[2].terms[:3])
    assert any("المباراة" in t for t in by_id[3].terms[:3])
    # Sender names, header words and filler never become terms.
    all_terms = {t for lab in labels for term in lab.terms for t in term.split()}
    assert not all_terms & {"ayşe", "yılmaz", "mehmet", "sam", "omar", "me", "conversation",
                            "lol", "haha", "ok", "yeah"}
    # Readable phrase from 2-3 terms, first capitalized.
    assert by_id[0].label[0].isupper() and 2 <= len(by_id[0].label.split(" · ")) <= 3
    assert TfidfLabeler().label(_docs()) == labels  # deterministic


def test_tokenize_keeps_gaps_so_bigrams_do_not_bridge_removed_words():
    assert tokenize("pizza and the pasta night", keep_gaps=True) == ["pizza", None, "pasta",
                                                                      "night"]
    docs = [ClusterDocs(0, ["Me (10:00): pizza and pasta night"] * 3),
            ClusterDocs(1, ["Me (10:00): football match tonight"] * 3)]
    terms = TfidfLabeler().label(docs)[0].terms
    assert "pasta night" in terms and "pizza pasta" not in terms


@pytest.mark.parametrize("token", ["asd", "asdfas", "dfd", "fds", "sdfjasd", "jladfljfjasd", "alsdjf", "laksjdf", "adgasdfasd", "jkl", "xcvb", "bcdefghijk"])
def test_keyboard_mash_is_not_a_word(token):
    assert keyboard_mash(token)
    assert tokenize(f"{token} lisbon") == ["lisbon"]
    assert tokenize(f"{token} lisbon", keep_gaps=True, mash=True) == [None, MASH_TERM, None, "lisbon"]


@pytest.mark.parametrize("word", ["has", "sad", "salad", "salads", "alaska", "dallas", "flask", "nasa", "sash", "adds", "qwerty",
                                  "fps", "html", "jollof", "chorizo", "mercimek", "çorbası", "東京"])
def test_keyboard_mash_leaves_words_alone(word):
    assert not keyboard_mash(word)


def test_keyboard_mash_is_never_a_term_but_names_its_cluster():
    mash = [f"Me ({10 + i}:00): asdfas dfd sdfjasd" for i in range(4)]
    trip = [f"Me ({10 + i}:00): lisbon trip flights, asd sorry" for i in range(4)]
    labels = TfidfLabeler().label([ClusterDocs(0, mash), ClusterDocs(1, trip)])
    assert labels[0].terms[0] == MASH_TERM and labels[0].label.startswith("Keyboard mash")
    words = {w for lab in labels for t in lab.terms for w in t.split()}
    assert not words & {"asdfas", "dfd", "sdfjasd", "asd"}
    assert MASH_TERM not in labels[1].terms[:3]  # one slip of the keys does not name a trip


def test_tfidf_noise_empty_and_textless_clusters():
    docs = [ClusterDocs(-1, ["Me (10:00): whatever"]), ClusterDocs(3, []),
            ClusterDocs(4, ["Me (10:00): ok lol"])]
    labels = TfidfLabeler().label(docs)
    assert labels[0].label == NOISE_LABEL
    assert labels[1].label == "Cluster 3" and labels[1].terms == []
    assert labels[2].label == "Cluster 4"  # only filler words: no terms, a neutral label
    assert TfidfLabeler().label([]) == []


@pytest.mark.parametrize(
    "terms, expected",
    [
        (["travel", "flights", "airport", "hotel"], "Travel · flights · airport"),
        # A unigram already inside a chosen bigram is skipped.
        (["birthday party", "birthday", "cake", "balloons"], "Birthday party · cake · balloons"),
        # A bigram of two chosen unigrams replaces them; the freed slot is filled.
        (["tarifi", "çorbası", "mercimek", "akşam", "mercimek çorbası"],
         "Tarifi · mercimek çorbası · akşam"),
        (["çorbası"], "Çorbası"),
        ([], ""),
    ],
)
def test_label_phrase(terms, expected):
    assert label_phrase(terms) == expected


# --- Parser ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Weekend hiking trips", "Weekend hiking trips"),  # a good answer passes through
        ('Sure! The topic is: "Family dinner plans".', "Family dinner plans"),  # chatter+quotes
        ("**Topic:** job interviews", "Job interviews"),  # markdown, lead-in, capitalized
        ("Here is a 2-5 word topic: Moving house\nThese messages discuss...", "Moving house"),
        ("<think>they talk about flats</think>\nApartment hunting", "Apartment hunting"),
        ("Birthday party planning and", "Birthday party planning"),  # truncated mid-phrase
        ("<think>the user wants a topic so I", None),  # truncated inside reasoning
        ("", None),  # empty
        ("   \n  ", None),  # whitespace only
        ("the the the the", None),  # repeated tokens
        ("w1 w1 w2", None),  # repeated debris
        ("12 345 !!", None),  # no letters
        ("<unk> <unk> <unk>", None),  # tokenizer debris
        ("A very long answer that goes on and on about many things", None),  # too many words
        ("Supercalifragilisticexpialidocious-and-more-words", None),  # one absurdly long word
        ("رحلة إلى دبي", "رحلة إلى دبي"),  # non-Latin answers are fine
    ],
)
def test_parse_topic(raw, expected):
    assert parse_topic(raw) == expected


# --- Representatives ------------------------------------------------------------------------


def test_representatives_closest_then_diverse():
    base = np.array([1.0, 0, 0])
    rows = [base + [0, 0.01 * i, 0] for i in range(6)] + [[1, 0.6, 0], [1, 0, 0.6], [0, 1, 0]]
    emb = np.asarray(rows, dtype=np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    labels = np.array([2] * 8 + [5])
    picks = representatives(emb, labels, 2, 4, seed=0)
    assert len(picks) == 4 and len(set(picks.tolist())) == 4
    assert 8 not in picks  # never outside the cluster
    assert set(picks[:2].tolist()) <= set(range(6))  # typical members first
    assert set(picks[2:].tolist()) == {6, 7}  # then the two outlying directions
    assert np.array_equal(picks, representatives(emb, labels, 2, 4, seed=0))
    assert sorted(representatives(emb, labels, 5, 4).tolist()) == [8]  # small cluster: all
    assert representatives(emb, labels, 9, 4).size == 0


# --- mlx-lm labeler on a tiny model (helpers.tiny_model) --------------------------------------


TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")


@pytest.mark.parametrize("template", [None, TEMPLATE], ids=["no-template", "chat-template"])
def test_mlx_labeler_falls_back_on_junk(tmp_path, template):
    path = _tiny_model(tmp_path / "tiny", template)
    offline = TfidfLabeler()
    labeler = MLXLMLabeler(path, max_tokens=12, samples=2)
    labeler.load()
    docs = _docs()
    prompt = build_prompt(labeler._tokenizer, docs[0], ["flights", "airport"])
    assert "2-5 word topic" in prompt and "flights, airport" in prompt
    assert ("assistant:" in prompt) == (template is not None)
    assert prompt.endswith("Topic:") == (template is None)
    assert "Ayşe Yılmaz (" not in prompt  # sender prefixes are stripped from excerpts
    raw = labeler.generate(prompt)
    assert isinstance(raw, str) and parse_topic(raw) is None  # numbers/punctuation: junk
    labels = LabelChain(offline, labeler).label(docs + [ClusterDocs(-1, ["Me (10:00): stray"])])
    assert labeler.fallbacks == 4  # every real cluster fell back; noise is not asked
    expected = offline.label(docs)
    assert [lab.source for lab in labels[:4]] == ["llm-fallback"] * 4
    assert [lab.label for lab in labels[:4]] == [lab.label for lab in expected]
    assert labels[4].label == NOISE_LABEL


def test_mlx_labeler_uses_a_good_answer(tmp_path):
    path = _tiny_model(tmp_path / "rigged", None, answer="hiking")
    labeler = MLXLMLabeler(path, max_tokens=1)
    labels = LabelChain(TfidfLabeler(), labeler).label(_docs()[:2])
    assert labeler.fallbacks == 0
    assert [(lab.label, lab.source) for lab in labels] == [("Hiking", "llm")] * 2
    assert labels[0].terms[:2] == TfidfLabeler().label(_docs()[:2])[0].terms[:2]  # kept
    # The same model with room for more tokens repeats itself: junk, counted fallback.
    chatty = MLXLMLabeler(path, max_tokens=4)
    assert chatty.generate("anything").split() == ["hiking"] * 4
    assert [lab.source for lab in LabelChain(TfidfLabeler(), chatty).label(_docs()[:2])] == [
        "llm-fallback"] * 2
    assert chatty.fallbacks == 2


def test_mlx_labeler_with_cache_asks_only_changed_clusters(tmp_path):
    path = _tiny_model(tmp_path / "rigged", None, answer="hiking")
    docs = _docs()
    members = {d.cluster_id: [f"{d.cluster_id}-{j}" for j in range(len(d.texts))] for d in docs}
    cache = LabelCache(tmp_path / "labels.json")
    labeler = LabelChain(TfidfLabeler(), MLXLMLabeler(path, max_tokens=1))
    first, hits = label_clusters(labeler, docs, members, cache)
    assert hits == 0 and [lab.source for lab in first] == ["llm"] * 4
    members[2] = members[2] + ["2-new"]
    again, hits = label_clusters(labeler, docs, members, LabelCache(tmp_path / "labels.json"))
    assert hits == 3 and again[2].label == "Hiking"
    # The re-asked cluster keeps keywords contrasted against all four clusters.
    assert again[2].terms == TfidfLabeler().label(docs)[2].terms


def test_mlx_labeler_missing_model_is_a_clear_error(tmp_path):
    from brb_pipeline.core.errors import BrbError

    labeler = LabelChain(TfidfLabeler(), MLXLMLabeler(tmp_path / "nope"))
    with pytest.raises(BrbError, match="no local labeler model at .*nope") as err:
        labeler.label(_docs())
    assert isinstance(err.value, FileNotFoundError) and "\n" not in str(err.value)


# --- Cache ----------------------------------------------------------------------------------


class CountingLabeler:
    """The offline labeler, counting how many clusters it was asked about."""

    source = "tfidf"

    def __init__(self) -> None:
        self.inner = TfidfLabeler()
        self.asked = 0

    def label(self, clusters):
        self.asked += len(clusters)
        return self.inner.label(clusters)


def test_cache_hits_on_unchanged_membership(tmp_path):
    docs = _docs()
    members = {d.cluster_id: [f"{d.cluster_id}-{j}" for j in range(len(d.texts))] for d in docs}
    cache_path = tmp_path / "labels.json"
    first = CountingLabeler()
    labels1, hits1 = label_clusters(LabelChain(first), docs, members, LabelCache(cache_path))
    assert hits1 == 0 and first.asked == 4 and cache_path.is_file()

    # Same memberships (ids renumbered, chunk order shuffled): all four from the cache.
    renum = [ClusterDocs(d.cluster_id + 10, d.texts, d.centroid_texts) for d in docs]
    members2 = {k + 10: list(reversed(v)) for k, v in members.items()}
    second = CountingLabeler()
    labels2, hits2 = label_clusters(LabelChain(second), renum, members2, LabelCache(cache_path))
    assert hits2 == 4 and second.asked == 0
    assert [lab.label for lab in labels2] == [lab.label for lab in labels1]
    assert [lab.cluster_id for lab in labels2] == [10, 11, 12, 13]

    # One cluster gains a chunk: only that one is re-labelled.
    members2[10] = members2[10] + ["0-new"]
    third = CountingLabeler()
    _, hits3 = label_clusters(LabelChain(third), renum, members2, LabelCache(cache_path))
    assert hits3 == 3 and third.asked == 4  # c-TF-IDF needs every cluster as contrast


def test_cache_file_damaged_is_empty_and_hash_is_order_free(tmp_path):
    bad = tmp_path / "labels.json"
    bad.write_text("{not json")
    cache = LabelCache(bad)
    assert len(cache) == 0
    cache.put("tfidf", membership_hash(["b", "a"]), ClusterLabel(1, "Travel", ["travel"], "tfidf"))
    cache.save()
    again = LabelCache(bad)
    got = again.get("tfidf", membership_hash(["a", "b"]), 7)
    assert got == ClusterLabel(7, "Travel", ["travel"], "tfidf")
    assert again.get("llm:x", membership_hash(["a", "b"]), 7) is None  # other labeler kind
    assert membership_hash(["a", "b"]) != membership_hash(["a", "b", "c"])


def test_make_labeler_follows_settings(tmp_path):
    from brb_pipeline.core.insights.labels import make_labeler
    from brb_pipeline.config.settings import Settings

    s = Settings(home=tmp_path)
    plain = make_labeler(s.labeler_model_path, seed=s.seed)
    assert isinstance(plain.base, TfidfLabeler) and plain.refiners == ()
    s = Settings(home=tmp_path, labeler_model_path=tmp_path / "m", seed=7)
    chain = make_labeler(s.labeler_model_path, seed=s.seed)
    (llm,) = chain.refiners
    assert isinstance(chain.base, TfidfLabeler)
    assert isinstance(llm, MLXLMLabeler) and llm.model_path == tmp_path / "m" and llm.seed == 7


def test_tfidf_samples_large_clusters_deterministically():
    docs = _docs()
    big = [ClusterDocs(d.cluster_id, d.texts * 10) for d in docs]  # 30-40 chunks each
    sampled = TfidfLabeler(max_docs=6, seed=1).label(big)
    assert sampled == TfidfLabeler(max_docs=6, seed=1).label(big)
    assert "flights" in sampled[0].terms[:3] and "penalty" in sampled[2].terms[:3]


# --- Embedding re-rank ----------------------------------------------------------------------


class TableEmbedder:
    """Known vectors for known texts, so the right answer is known.

    Texts outside ``table`` fail the test when ``strict`` (nothing unexpected, such as a name or
    a filler word, may even be embedded); otherwise they get a deterministic random vector in
    dimensions 2..15, orthogonal to every table vector (which live in dimensions 0 and 1).
    """

    document_prefix = ""

    def __init__(self, table: dict[str, list[float]], *, strict: bool = True,
                 model_id: str = "table@1") -> None:
        self.table = table
        self.strict = strict
        self.model_id = model_id
        self.dim = 16
        self.seen: list[str] = []

    def embed(self, texts):
        import zlib

        self.seen += list(texts)
        rows = []
        for t in texts:
            v = np.zeros(self.dim)
            if t in self.table:
                v[: len(self.table[t])] = self.table[t]
            else:
                assert not self.strict, f"unexpected text embedded: {t!r}"
                v[2:] = np.random.default_rng(zlib.crc32(t.encode())).normal(size=self.dim - 2)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim)


class FixedLabeler:
    """Candidates in a fixed c-TF-IDF order (what the re-rank starts from)."""

    source = "tfidf"

    def __init__(self, terms: list[str]) -> None:
        self.terms = terms

    def label(self, clusters):
        return [ClusterLabel(c.cluster_id, label_phrase(self.terms), list(self.terms), "tfidf")
                for c in clusters]


def _rerank(embedder, base=None, **kw) -> LabelChain:
    """c-TF-IDF (or ``base``) re-ranked by ``embedder``, as make_labeler chains them."""
    from brb_pipeline.core.insights.labels import EmbeddingLabeler

    return LabelChain(base or TfidfLabeler(n_terms=30), EmbeddingLabeler(embedder, **kw))


def _unit_vec(*xs: float) -> np.ndarray:
    v = np.zeros(16, dtype=np.float32)
    v[: len(xs)] = xs
    return v / np.linalg.norm(v)


@pytest.mark.parametrize("centroid_model", ["table@1", "other-model@2"],
                         ids=["stored-centroid", "model-mismatch-embeds-texts"])
def test_embedding_labeler_picks_the_term_closest_to_the_centroid(centroid_model):
    table = {  # cosine to the centroid direction (1, 0) in the comment
        "booked": [0.0, 1.0],  # 0.0: c-TF-IDF's first pick, not about the cluster
        "lisbon": [0.6, 0.8],  # 0.6
        "airport": [0.8, 0.6],  # 0.8
        "flights": [1.0, 0.05],  # ~1.0: the closest, ranked last by c-TF-IDF
        "Me (10:00): airport flights": [1.0, 0.0],  # the representative text
    }
    embedder = TableEmbedder(table)
    labeler = _rerank(embedder, FixedLabeler(["booked", "lisbon", "airport", "flights"]),
                      diversity=0.0)
    docs = ClusterDocs(0, ["Me (10:00): airport flights"], ["Me (10:00): airport flights"],
                       centroid=_unit_vec(1.0, 0.0), centroid_model=centroid_model)
    (lab,) = labeler.label([docs])
    assert lab.terms == ["flights", "airport", "lisbon", "booked"]  # by cosine, not by c-TF-IDF
    assert lab.label == "Flights · airport · lisbon" and lab.source == "embedding"
    # The stored centroid is used only when it comes from the labeler's own model.
    assert ("Me (10:00): airport flights" in embedder.seen) == (centroid_model != "table@1")
    # A noise bucket keeps the fallback's label and is never embedded.
    (rerank,) = labeler.refiners
    noise = rerank.refine([ClusterDocs(-1, ["Me (10:00): x"])], [
        ClusterLabel(-1, NOISE_LABEL, [], "tfidf")])
    assert noise == [ClusterLabel(-1, NOISE_LABEL, [], "tfidf")]


def test_embedding_labeler_blends_the_ctfidf_rank_with_the_cosine():
    """A word said once that is a shade closer to the centroid ("strange", ranked last by
    c-TF-IDF) no longer beats the cluster's frequent topic word ("semester", ranked first)."""
    table = {"semester": _unit_vec(0.8, 0.6)[:2].tolist(), "lol": [0.0, 1.0], "pizza": [0.1, 0.995],
             "tuesday": [0.2, 0.98], "strange": _unit_vec(0.85, 0.527)[:2].tolist()}
    base = FixedLabeler(["semester", "pizza", "tuesday", "strange"])
    docs = ClusterDocs(0, [], centroid=_unit_vec(1.0, 0.0), centroid_model="table@1")
    cosine_only = _rerank(TableEmbedder(table), base, diversity=0.0, tfidf_weight=0.0)
    blended = _rerank(TableEmbedder(table), base, diversity=0.0)  # the default weight, 0.3
    assert cosine_only.label([docs])[0].terms[:2] == ["strange", "semester"]
    assert blended.label([docs])[0].terms[:2] == ["semester", "strange"]
    assert _rerank(TableEmbedder(table), base, diversity=0.0, tfidf_weight=1.0).label([docs])[0].terms == [
        "semester", "pizza", "tuesday", "strange"]  # rank alone: the base's order
    with pytest.raises(ValueError):
        _rerank(TableEmbedder(table), base, tfidf_weight=1.5)


def test_embedding_labeler_keeps_terms_its_core_chunks_say():
    """A word from a chat at the cluster's edge ("overwatch") loses to the words its
    representative chunks say, even when it is nearer the centroid; with too few of those the
    whole pool stays."""
    table = {"overwatch": [1.0, 0.0], "homework": [0.8, 0.6], "physics": [0.7, 0.714], "grade": [0.6, 0.8]}
    core = ["Me (10:00): my physics homework is due", "Sam (10:01): what grade did you get"]
    docs = ClusterDocs(0, core + ["Sam (11:00): overwatch tonight?"], core,
                       centroid=_unit_vec(1.0, 0.0), centroid_model="table@1")
    base = FixedLabeler(["overwatch", "homework", "physics", "grade"])
    (core_only,) = _rerank(TableEmbedder(table), base, diversity=0.0).label([docs])
    assert core_only.terms == ["homework", "physics", "grade"] and "overwatch" not in core_only.label
    (whole,) = _rerank(TableEmbedder(table), base, diversity=0.0, core_terms=False).label([docs])
    assert whole.terms[0] == "overwatch"
    thin = ClusterDocs(0, docs.texts, ["Me (10:00): homework"], centroid=docs.centroid, centroid_model="table@1")
    assert _rerank(TableEmbedder(table), base, diversity=0.0).label([thin])[0].terms[0] == "overwatch"


def test_embedding_labeler_mmr_spreads_the_label_over_subtopics():
    from brb_pipeline.core.insights.labels import mmr

    table = {"airport": [1.0, 0.0], "airports": [0.999, 0.045], "hotel": [0.7, 0.714]}
    docs = ClusterDocs(0, [], centroid=_unit_vec(1.0, 0.2), centroid_model="table@1")
    plain = _rerank(TableEmbedder(table), FixedLabeler(["hotel", "airports", "airport"]),
                    diversity=0.0, label_terms=2, tfidf_weight=0.0)  # cosine only: MMR alone
    diverse = _rerank(TableEmbedder(table), FixedLabeler(["hotel", "airports", "airport"]),
                      diversity=0.5, label_terms=2, tfidf_weight=0.0)
    assert plain.label([docs])[0].terms[:2] == ["airports", "airport"]  # near-synonyms
    assert diverse.label([docs])[0].terms[:2] == ["airports", "hotel"]  # a second subtopic
    assert mmr(np.zeros((0, 16)), np.zeros(0), 3, 0.3) == []


def test_filler_and_names_are_never_terms():
    from brb_pipeline.core.insights.labels import name_tokens

    # c-TF-IDF: a contact's name mentioned in messages (not as the sender) is a term unless
    # the contact names are given; the filler words are dropped either way.
    trip = [f"Me ({10 + i}:00): théo and dubois alrighty yeet lol lisbon trip lisbon" for i in range(3)]
    other = [f"Me ({10 + i}:00): football match tonight" for i in range(3)]
    docs = [ClusterDocs(0, trip), ClusterDocs(1, other)]
    plain = TfidfLabeler().label(docs)[0].terms
    assert "théo" in plain and "dubois" in plain
    named = TfidfLabeler(names=["Théo Dubois", "noor.950@example.org"]).label(docs)[0].terms
    words = {w for t in named for w in t.split()}
    assert "lisbon" in words and not words & {"théo", "dubois", "alrighty", "yeet", "lol"}
    assert name_tokens(["Théo Dubois", "noor.950@example.org", "+13125550863"]) == {
        "théo", "dubois", "noor"}
    for filler in ["alrighty", "yeet", "lol", "haha", "omg", "lmao", "yeah", "okay", "ok", "gonna",
                   "wanna", "jajaja", "mdr", "tamam", "يلا"]:
        assert tokenize(filler) == [], filler
    # The re-rank drops them from any fallback's candidates before embedding anything: the strict
    # embedder fails the test if one of them is embedded.
    embedder = TableEmbedder({"lisbon": [1.0, 0.0], "lisbon trip": [0.9, 0.43]})
    labeler = _rerank(embedder, FixedLabeler(
        ["alrighty", "théo", "lisbon", "yeet lol", "théo dubois", "lisbon trip", "okay", "noor"]),
        names=["Théo Dubois", "noor.950@example.org"])
    (lab,) = labeler.label([ClusterDocs(0, trip, centroid=_unit_vec(1.0, 0.0),
                                        centroid_model="table@1")])
    assert lab.terms == ["lisbon", "lisbon trip"]
    assert sorted(embedder.seen) == ["lisbon", "lisbon trip"]
    # Nothing left: the fallback's label stays.
    (bare,) = _rerank(embedder, FixedLabeler(["lol", "yeah"])).label([ClusterDocs(0, trip)])
    assert bare.source == "tfidf" and bare.terms == ["lol", "yeah"]


def test_two_word_phrases_are_candidates():
    docs = [ClusterDocs(0, ["Me (10:00): pizza and pasta night"] * 3, centroid=_unit_vec(1.0, 0.0),
                        centroid_model="table@1"),
            ClusterDocs(1, ["Me (10:00): football match tonight"] * 3, centroid=_unit_vec(0.0, 1.0),
                        centroid_model="table@1")]
    base = TfidfLabeler().label(docs)
    assert base[0].terms[0] != "pasta night"  # c-TF-IDF alone ranks a unigram first
    embedder = TableEmbedder({"pasta night": [1.0, 0.0], "football match": [0.0, 1.0]}, strict=False)
    labels = _rerank(embedder).label(docs)
    assert labels[0].terms[0] == "pasta night" and labels[0].label.startswith("Pasta night")
    assert labels[1].terms[0] == "football match"
    assert "pizza pasta" not in labels[0].terms  # no phrase across a removed word


def test_corpus_mean_is_subtracted_from_the_centroid():
    # "chatting" is close to every chat (the corpus mean); "lisbon" is what sets this one apart.
    table = {"chatting": [1.0, 0.0], "lisbon": [0.6, 0.8]}
    cent = _unit_vec(0.9, 0.44)
    docs = ClusterDocs(0, [], centroid=cent, centroid_model="table@1")
    labeler = _rerank(TableEmbedder(table), FixedLabeler(["chatting", "lisbon"]), diversity=0.0)
    assert labeler.label([docs])[0].terms == ["chatting", "lisbon"]
    docs.corpus_mean = 0.8 * _unit_vec(1.0, 0.0)
    assert labeler.label([docs])[0].terms == ["lisbon", "chatting"]


def test_cache_is_not_reused_across_labeler_kinds_or_versions(tmp_path):
    from brb_pipeline.core.insights.labels import labeler_kind

    docs = _docs()
    members = {d.cluster_id: [f"{d.cluster_id}-{j}" for j in range(len(d.texts))] for d in docs}
    path = tmp_path / "labels.json"
    # A label the previous c-TF-IDF version ("tfidf", before names and filler) cached.
    old = LabelCache(path)
    for d in docs:
        old.put("tfidf", membership_hash(members[d.cluster_id]), ClusterLabel(d.cluster_id, "Old", [], "tfidf"))
    old.save()
    tfidf, hits = label_clusters(LabelChain(TfidfLabeler()), docs, members, LabelCache(path))
    assert hits == 0 and "Old" not in {lab.label for lab in tfidf}
    assert labeler_kind(TfidfLabeler()) == "tfidf/v3" == LabelChain(TfidfLabeler()).kind

    def refined(model_id: str) -> LabelChain:
        return _rerank(TableEmbedder({}, strict=False, model_id=model_id))

    first, hits = label_clusters(refined("table@1"), docs, members, LabelCache(path))
    assert hits == 0 and {lab.source for lab in first} == {"embedding"}  # not the c-TF-IDF labels
    again, hits = label_clusters(refined("table@1"), docs, members, LabelCache(path))
    assert hits == 4 and again == first
    _, hits = label_clusters(refined("table@2"), docs, members, LabelCache(path))  # new weights
    assert hits == 0
    assert refined("table@1").kind == "tfidf/v3+embed/v3(c=30,d=0.3,w=0.3,core):table@1"
    assert refined("table@1").kind != _rerank(TableEmbedder({}, model_id="table@1"), diversity=0.5).kind
    # The LLM's namespace includes the kind it refines, so new keywords are new prompts.
    llm = MLXLMLabeler(tmp_path / "m")
    assert LabelChain(TfidfLabeler(), *refined("table@1").refiners, llm).kind != LabelChain(
        TfidfLabeler(), llm).kind == "llm:m|tfidf/v3"


def test_refiner_is_asked_only_about_changed_clusters(tmp_path):
    docs = _docs()
    members = {d.cluster_id: [f"{d.cluster_id}-{j}" for j in range(len(d.texts))] for d in docs}
    first = _rerank(TableEmbedder({}, strict=False), CountingLabeler())
    labels, _ = label_clusters(first, docs, members, LabelCache(tmp_path / "labels.json"))
    members[2] = members[2] + ["2-new"]
    embedder = TableEmbedder({}, strict=False)
    counting = CountingLabeler()
    second = _rerank(embedder, counting)
    again, hits = label_clusters(second, docs, members, LabelCache(tmp_path / "labels.json"))
    assert hits == 3 and again[:2] == labels[:2] and again[3] == labels[3]
    assert counting.asked == 4  # c-TF-IDF still contrasts against every cluster
    # Only cluster 2's candidates were embedded (plus its representative texts).
    assert set(embedder.seen) <= set(TfidfLabeler().label(docs)[2].terms) | set(docs[2].centroid_texts)
    assert again[2].source == "embedding"


def test_make_labeler_chains_the_embedding_rerank(tmp_path):
    from brb_pipeline.core.insights.labels import EmbeddingLabeler, make_labeler

    embedder = TableEmbedder({})
    plain = make_labeler(None, embedder=embedder, names=["Théo Dubois"])
    (rerank,) = plain.refiners
    assert isinstance(rerank, EmbeddingLabeler) and rerank.embedder is embedder
    assert plain.base.names == {"théo", "dubois"} == rerank.names
    assert plain.base.n_terms == rerank.candidates  # the re-rank sees all its candidates
    llm = make_labeler(tmp_path / "m", embedder=embedder)
    assert [type(r) for r in llm.refiners] == [EmbeddingLabeler, MLXLMLabeler]
    assert llm.name == "MLXLMLabeler" and plain.name == "EmbeddingLabeler"


def test_extras_tags_are_not_label_words_but_captions_and_transcriptions_are():
    """What issue 31's extras add to a line: file names, kinds and sizes, stickers, durations and a
    reply's quote are not what people talk about; a caption and a voice transcription are."""
    from brb_pipeline.core.insights.labels import message_bodies

    lines = ["Sam (10:00): look at this [attachment: IMG_0042.heic, photo, 1.2 MB]",
             "Sam (10:01): [attachment: tent.jpg, photo, 2.0 MB — our tent at zion] nice",
             "Me (10:02): [voice message: the hike starts at six]", "Me (10:03): [voice message, 0:42]",
             "Me (10:04): [sticker]", 'Ana (10:05): ↪ replying to Sam Lee: "see you at the trailhead" sure',
             "Me (10:06): [link: https://example.com/z — Zion trail guide] read it"]
    texts, senders = message_bodies("\n".join(lines))
    assert texts == ["look at this", "our tent at zion nice", "the hike starts at six", "sure",
                     "Zion trail guide read it"]
    assert senders == {"Sam", "Me", "Ana"}
    words = set(" ".join(texts).lower().split())
    assert not words & {"img", "heic", "photo", "mb", "sticker", "voice", "message", "replying", "lee"}
