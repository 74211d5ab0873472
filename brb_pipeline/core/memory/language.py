"""The dominant language of a batch of messages: a stopword and letter heuristic, stdlib only.

Covers the languages brb's users write in most (en, tr, es, de, fr, pt, it); anything it cannot
tell is English. Short chat lines carry few stopwords, so a batch is judged on all its text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_STOPWORDS = {
    "en": "the and you to is it that of for in on my me we this what are have be was with just not but "
          "so can will do at your i'm don't it's how about when get see if",
    "tr": "ve bir bu da de ne için ben sen çok mi mı mu mü var yok ama gibi daha şey olur tamam evet "
          "hayır değil nasıl neden bana sana kadar ile ya yani şimdi",
    "es": "el la de que y en los las un una es no por con para lo pero más como está muy yo tu qué "
          "hola sí bien también ya mi te se del al",
    "de": "der die das und ist ich nicht du es ein eine zu mit auf für den dem ja nein auch was wie "
          "aber noch mal bin hast wir sie im doch schon",
    "fr": "le la les de et est un une je tu pas que qui en du des pour avec ce mais oui non on nous "
          "vous bien très c'est il elle ça moi au",
    "pt": "o a os as de que e em um uma não é para com por mais você eu tu sim muito está isso mas "
          "como já obrigado tudo bem",
    "it": "il lo la di che e è un una non per con ma sono sei io tu mi ti ci come anche cosa bene "
          "grazie ciao molto perché della",
}
STOPWORDS = {lang: frozenset(words.split()) for lang, words in _STOPWORDS.items()}
# Letters that (among these languages) only one uses much: a strong hint per occurrence.
_LETTERS = {"tr": "ğışİ", "es": "ñ¿¡", "de": "ß", "fr": "œèêç", "pt": "ãõ"}
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?", re.UNICODE)
DEFAULT = "en"
LANGUAGES = tuple(STOPWORDS)


def detect_language(texts: Iterable[str | None]) -> str:
    """The ISO 639-1 code of the language most of ``texts`` is written in (``en`` when unsure).

    Each word that is a stopword of a language scores it one point; each letter peculiar to one
    language scores it two.
    """
    scores = dict.fromkeys(STOPWORDS, 0.0)
    for text in texts:
        if not text:
            continue
        low = text.lower()
        for word in _WORD.findall(low):
            for lang, words in STOPWORDS.items():
                if word in words:
                    scores[lang] += 1
        for lang, letters in _LETTERS.items():
            scores[lang] += 2 * sum(low.count(ch.lower()) for ch in letters)
    best = max(scores, key=lambda k: (scores[k], k == DEFAULT))
    return best if scores[best] > 0 else DEFAULT
