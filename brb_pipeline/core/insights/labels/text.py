"""Chat text as label words: message bodies without sender prefixes, Unicode-aware tokens, stop
words and chat filler, and the words of people's names (never label terms).

The token pattern is Unicode-aware (Turkish, Arabic with diacritics, Cyrillic, CJK runs).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

# "<sender> (HH:MM): <text>" as written by core/chunking.message_line.
_MESSAGE_LINE = re.compile(r"^(?P<sender>.{1,120}?) \((?:[01]?\d|2[0-3]):[0-5]\d\): ?(?P<text>.*)$")
_HEADER_LINE = re.compile(r"^(?:search_document:\s*)?Conversation with .*\d{4}-\d{2}-\d{2}")
# Attachment tags and the trailing tapback list ("  [♥ 👍]") added by the chunker.
_TAGS = re.compile(r"\[(?:\d+ )?attachments?\]|\s{2}\[[^\]]*\]\s*$")
# What a message's extras add to its line (core/records/extras.py): a file's tag keeps only the
# caption its sender wrote ("[attachment: IMG_0042.heic, photo, 1.2 MB — our tent]" -> "our
# tent"), a voice message its transcription; stickers, durations and the reply marker with the
# quoted message (said, and counted, where it was first written) go. Not words of the topic:
# file names, "heic", "photo", "mb".
_EXTRA_TAGS = re.compile(r"\[(?:attachment|link): [^\]]*?(?: — (?P<cap>[^\]]*))?\]"
                         r"|\[voice message(?::\s(?P<voice>[^\]]*)|, \d+:\d\d)?\]|\[sticker\]"
                         r"|↪ replying to (?:an earlier message|[^:]{1,120}: \"[^\"]*\")")
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
        body = _EXTRA_TAGS.sub(lambda m: f" {m['cap'] or m['voice'] or ''} ", body)
        body = " ".join(_URL.sub(" ", _TAGS.sub(" ", body)).split())
        if body:
            texts.append(body)
    return texts, senders


#: What a run of keyboard mash ("asdfas", "dfd", "sdfjasd") counts as in a cluster's terms: one
#: readable term in place of the junk itself, so a cluster of mashed keys is called that.
MASH_TERM = "keyboard mash"
_KEY_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")
_KEY_AT = {c: (r, i) for r, row in enumerate(_KEY_ROWS) for i, c in enumerate(row)}
_HOME_ROW = frozenset(_KEY_ROWS[1])
_ASCII_WORD = re.compile(r"[a-z]{3,}")
_CONSONANT_RUN = re.compile(r"[sdfghjkl]{4}")


def _side_keys(a: str, b: str) -> bool:
    """Keys next to each other on the home or bottom row (the top row spells too many words)."""
    pa, pb = _KEY_AT.get(a), _KEY_AT.get(b)
    return pa is not None and pb is not None and pa[0] == pb[0] > 0 and abs(pa[1] - pb[1]) == 1


@functools.lru_cache(maxsize=1 << 16)  # on every token labelling reads: words repeat, so judge each once
def keyboard_mash(token: str) -> bool:
    """Whether a lower-case token is keys hit at random, not a word. It is when:

    - most of its letter pairs are neighbouring home- or bottom-row keys, one of them without
      the vowel ``a`` ("asd", "dfd", "sdfjasd"; half of them in a home-row-only token of 5+
      letters, "adgasdfasd");
    - a token of home-row letters only has four consonants in a row ("alsdjf", "laksjdf",
      "jladfljfjasd");
    - it runs 4+ letters down the alphabet ("bcdefghijk").

    Two letters are never judged: "sd", "cv" and "vc" are words of the vocabulary below.

    No whole word of the bundled model's 30,522-token English vocabulary (21,358 of 3+ letters)
    is flagged: "has", "sad", "flask", "salad", "nasa" and "sash" pass. Only a-z tokens are
    judged; other scripts never are.
    """
    if not _ASCII_WORD.fullmatch(token):
        return False
    pairs = list(zip(token, token[1:]))
    if len(token) >= 4 and set(token) <= _HOME_ROW and _CONSONANT_RUN.search(token):
        return True  # "alsdjf", "laksjdf": English spells no 4 home-row consonants in a row
    side = [a != "a" and b != "a" and _side_keys(a, b) for a, b in pairs]
    near = sum(_side_keys(a, b) for a, b in pairs)
    home = set(token) <= _HOME_ROW and len(token) >= 5  # "adgasdfasd": a long one needs half
    if any(side) and near >= 2 and near >= (0.5 if home else 0.6) * len(pairs):
        return True
    run = 1
    for a, b in pairs:
        run = run + 1 if ord(b) - ord(a) == 1 else 1
        if run >= 4:
            return True
    return False


_ELONGATED = re.compile(r"(.)\1{2,}")  # "yesss" -> "yes", "soooo" -> "so"
_LAUGH_FIRST = frozenset("ahlxjkwхه")
_LAUGH = re.compile(r"^(?:(?:a?h+a+)+h?|(?:h+e+)+h?|l+o+l+(?:o+l+)*|x+d+|(?:ja)+j?|(?:ha)+|"
                    r"(?:ah)+|k{3,}|(?:ха)+|(?:هه)+|w{3,})$")


def tokenize(text: str, drop: frozenset[str] | set[str] = frozenset(), *,
             keep_gaps: bool = False, mash: bool = False) -> list[str | None]:
    """Unicode-aware word tokens (length >= 2), lower-cased; stop words, laughter, keyboard mash
    (:func:`keyboard_mash`) and ``drop`` removed; letters repeated 3+ times collapsed ("yesss"
    -> "yes").

    Args:
        text: one message text.
        drop: extra tokens to remove (e.g. sender-name parts).
        keep_gaps: put ``None`` where a token was removed, so n-grams are not formed across
            removed words ("science (is) born" must not become the bigram "science born").
        mash: a keyboard-mash token becomes :data:`MASH_TERM` (between gaps with
            ``keep_gaps``, so it joins no n-gram) instead of being dropped.

    Returns:
        Tokens in order (with ``None`` gaps when ``keep_gaps``).
    """
    stops = stop_words()
    out: list[str | None] = []
    for tok in _WORD.findall(_ELONGATED.sub(r"\1", normalize_case(text))):
        junk = keyboard_mash(tok)
        if (junk or len(tok) < 2 or tok in stops or tok in drop
                or (tok[0] in _LAUGH_FIRST and _LAUGH.match(tok))):
            if keep_gaps and (not out or out[-1] is not None):
                out.append(None)
            if junk and mash:
                out.append(MASH_TERM)
                if keep_gaps:
                    out.append(None)
            continue
        out.append(tok)
    return out


def name_words(names: Iterable[str]) -> set[str]:
    """Lower-cased word tokens of ``names`` as written (a chunk's senders)."""
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
        toks |= name_words([name])
    return frozenset(t for t in toks if len(t) >= 2 and t not in _NOT_NAMES)
