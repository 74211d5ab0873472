"""Who is in a demo archive: the chitchat corpus, the contacts drawn from it, and their conversations.

Source: the chitchat-dataset corpus (MIT; 7,168 conversations, 258,145 messages, 1,315
participants, 2018). The archive belongs to one owner: in each conversation the first speaker
is "me" and the other participant is a contact, so a contact has several conversations at
natural time gaps. One-turn conversations (nobody answered) go to a contact already seen.
Each contact gets a handle: mostly US phone numbers, some international (+44/+90/+971/+49/+33/
+81), a few e-mail addresses.
"""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

CYCLE_SHIFT = timedelta(weeks=52)  # each further pass over the corpus: a year later, same weekdays
Conversation = tuple[tuple[datetime, str, str], ...]  # (ts UTC, corpus sender, text), in order

_INTL = [  # (calling code, national number builder)
    ("44", lambda r: "7700900" + f"{r.randrange(1000):03d}"),
    ("90", lambda r: "532" + f"{r.randrange(10**7):07d}"),
    ("971", lambda r: "50" + f"{r.randrange(10**7):07d}"),
    ("49", lambda r: "151" + f"{r.randrange(10**8):08d}"),
    ("33", lambda r: "6" + f"{r.randrange(10**8):08d}"),
    ("81", lambda r: "90" + f"{r.randrange(10**8):08d}"),
]
US_AREAS = ["212", "415", "617", "312", "206", "512", "303", "305", "718", "646"]


def demo_corpus_path() -> Path:
    """Path of chitchat-dataset's ``dataset.json`` (the installed package)."""
    import chitchat_dataset

    return Path(chitchat_dataset.__file__).parent / "dataset.json"


@functools.lru_cache(maxsize=1)
def load_corpus() -> tuple[tuple[str, Conversation], ...]:
    """Conversations in a deterministic order (start time, then key), messages flattened.

    Returns:
        ``((key, ((ts, sender, text), ...)), ...)``; ``ts`` UTC, turns concatenated in order.
    """
    data = json.loads(demo_corpus_path().read_text(encoding="utf-8"))
    out = []
    parse = datetime.fromisoformat
    for key in sorted(data, key=lambda k: (data[k].get("start", ""), k)):
        msgs = tuple(
            (parse(m["timestamp"].replace("Z", "+00:00")), m["sender"], m["text"])
            for turn in data[key]["messages"]
            for m in turn
        )
        if msgs:
            out.append((key, msgs))
    return tuple(out)


def corpus_cycles(n: int | None, seed: int) -> list[tuple[str, Conversation]]:
    """The conversations an archive of ``n`` messages draws from, in the order they are taken.

    Up to the corpus size this is the corpus itself (shuffled for a partial archive, so it spans
    the corpus' whole time range). A bigger archive passes over the corpus again as often as it
    takes: pass ``k`` has new people (each corpus participant as ``<id>~k``), each as busy as in
    the corpus, ``k`` x :data:`CYCLE_SHIFT` later; only the last, partial pass is shuffled.
    """
    corpus = list(load_corpus())
    size = sum(len(m) for _, m in corpus)
    if n is None or size == 0:
        return corpus
    passes = -(-n // size)  # ceil
    full = [c for k in range(passes - 1) for c in _shifted(corpus, k)]
    last = _shifted(corpus, passes - 1)
    random.Random(seed).shuffle(last)
    return full + last


def _shifted(corpus: list[tuple[str, Conversation]], k: int) -> list[tuple[str, Conversation]]:
    """Pass ``k`` over the corpus: senders renamed ``<id>~k`` and times ``k`` x CYCLE_SHIFT later."""
    if k == 0:
        return list(corpus)
    d = k * CYCLE_SHIFT
    return [(f"{key}~{k}", tuple((ts + d, f"{s}~{k}", text) for ts, s, text in msgs)) for key, msgs in corpus]


def random_guid(rng: random.Random) -> str:
    """A deterministic upper-case UUID-4-shaped guid, like Messages writes."""
    h = f"{rng.getrandbits(128):032X}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{h[16:20]}-{h[20:]}"


@dataclass(eq=False)
class Contact:
    """A corpus participant as a contact of the archive's owner, and where the writers put them."""

    key: str  # corpus participant id
    handle: str  # as stored in handle.id (E.164 or e-mail)
    cc: str  # calling code ("1", "90", ...) or "" for e-mail
    national: str = ""
    rowid: int = 0
    chat: int = 0
    vanished: bool = False
    name: tuple[str | None, str | None] | None = None


class Cast:
    """The contacts drawn from the corpus and the conversations picked for an archive.

    Args:
        rng: the archive's random source (shared with the writers: draws stay in one order).
        counts: the archive's counters, updated in place.
        n: corpus messages to take, or None for the whole corpus.
        seed: the archive's seed (the partial-archive shuffle uses its own generator from it).
        split: give each corpus participant's conversations to this many people in turn.
    """

    def __init__(self, rng: random.Random, counts: dict[str, int], n: int | None, seed: int, split: int) -> None:
        self.rng = rng
        self.counts = counts
        self.n = n
        self.seed = seed
        self.split = split
        self.contacts: dict[str, Contact] = {}
        self.used_numbers: set[str] = set()

    def new_contact(self, key: str) -> Contact:
        r = self.rng
        while True:
            x = r.random()
            if x < 0.10:
                local = f"{r.choice(['sam', 'kim', 'lee', 'deniz', 'noor', 'max'])}.{r.randrange(10**4)}"
                handle, cc, nat = f"{local}@{r.choice(['icloud.com', 'gmail.com', 'example.org'])}", "", ""
            elif x < 0.22:
                cc, make = r.choice(_INTL)
                nat = make(r)
                handle = f"+{cc}{nat}"
            else:
                cc, nat = "1", r.choice(US_AREAS) + "555" + f"{r.randrange(100, 10000):04d}"
                handle = f"+1{nat}"
            if handle not in self.used_numbers:
                self.used_numbers.add(handle)
                break
        c = Contact(key=key, handle=handle, cc=cc, national=nat)
        self.contacts[key] = c
        self.counts["email_handles"] += cc == ""
        self.counts["intl_handles"] += cc not in ("", "1")
        return c

    def select(self) -> list[tuple[Contact, Conversation, str]]:
        """Pick conversations until ``n`` messages; returns (contact, messages, me key)."""
        picked = []
        total = 0
        pending_one_turn: list[tuple[int, Contact | None]] = []
        last_contact: Contact | None = None
        seen: dict[str, int] = {}
        # A partial archive samples conversations across the corpus' whole time span (Apr-Nov
        # 2018) rather than its first days; they are put back in time order below.
        for _key, msgs in corpus_cycles(self.n, self.seed):
            if self.n is not None and total >= self.n:
                break
            if self.n is not None and total + len(msgs) > self.n:
                msgs = msgs[: self.n - total]
            me = msgs[0][1]
            other = next((s for _, s, _ in msgs if s != me), None)
            if other is None:
                pending_one_turn.append((len(picked), last_contact))
                picked.append([None, msgs, me])
            else:
                if self.split > 1:  # the participant's conversations go to `split` people in turn
                    seen[other] = seen.get(other, -1) + 1
                    other = f"{other}#{seen[other] % self.split}"
                contact = self.contacts.get(other) or self.new_contact(other)
                last_contact = contact
                picked.append([contact, msgs, me])
            total += len(msgs)
        known = [c for c, _, _ in picked if c is not None]
        if not known:  # tiny n and only unanswered openers: invent one contact
            known = [self.new_contact("demo-contact-0")]
        for i, prior in pending_one_turn:
            # Unanswered opener: to someone already in the archive (the one most recently seen).
            picked[i][0] = prior if prior is not None and self.rng.random() < 0.7 else self.rng.choice(known)
        picked.sort(key=lambda p: (p[1][0][0], p[2]))  # a real chat.db grows in time order
        self.counts["corpus_messages"] = total
        self.counts["conversations"] = len(picked)
        return [tuple(p) for p in picked]
