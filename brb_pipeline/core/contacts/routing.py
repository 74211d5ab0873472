"""Route a free-text query to contacts: "what did Ayşe's sister say about the trip" searches
Ayşe's chunks for "sister say about the trip"-ish text.

Deterministic rules, no model:

* Names and handles match as whole words, case- and accent-insensitively ("ayse" matches
  "Ayşe", "ISTANBUL" matches "İstanbul"; Turkish dotless ı folds to i).
* Longest phrase wins: a full display name is tried before a first name, and a first name only
  routes when exactly one contact has it. A router over *people* (``ambiguous=True``) also routes
  a first name several people share (all of them, reported in ``RoutedQuery.ambiguous``), a
  nickname, and a last name typed with a capital ("Hartley", not "hartley": many last names are
  words), unless it is the question's first word.
* A suffix after an apostrophe stays with the name ("Ayşe's", "Ayşe'nin", "Ayşe’yle").
* E-mail handles match as a word; phone handles match digit-wise, including the national part
  typed without the country code ("532 123 45 67" matches +905321234567).
* A filler word ("with", "from", "and", ...) directly before a matched name is dropped with it
  (it would otherwise dangle); any other word is left in the rest.
* No match: the query comes back unchanged. A query that is only names keeps its text as the
  rest, so there is still something to search for.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

FILLERS = frozenset({"with", "from", "to", "and", "by", "for", "of", "&", "ile", "ve"})
_TOKEN_RE = re.compile(r"([^\W_]+(?:[.@+\-][^\W_]+)*)(['’][^\W_]*)?|(&)")
_PHONE_RE = re.compile(r"\+?\d(?:[ \-.()]{0,2}\d){6,}")
_NON_DIGIT_RE = re.compile(r"\D")


@dataclass(frozen=True)
class ContactRef:
    """A contact as routing sees it: id, resolved display name and normalized handles."""

    contact_id: str
    display_name: str | None
    handles: Sequence[str] = ()
    nickname: str | None = None


@dataclass
class RoutedQuery:
    """``query`` is the rest to search; ``matched`` the names/handles as the user typed them;
    ``spans`` the ids each of them matched, in order (several: an ambiguous name)."""

    query: str
    contact_ids: list[str] = field(default_factory=list)
    matched: list[str] = field(default_factory=list)
    spans: list[list[str]] = field(default_factory=list)


def fold(text: str) -> str:
    """Case- and accent-insensitive form: NFKD without combining marks, casefolded."""
    text = text.replace("ı", "i").replace("İ", "I")
    text = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in text if not unicodedata.combining(ch)).casefold()


def _words(text: str) -> list[str]:
    return [m.group(1) or m.group(3) for m in _TOKEN_RE.finditer(fold(text))]


def _phrases(contacts: Sequence[ContactRef], ambiguous: bool = False
             ) -> tuple[dict[tuple[str, ...], set[str]], set[tuple[str, ...]]]:
    """Folded word tuple -> contact ids: full names, first names (unique ones unless
    ``ambiguous``), e-mail handles; with ``ambiguous`` also nicknames and last names. And the
    phrases that only match typed with a capital (last names)."""
    phrases: dict[tuple[str, ...], set[str]] = {}
    firsts: dict[str, set[str]] = {}
    lasts: dict[str, set[str]] = {}
    for c in contacts:
        name = (c.display_name or "").strip()
        words = tuple(_words(name))
        # A display name that is only a phone number or e-mail is a handle, not a name.
        if words and not _PHONE_RE.fullmatch(name) and "@" not in name:
            phrases.setdefault(words, set()).add(c.contact_id)
            if len(words) > 1:
                firsts.setdefault(words[0], set()).add(c.contact_id)
                lasts.setdefault(words[-1], set()).add(c.contact_id)
        nick = tuple(_words(c.nickname or ""))
        if ambiguous and nick:
            phrases.setdefault(nick, set()).add(c.contact_id)
        for h in c.handles:
            if "@" in h:
                phrases.setdefault((fold(h.strip()),), set()).add(c.contact_id)
    for first, ids in firsts.items():
        if (ambiguous or len(ids) == 1) and (first,) not in phrases:
            phrases[(first,)] = set(ids)
    cased = set()
    for last, ids in lasts.items() if ambiguous else ():
        if (last,) not in phrases and len(last) > 1:
            phrases[(last,)] = set(ids)
            cased.add((last,))
    return phrases, cased


def route_query(query: str, contacts: Sequence[ContactRef]) -> RoutedQuery:
    """Split ``query`` into contacts it names and the rest to search (see :class:`Router`, which
    a caller routing many queries over the same contacts builds once)."""
    return Router(contacts).route(query)


class Router:
    """The contacts' names and handles, indexed once for routing many queries.

    Args:
        contacts: contacts with display names and handles (phones in E.164).
        ambiguous: route a first name several contacts share to all of them, and nicknames and
            capitalized last names too (the router over people).
    """

    def __init__(self, contacts: Sequence[ContactRef], ambiguous: bool = False) -> None:
        self._phones = [(_NON_DIGIT_RE.sub("", h), c.contact_id) for c in contacts for h in c.handles if "@" not in h]
        self._phrases, self._cased = _phrases(contacts, ambiguous)
        self._lengths = sorted({len(p) for p in self._phrases}, reverse=True)

    def route(self, query: str) -> RoutedQuery:
        """The rest of the query, the routed contact ids (first mention first) and what matched."""
        spans, tokens = self._spans(query)
        if not spans:
            return RoutedQuery(query=query)
        return _rest(query, spans, tokens)

    def _spans(self, query: str) -> tuple[list[tuple[int, int, list[str], str]], list[tuple[int, int, str]]]:
        """(start, end, contact ids, matched text) of every phone, name and e-mail in ``query``, in
        order; and the (start, end, folded word) of the words outside the phones."""
        spans: list[tuple[int, int, list[str], str]] = []
        for m in _PHONE_RE.finditer(query):
            digits = _NON_DIGIT_RE.sub("", m.group(0))
            ids = sorted({cid for hd, cid in self._phones
                          if hd and (hd == digits or (len(digits) >= 7 and hd.endswith(digits)))})
            if ids:
                spans.append((m.start(), m.end(), ids, m.group(0)))
        tokens = [(m.start(), m.end(), fold(m.group(1) or m.group(3))) for m in _TOKEN_RE.finditer(query)
                  if not any(s <= m.start() < e for s, e, _, _ in spans)]
        i = 0
        while i < len(tokens):
            for n in self._lengths:
                key = tuple(t[2] for t in tokens[i : i + n])
                # a last name only counts typed with a capital, and not as the question's first
                # word (where any word has one: "Young people ...")
                if len(key) == n and key in self._phrases and (
                        key not in self._cased or (i > 0 and query[tokens[i][0]].isupper())):
                    start, end = tokens[i][0], tokens[i + n - 1][1]
                    spans.append((start, end, sorted(self._phrases[key]), query[start:end]))
                    i += n
                    break
            else:
                i += 1
        return sorted(spans), tokens


def _rest(query: str, spans: list[tuple[int, int, list[str], str]], tokens: list[tuple[int, int, str]]
          ) -> RoutedQuery:
    """The routed query: the text outside ``spans`` (and the fillers just before them), and the contacts."""
    # Drop fillers that directly precede a matched span (only whitespace in between).
    remove = [(s, e) for s, e, _, _ in spans]
    for s, _, _, _ in spans:
        before = [t for t in tokens if t[1] <= s]
        if before and before[-1][2] in FILLERS and not query[before[-1][1] : s].strip():
            remove.append((before[-1][0], before[-1][1]))
    rest, pos = [], 0
    for s, e in sorted(remove):
        if s >= pos:
            rest.append(query[pos:s])
            pos = e
    rest.append(query[pos:])
    text = re.sub(r"\s+", " ", "".join(rest)).strip(" ,;:-")
    text = re.sub(r"\s+([,;:?!.])", r"\1", text)

    contact_ids: list[str] = []
    for _, _, ids, _ in spans:
        contact_ids.extend(i for i in ids if i not in contact_ids)
    return RoutedQuery(query=text or query, contact_ids=contact_ids, matched=[m for _, _, _, m in spans],
                       spans=[list(ids) for _, _, ids, _ in spans])
