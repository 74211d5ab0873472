"""Build a realistic demo archive (chat.db + AddressBook [+ WhatsApp]) from real human chat.

Source: the chitchat-dataset corpus (MIT; 7,168 conversations, 258,145 messages, 1,315
participants, 2018). The archive belongs to one owner: in each conversation the first speaker
is "me" and the other participant is a contact, so a contact has several conversations at
natural time gaps. One-turn conversations (nobody answered) go to a contact already seen.

Layered on top, deterministically for a seed, so every reader rule has something to chew on:
E.164 phone handles (US and +44/+90/+971/+49/+33/+81), a few e-mail handles, ~30 % of messages
only in ``attributedBody`` (half ``text`` NULL, half ''), ~3 % tapbacked (some later removed,
one whose parent is gone), ~0.5 % edited, a few unsent, a few attachments (U+FFFC), a handful
of orphans (no chat join), one vanished handle, group chats (some named, with a rename system
message), curated multilingual messages (Turkish, Arabic, emoji, phone numbers) for search, an
AddressBook split across the root store and ``Sources/<UUID>/`` with numbers as typed and two
deliberate conflicts, and (opt-in) a small WhatsApp store.

Layout of ``dest``::

    chat.db
    AddressBook/AddressBook-v22.abcddb
    AddressBook/Sources/<UUID>/AddressBook-v22.abcddb
    ChatStorage.sqlite        (whatsapp=True only)
    Mail/V10/...              (mail=True only: Envelope Index and .emlx bodies)
    demo.json                 (the counts below; marks the folder as a demo archive)
"""

from __future__ import annotations

import functools
import json
import logging
import random
import shutil
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from brb_pipeline.demo import names as N
from brb_pipeline.demo.chatdb_writer import STYLE_DIRECT, STYLE_GROUP, ChatDbBuilder

log = logging.getLogger(__name__)

MARKER = "demo.json"

# Curated messages for search tests: (locale hint, text). Contacts with a matching country get them.
MULTILINGUAL = [
    ("tr", "Yarın İstanbul'a gidiyorum, akşam Kadıköy'de buluşalım mı?"),
    ("tr", "Doğum günün kutlu olsun! 🎂🎉 Nice mutlu yıllara"),
    ("tr", "Yeni numaram +90 532 123 45 67, kaydet lütfen"),
    ("tr", "Çok teşekkürler, şöyle güzel bir gün geçirdik ağabey"),
    ("ar", "مرحبا، كيف حالك؟ نلتقي غدا في دبي"),
    ("ar", "رقمي الجديد +971 50 123 4567"),
    ("ar", "شكرا جزيلا على العشاء 🙏"),
    ("en", "call me at (555) 010-4477 when you land ✈️"),
    ("en", "My new number is 415-555-0199, the old one is dead"),
    ("en", "🎉🎉🎉 we got the apartment!!! 🏠🔑"),
    ("en", "😂😂😂 I can't believe that happened"),
    ("de", "Alles Gute zum Geburtstag! Wir sehen uns in München 🍺"),
    ("fr", "On se voit à la gare à 18h ? Mon portable: +33 6 12 34 56 78"),
    ("ja", "明日の会議は10時からです。よろしくお願いします 🙇"),
    ("en", "Wifi password is Blue-Otter-42, door code 7731#"),
    ("en", "Dinner at Nüsr-Et on Friday? ☕️ first at the café"),
]

EMOJI_REACTIONS = ["🔥", "🥹", "🙏", "💯", "👀", "🫶"]
TAPBACK_KINDS = ["love", "like", "laugh", "emphasize", "question", "dislike"]
TAPBACK_WEIGHTS = [30, 25, 25, 8, 5, 3]
GROUP_NAMES = ["Family 🏡", "Weekend hikers", "Book club 📚", "Roommates", "İstanbul trip ✈️",
               "Work lunch", "Soccer Sundays ⚽", "Wedding planning 💍"]

_INTL = [  # (calling code, national number builder)
    ("44", lambda r: "7700900" + f"{r.randrange(1000):03d}"),
    ("90", lambda r: "532" + f"{r.randrange(10**7):07d}"),
    ("971", lambda r: "50" + f"{r.randrange(10**7):07d}"),
    ("49", lambda r: "151" + f"{r.randrange(10**8):08d}"),
    ("33", lambda r: "6" + f"{r.randrange(10**8):08d}"),
    ("81", lambda r: "90" + f"{r.randrange(10**8):08d}"),
]
_US_AREAS = ["212", "415", "617", "312", "206", "512", "303", "305", "718", "646"]


@dataclass
class DemoArchive:
    """Paths of a demo archive and what was put in it.

    Attributes:
        root: the archive folder.
        chat_db: the Messages database.
        addressbook_dir: the AddressBook folder (root store + ``Sources/<UUID>/``).
        whatsapp_db: ChatStorage.sqlite, or None unless ``whatsapp=True``.
        mail_dir: the folder standing for ``~/Library/Mail``, or None unless ``mail=True``.
        counts: what was written; ``expected_messages`` is what ``read_imessage`` should keep.
    """

    root: Path
    chat_db: Path
    addressbook_dir: Path
    whatsapp_db: Path | None
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    mail_dir: Path | None = None


def demo_corpus_path() -> Path:
    """Path of chitchat-dataset's ``dataset.json`` (the installed package)."""
    import chitchat_dataset

    return Path(chitchat_dataset.__file__).parent / "dataset.json"


@functools.lru_cache(maxsize=1)
def _corpus() -> tuple[tuple[str, tuple[tuple[datetime, str, str], ...]], ...]:
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


def _guid(rng: random.Random) -> str:
    """A deterministic upper-case UUID-4-shaped guid, like Messages writes."""
    h = f"{rng.getrandbits(128):032X}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{h[16:20]}-{h[20:]}"


@dataclass(eq=False)
class _Contact:
    key: str  # corpus participant id
    handle: str  # as stored in handle.id (E.164 or e-mail)
    cc: str  # calling code ("1", "90", ...) or "" for e-mail
    national: str = ""
    rowid: int = 0
    chat: int = 0
    vanished: bool = False
    name: tuple[str | None, str | None] | None = None
    messages: int = 0


class _Gen:
    def __init__(self, dest: Path, n: int | None, seed: int, split_contacts: int = 1) -> None:
        self.dest = dest
        self.n = n
        self.split = max(1, int(split_contacts))
        self.seed = seed
        self.rng = random.Random(seed)
        self.contacts: dict[str, _Contact] = {}
        self.used_numbers: set[str] = set()
        self.counts: dict[str, int] = {
            k: 0
            for k in (
                "corpus_messages", "message_rows", "expected_messages", "body_null", "body_empty",
                "tapbacks", "tapback_removals", "tapbacks_orphaned", "edited", "unsent",
                "attachments", "orphans", "vanished_handle_messages", "groups", "named_groups",
                "system_messages", "multilingual", "contacts", "email_handles", "intl_handles",
                "named_contacts", "addressbook_people", "addressbook_conflicts", "addressbook_stores",
                "conversations", "whatsapp_chats", "whatsapp_messages",
            )
        }

    # ------------------------------------------------------------ contacts

    def _new_contact(self, key: str) -> _Contact:
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
                cc, nat = "1", r.choice(_US_AREAS) + "555" + f"{r.randrange(100, 10000):04d}"
                handle = f"+1{nat}"
            if handle not in self.used_numbers:
                self.used_numbers.add(handle)
                break
        c = _Contact(key=key, handle=handle, cc=cc, national=nat)
        self.contacts[key] = c
        self.counts["email_handles"] += cc == ""
        self.counts["intl_handles"] += cc not in ("", "1")
        return c

    # ------------------------------------------------------------ build

    def select(self) -> list[tuple[_Contact, tuple[tuple[datetime, str, str], ...], str]]:
        """Pick conversations until ``n`` messages; returns (contact, messages, me key)."""
        picked = []
        total = 0
        pending_one_turn: list[tuple[int, _Contact | None]] = []
        last_contact: _Contact | None = None
        seen: dict[str, int] = {}
        corpus = list(_corpus())
        if self.n is not None:
            # A partial archive samples conversations across the corpus' whole time span (Apr-Nov
            # 2018) rather than its first days; they are put back in time order below.
            random.Random(self.seed).shuffle(corpus)
        for _key, msgs in corpus:
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
                contact = self.contacts.get(other) or self._new_contact(other)
                last_contact = contact
                picked.append([contact, msgs, me])
            total += len(msgs)
        known = [c for c, _, _ in picked if c is not None]
        if not known:  # tiny n and only unanswered openers: invent one contact
            known = [self._new_contact("demo-contact-0")]
        for i, prior in pending_one_turn:
            # Unanswered opener: to someone already in the archive (the one most recently seen).
            picked[i][0] = prior if prior is not None and self.rng.random() < 0.7 else self.rng.choice(known)
        picked.sort(key=lambda p: (p[1][0][0], p[2]))  # a real chat.db grows in time order
        self.counts["corpus_messages"] = total
        self.counts["conversations"] = len(picked)
        return [tuple(p) for p in picked]

    def build(self, whatsapp: bool, mail: bool = False) -> DemoArchive:
        r = self.rng
        convs = self.select()
        contacts = list(dict.fromkeys(c for c, _, _ in convs))
        self.counts["contacts"] = len(contacts)

        # Groups: a host conversation whose incoming turns are spread over 2-3 members.
        eligible = [i for i, (_, m, _) in enumerate(convs) if len(m) >= 6 and any(s != m[0][1] for _, s, _ in m)]
        n_groups = min(len(eligible), max(3, len(convs) // 150)) if len(contacts) >= 3 else 0
        group_idx = sorted(r.sample(eligible, n_groups)) if n_groups else []
        group_of: dict[int, int] = {}

        # Vanished handle: a contact outside the groups with few messages.
        in_groups = {convs[i][0].key for i in group_idx}
        msg_count: dict[str, int] = {}
        for c, m, _ in convs:
            msg_count[c.key] = msg_count.get(c.key, 0) + len(m)
        vanish_pool = sorted((c for c in contacts if c.key not in in_groups), key=lambda c: (msg_count[c.key], c.key))
        vanished = vanish_pool[len(vanish_pool) // 3] if len(vanish_pool) >= 4 else None
        if vanished is not None:
            vanished.vanished = True

        self.dest.mkdir(parents=True, exist_ok=True)
        b = ChatDbBuilder(self.dest / "chat.db", bulk=True, seed=self.rng.getrandbits(32))
        for c in contacts:
            c.rowid = b.add_handle(c.handle, country="us" if c.cc == "1" else None, write=not c.vanished)
            ident = c.handle
            c.chat = b.add_chat([] if c.vanished else [c.rowid], style=STYLE_DIRECT,
                                identifier=ident, guid=f"iMessage;-;{ident}")
        for gi, i in enumerate(group_idx):
            host = convs[i][0]
            others = [c for c in contacts if c is not host and not c.vanished]
            members = [host] + r.sample(others, min(len(others), r.choice([1, 2])))
            name = GROUP_NAMES[gi % len(GROUP_NAMES)] if gi % 2 == 0 else None
            ident = f"chat{r.randrange(10**17, 10**18)}"
            chat = b.add_chat([m.rowid for m in members], style=STYLE_GROUP, display_name=name,
                              identifier=ident, guid=f"iMessage;+;{ident}")
            group_of[i] = len(group_of)
            convs[i] = (members, convs[i][1], convs[i][2], chat, name)
            self.counts["groups"] += 1
            self.counts["named_groups"] += name is not None

        # Every message to write, as (ts, seq, kwargs). Sorted by time so ROWIDs are chronological.
        events: list[tuple[datetime, int, dict[str, Any]]] = []
        seq = 0

        def push(ts: datetime, **kw: Any) -> None:
            nonlocal seq
            events.append((ts, seq, kw))
            seq += 1

        n_corpus = self.counts["corpus_messages"]
        n_orphans = max(2, n_corpus // 1500)
        parents: list[tuple[datetime, str, bool, Any, int]] = []  # for tapbacks: (ts, guid, me, members, chat)
        incoming_direct: list[int] = []
        for i, conv in enumerate(convs):
            if i in group_of:
                members, msgs, me_key, chat, name = conv
                turn_sender = members[0]
                if name is not None:
                    push(msgs[0][0] - timedelta(minutes=5), kind="system", chat=chat, title=name)
            else:
                contact, msgs, me_key = conv
                members, chat = [contact], contact.chat
            prev_sender = None
            for ts, sender, text in msgs:
                me = sender == me_key
                if not text.strip():
                    text = "👍"
                if i in group_of and not me and sender != prev_sender:
                    # A new incoming turn in a group: usually the host, sometimes another member.
                    turn_sender = members[0] if r.random() < 0.6 else r.choice(members)
                prev_sender = sender
                who = None if me else (turn_sender if i in group_of else members[0])
                guid = _guid(r)
                push(ts, kind="msg", chat=chat, who=who, me=me, text=text, guid=guid)
                if not me and i not in group_of and not members[0].vanished:
                    incoming_direct.append(len(events) - 1)
                parents.append((ts, guid, me, members, chat))

        # Orphans: incoming direct messages that lose their chat join.
        for idx in r.sample(incoming_direct, min(n_orphans, len(incoming_direct))):
            events[idx][2]["chat"] = None
            self.counts["orphans"] += 1

        # Tapbacks on ~3 % of messages; ~15 % of those removed later.
        for ts, guid, me, members, chat in r.sample(parents, round(len(parents) * 0.03)):
            kind = r.choices(TAPBACK_KINDS, TAPBACK_WEIGHTS)[0]
            emoji = None
            if r.random() < 0.06:
                kind, emoji = "emoji", r.choice(EMOJI_REACTIONS)
            who = None if not me else r.choice(members)
            t_add = ts + timedelta(seconds=r.randint(5, 900))
            push(t_add, kind="tapback", chat=chat, who=who, me=not me, parent=guid, rkind=kind, emoji=emoji,
                 part=None if r.random() < 0.1 else 0)
            self.counts["tapbacks"] += 1
            if r.random() < 0.15:
                push(t_add + timedelta(seconds=r.randint(30, 3600)), kind="tapback", chat=chat, who=who,
                     me=not me, parent=guid, rkind=kind, emoji=emoji, remove=True, part=0)
                self.counts["tapback_removals"] += 1
        # One tapback whose parent was deleted long ago.
        if parents:
            ts, _, me, members, chat = parents[len(parents) // 2]
            push(ts + timedelta(seconds=40), kind="tapback", chat=chat, who=None, me=True, parent=_guid(r),
                 rkind="like", emoji=None, part=0)
            self.counts["tapbacks_orphaned"] += 1

        # Extras: attachments, unsent, multilingual.
        extras = r.sample(parents, min(len(parents), max(3, n_corpus // 250)))
        for ts, _, me, members, chat in extras:
            t = ts + timedelta(seconds=r.randint(20, 300))
            text = "\ufffc" if r.random() < 0.6 else r.choice(["look at this \ufffc", "\ufffc\ufffc from today"])
            n_att = text.count("\ufffc")
            push(t, kind="msg", chat=chat, who=None if me else members[0], me=me, text=text, guid=_guid(r),
                 attachments=n_att)
            self.counts["attachments"] += 1
        for ts, _, _, members, chat in r.sample(parents, min(len(parents), max(2, n_corpus // 3000))):
            push(ts + timedelta(seconds=r.randint(5, 60)), kind="msg", chat=chat, who=None, me=True, text=None,
                 guid=_guid(r), unsent=True)
            self.counts["unsent"] += 1
        by_locale: dict[str, list[_Contact]] = {}
        for c in contacts:
            if not c.vanished:
                by_locale.setdefault(N.LOCALE_BY_CC.get(c.cc, "en"), []).append(c)
        conv_span = {}
        for i, conv in enumerate(convs):
            if i not in group_of:
                conv_span.setdefault(conv[0].key, conv[1][-1][0])
        for loc, text in MULTILINGUAL:
            pool = by_locale.get(loc) or [c for c in contacts if not c.vanished]
            c = pool[r.randrange(len(pool))]
            t = conv_span.get(c.key, parents[0][0] if parents else datetime(2018, 6, 1, tzinfo=UTC))
            me = r.random() < 0.4
            push(t + timedelta(seconds=r.randint(60, 7200)), kind="msg", chat=c.chat, who=None if me else c,
                 me=me, text=text, guid=_guid(r))
            self.counts["multilingual"] += 1

        events.sort(key=lambda e: (e[0], e[1]))
        self._write_messages(b, events)
        b.close()

        self.counts["expected_messages"] = (
            self.counts["corpus_messages"] + self.counts["attachments"] + self.counts["multilingual"]
        )
        ab_dir = self.dest / "AddressBook"
        self._addressbook(ab_dir, [c for c in contacts])
        wa = self._whatsapp(convs, contacts) if whatsapp else None
        mail_dir = self._mail(contacts) if mail else None
        return DemoArchive(self.dest, self.dest / "chat.db", ab_dir, wa, self.counts, mail_dir=mail_dir)

    def _write_messages(self, b: ChatDbBuilder, events: list) -> None:
        r = self.rng
        for n, (ts, _, kw) in enumerate(events):
            kind = kw["kind"]
            who = kw.get("who")
            handle = who.rowid if who is not None else 0
            self.counts["message_rows"] += 1
            if kind == "system":
                b.add_message(kw["chat"], 0, None, ts=ts, is_from_me=True, item_type=2, group_title=kw["title"],
                              guid=_guid(r))
                self.counts["system_messages"] += 1
            elif kind == "tapback":
                b.add_tapback(kw["chat"], handle, kw["parent"], kw["rkind"], ts=ts, is_from_me=kw["me"],
                              remove=kw.get("remove", False), part=kw["part"], emoji=kw["emoji"])
            elif kw.get("unsent"):
                b.add_message(kw["chat"], 0, None, ts=ts, is_from_me=True, guid=kw["guid"],
                              date_edited=ts + timedelta(seconds=30), date_retracted=ts + timedelta(seconds=30))
            else:
                x = r.random()
                mode = "body_null" if x < 0.15 else "body_empty" if x < 0.30 else "text"
                self.counts["body_null"] += mode == "body_null"
                self.counts["body_empty"] += mode == "body_empty"
                self.counts["vanished_handle_messages"] += who is not None and who.vanished
                edited = None
                if kw["text"] and r.random() < 0.005:
                    edited = ts + timedelta(seconds=r.randint(10, 600))
                    self.counts["edited"] += 1
                b.add_message(kw["chat"], handle, kw["text"], ts=ts, is_from_me=kw["me"], guid=kw["guid"],
                              text_mode=mode, attachments=kw.get("attachments", 0), date_edited=edited)
            if n % 20000 == 19999:
                b.flush()  # bounded buffers on the full corpus

    # ------------------------------------------------------------ AddressBook

    def _typed(self, c: _Contact) -> str:
        """The number as a person would have typed it into Contacts."""
        r, nat = self.rng, c.national
        if c.cc == "1":
            a, e, s = nat[:3], nat[3:6], nat[6:]
            return r.choice([f"({a}) {e}-{s}", f"{a}-{e}-{s}", f"+1 {a} {e} {s}", f"{a}.{e}.{s}", f"1 ({a}) {e}-{s}"])
        if c.cc == "90":
            return f"+90 {nat[:3]} {nat[3:6]} {nat[6:8]} {nat[8:]}"
        if c.cc == "44":
            return f"+44 {nat[:4]} {nat[4:]}"
        if c.cc == "971":
            return f"+971 {nat[:2]} {nat[2:5]} {nat[5:]}"
        if c.cc == "33":
            return "+33 " + nat[0] + " " + " ".join(nat[i : i + 2] for i in range(1, 9, 2))
        return f"+{c.cc} {nat}"

    def _addressbook(self, ab_dir: Path, contacts: list[_Contact]) -> None:
        from brb_pipeline.demo.addressbook_writer import PersonRecord, write_addressbook

        r = self.rng
        root_people: list[PersonRecord] = []
        source_people: list[PersonRecord] = []
        named: list[tuple[_Contact, PersonRecord]] = []
        for i, c in enumerate(contacts):
            if i % 5 == 4:
                continue  # every fifth contact stays unnamed (only the handle is known): 80 % named
            loc = N.LOCALE_BY_CC.get(c.cc) or r.choice(N.US_LOCALES)
            first, last = r.choice(N.FIRST[loc]), r.choice(N.LAST[loc])
            org = nick = None
            y = r.random()
            if y < 0.03:
                first, last, org = None, None, r.choice(N.ORGANIZATIONS)
            elif y < 0.10:
                nick = r.choice(N.NICKNAMES)
            phones, emails = [], []
            if c.cc:
                phones.append(self._typed(c))
                if r.random() < 0.1:
                    phones.append(f"({r.choice(_US_AREAS)}) 555-{r.randrange(10000):04d}")  # work line, unused
            else:
                emails.append(c.handle if r.random() < 0.7 else c.handle.capitalize())
            p = PersonRecord(first, last, organization=org, nickname=nick, phones=phones, emails=emails)
            c.name = (first, last)
            (source_people if r.random() < 0.3 else root_people).append(p)
            named.append((c, p))
        # People in Contacts you never texted.
        for _ in range(3):
            loc = r.choice(list(N.FIRST))
            root_people.append(PersonRecord(r.choice(N.FIRST[loc]), r.choice(N.LAST[loc]),
                                            phones=[f"+1 {r.choice(_US_AREAS)} 555 {r.randrange(10000):04d}"]))
        # Deliberate conflicts: the same number under a second name in the other store.
        phone_named = [(c, p) for c, p in named if c.cc]
        for c, p in phone_named[: min(2, len(phone_named))]:
            loc = r.choice(list(N.FIRST))
            dup = PersonRecord(r.choice(N.FIRST[loc]), r.choice(N.LAST[loc]), phones=[self._typed(c)])
            (root_people if p in source_people else source_people).append(dup)
            self.counts["addressbook_conflicts"] += 1
        self.counts["named_contacts"] = len(named)
        self.counts["addressbook_people"] = len(root_people) + len(source_people)
        ab_dir.mkdir(parents=True, exist_ok=True)
        write_addressbook(ab_dir / "AddressBook-v22.abcddb", root_people)
        src = ab_dir / "Sources" / _guid(r)
        src.mkdir(parents=True)
        write_addressbook(src / "AddressBook-v22.abcddb", source_people)
        self.counts["addressbook_stores"] = 2

    # ------------------------------------------------------------ WhatsApp

    def _whatsapp(self, convs: list, contacts: list[_Contact]) -> Path:
        from brb_pipeline.demo.whatsapp_writer import WAChatRecord, WAMessageRecord, write_whatsapp

        r = self.rng
        phones = [c for c in contacts if c.cc and not c.vanished][:6]
        # Conversations beyond the ones used for iMessage, so WhatsApp text is not a duplicate.
        corpus = _corpus()
        start = min(self.counts["conversations"], len(corpus) - 5)
        spare = [m for _, m in corpus[start:] if len({s for _, s, _ in m}) == 2][:5]
        chats: list[WAChatRecord] = []
        msgs: list[WAMessageRecord] = []

        def name_of(c: _Contact) -> str:
            return " ".join(x for x in (c.name or (None, None)) if x) or c.handle

        for c, conv in zip(phones[:3], spare[:3], strict=False):
            jid = c.handle.lstrip("+") + "@s.whatsapp.net"
            chats.append(WAChatRecord(jid=jid, partner_name=name_of(c), is_group=False))
            me_key = conv[0][1]
            for ts, s, text in conv[:60]:
                msgs.append(WAMessageRecord(jid, s == me_key, None, ts, text or "👍", "3EB0" + r.randbytes(8).hex().upper()))
        if len(phones) >= 3 and len(spare) >= 4:
            gjid = f"1203630{r.randrange(10**11, 10**12)}@g.us"
            members = [(c.handle.lstrip("+") + "@s.whatsapp.net", name_of(c)) for c in phones[3:6] or phones[:2]]
            chats.append(WAChatRecord(jid=gjid, partner_name="Cousins 🇹🇷", is_group=True, members=members))
            conv = spare[3]
            me_key = conv[0][1]
            for ts, s, text in conv[:60]:
                mine = s == me_key
                msgs.append(WAMessageRecord(gjid, mine, None if mine else r.choice(members)[0], ts, text or "👍",
                                            "3EB0" + r.randbytes(8).hex().upper()))
            msgs.append(WAMessageRecord(gjid, False, members[0][0], conv[-1][0] + timedelta(minutes=3),
                                        "Bayramınız mübarek olsun 🌙 herkese selamlar", "3EB0" + r.randbytes(8).hex().upper()))
        path = self.dest / "ChatStorage.sqlite"
        write_whatsapp(path, chats, msgs)
        self.counts["whatsapp_chats"] = len(chats)
        self.counts["whatsapp_messages"] = len(msgs)
        return path


    # ------------------------------------------------------------ Mail

    def _mail(self, contacts: list[_Contact]) -> Path:
        from brb_pipeline.demo.mail_writer import write_demo_mail

        # Contacts whose iMessage handle is an e-mail address: the AddressBook knows them by it.
        people = [(" ".join(x for x in (c.name or ()) if x), c.handle)
                  for c in sorted(contacts, key=lambda c: c.name is None) if not c.cc and not c.vanished]
        demo = write_demo_mail(self.dest / "Mail", people, datetime(2018, 9, 3, 8, tzinfo=UTC), self.seed)
        self.counts.update(demo.counts)
        return self.dest / "Mail"


def build_demo_archive(
    dest: Path, *, messages: int | None = 6000, seed: int = 7, whatsapp: bool = False, split_contacts: int = 1,
    mail: bool = False,
) -> DemoArchive:
    """Write a demo archive into ``dest`` from the chitchat corpus; deterministic per seed.

    Args:
        dest: folder to write into; created if needed. An earlier demo archive there (marked by
            ``demo.json``) is replaced; any other existing ``chat.db`` there is an error.
        messages: number of corpus messages to take (whole conversations in start-time order,
            the last one cut); None takes the whole corpus (258,145).
        seed: random seed for every choice layered on the corpus.
        whatsapp: also write a small ``ChatStorage.sqlite``.
        mail: also write a small Mail store (``Mail/V10``) with threads between the demo's
            e-mail contacts; the rest of the archive is the same as without it.
        split_contacts: give each corpus participant's conversations to this many people in turn
            (1: one person each). A bigger archive split in proportion has more people, each as
            busy as in a smaller one, instead of the same people busier (memory benchmarks).

    Returns:
        The :class:`DemoArchive`.
    """
    t0 = time.perf_counter()
    dest = Path(dest)
    if (dest / MARKER).exists():
        for name in ("chat.db", "ChatStorage.sqlite", MARKER):
            (dest / name).unlink(missing_ok=True)
        shutil.rmtree(dest / "AddressBook", ignore_errors=True)
        shutil.rmtree(dest / "Mail", ignore_errors=True)
    elif (dest / "chat.db").exists():
        raise FileExistsError(f"{dest / 'chat.db'} exists and is not a demo archive; choose an empty folder")
    archive = _Gen(dest, messages, seed, split_contacts).build(whatsapp, mail)
    archive.seconds = time.perf_counter() - t0
    marker = {"seed": seed, "messages": messages, "split_contacts": split_contacts, "counts": archive.counts}
    (dest / MARKER).write_text(json.dumps(marker, indent=2))
    log.info(
        "Demo - %s corpus messages, %s contacts, %s groups in %.1f s",
        f"{archive.counts['corpus_messages']:,}", archive.counts["contacts"], archive.counts["groups"],
        time.perf_counter() - t0,
    )
    return archive
