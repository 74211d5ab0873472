"""Route a question to the conversations of the people it names, whoever they are in them.

"what did Melanie say about the cabin" searches every conversation Melanie takes part in: her 1:1
chat and each group she is in. The names are matched by :class:`.routing.Router` over people
(first, last, full name, nickname, possessive, handle). Then:

* A name several people share ("John") is narrowed by the rest of the question where it can be:
  to the Johns who share a conversation with every other person named ("John and Caroline"), else
  to those in a group whose name has a word of the question ("John from climbing" -> the
  "Climbing crew" group). Otherwise all of them are searched, and ``ambiguous`` says so.
* Several people named: the conversations they are all in; none such, any of theirs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from brb_pipeline.core.contacts.routing import FILLERS, ContactRef, Router, _words


@dataclass
class PeopleRouted:
    """What a question routes to.

    Attributes:
        query: the rest of the question to search.
        person_ids: the people it names (ambiguous names: every candidate kept).
        contact_ids: the conversations (contact ids of chats) to search.
        matched: the names as typed.
        ambiguous: ``{"matched", "person_ids", "people"}`` per name left ambiguous.
    """

    query: str
    person_ids: list[str] = field(default_factory=list)
    contact_ids: list[str] = field(default_factory=list)
    matched: list[str] = field(default_factory=list)
    ambiguous: list[dict] = field(default_factory=list)


class PeopleRouter:
    """People's names indexed once for many questions.

    Args:
        people: one ref per person (``contact_id`` is the person id; ``nickname`` set when known).
        conversations: person id -> contact ids of the chats they take part in.
        conversation_names: contact id -> its display name (group names narrow an ambiguous name).
    """

    def __init__(self, people: Sequence[ContactRef], conversations: Mapping[str, set[str]],
                 conversation_names: Mapping[str, str]) -> None:
        self._router = Router(people, ambiguous=True)
        self._names = {p.contact_id: p.display_name or p.contact_id for p in people}
        self._convs = conversations
        self._conv_words = {cid: set(_words(name or "")) for cid, name in conversation_names.items()
                            if cid.startswith("g:")}

    def route(self, query: str) -> PeopleRouted:
        routed = self._router.route(query)
        if not routed.spans:
            return PeopleRouted(query=query)
        rest = {w for w in _words(routed.query) if w not in FILLERS and len(w) > 2}
        sure = [ids[0] for ids in routed.spans if len(ids) == 1]
        slots: list[list[str]] = []
        ambiguous: list[dict] = []
        for ids, typed in zip(routed.spans, routed.matched):
            keep = self._narrow(ids, sure, rest) if len(ids) > 1 else ids
            if len(keep) > 1:
                ambiguous.append({"matched": typed, "person_ids": keep,
                                  "people": [self._names.get(p, p) for p in keep]})
            slots.append(keep)
        person_ids = list(dict.fromkeys(p for slot in slots for p in slot))
        return PeopleRouted(query=routed.query, person_ids=person_ids, contact_ids=self._conversations(slots),
                            matched=list(routed.matched), ambiguous=ambiguous)

    def _narrow(self, ids: list[str], sure: list[str], rest: set[str]) -> list[str]:
        """The candidates the rest of the question points at (all of them when it points nowhere)."""
        if sure:
            keep = [p for p in ids if all(self._convs.get(p, set()) & self._convs.get(o, set()) for o in sure)]
            if 0 < len(keep) < len(ids):
                return keep
        if rest:
            keep = [p for p in ids if any(self._conv_words.get(c, set()) & rest for c in self._convs.get(p, ()))]
            if 0 < len(keep) < len(ids):
                return keep
        return ids

    def _conversations(self, slots: list[list[str]]) -> list[str]:
        sets = [set().union(*(self._convs.get(p, set()) for p in slot)) for slot in slots]
        together = set.intersection(*sets) if sets else set()
        return sorted(together or set().union(*sets))

