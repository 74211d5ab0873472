"""Build a realistic demo archive (chat.db + AddressBook [+ WhatsApp]) from real human chat.

Who talks to whom comes from the chitchat corpus (:mod:`brb_pipeline.demo.people`); this module
turns those conversations into chat.db rows, and :mod:`brb_pipeline.demo.contact_stores` writes
the AddressBook and WhatsApp stores.

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
from brb_pipeline.demo.chatdb_schema import STYLE_DIRECT, STYLE_GROUP
from brb_pipeline.demo.rich import write_placeholders, write_rich_messages
from brb_pipeline.demo.chatdb_writer import ChatDbBuilder
from brb_pipeline.demo.contact_stores import write_demo_addressbook, write_demo_mail_store, write_demo_whatsapp
from brb_pipeline.demo.people import Cast, Contact, random_guid

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


@dataclass
class DemoArchive:
    """Paths of a demo archive and what was put in it.

    Attributes:
        root: the archive folder.
        chat_db: the Messages database.
        addressbook_dir: the AddressBook folder (root store + ``Sources/<UUID>/``).
        whatsapp_db: ChatStorage.sqlite, or None unless ``whatsapp=True``.
        mail_dir: the folder standing for ``~/Library/Mail``, or None unless ``mail=True``.
        attachments_dir: the folder standing for ``~/Library/Messages/Attachments``.
        counts: what was written; ``expected_messages`` is what ``read_imessage`` should keep.
    """

    root: Path
    chat_db: Path
    addressbook_dir: Path
    whatsapp_db: Path | None
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    mail_dir: Path | None = None
    attachments_dir: Path | None = None


class _Events:
    """Every message row to write, as ``(ts, seq, kwargs)``; sorted by time before writing so
    ROWIDs are chronological, ``seq`` keeping the order of equal times."""

    def __init__(self) -> None:
        self.items: list[tuple[datetime, int, dict[str, Any]]] = []

    def push(self, ts: datetime, **kw: Any) -> None:
        self.items.append((ts, len(self.items), kw))


class _Gen:
    """One demo archive being written; every choice draws from ``self.rng`` in a fixed order."""

    def __init__(self, dest: Path, n: int | None, seed: int, split_contacts: int = 1) -> None:
        self.dest = dest
        self.rng = random.Random(seed)
        self.counts: dict[str, int] = {
            k: 0
            for k in (
                "corpus_messages", "message_rows", "expected_messages", "body_null", "body_empty",
                "tapbacks", "tapback_removals", "tapbacks_orphaned", "edited", "unsent",
                "attachments", "orphans", "vanished_handle_messages", "groups", "named_groups",
                "system_messages", "group_events", "rich_messages", "multilingual", "contacts", "email_handles", "intl_handles",
                "named_contacts", "addressbook_people", "addressbook_conflicts", "addressbook_stores",
                "conversations", "whatsapp_chats", "whatsapp_messages",
            )
        }
        self.cast = Cast(self.rng, self.counts, n, seed, max(1, int(split_contacts)))

    def build(self, whatsapp: bool, mail: bool = False, mail_messages: int = 0) -> DemoArchive:
        """Write chat.db, the AddressBook and (if asked) WhatsApp; returns the archive."""
        convs = self.cast.select()
        contacts = list(dict.fromkeys(c for c, _, _ in convs))
        self.counts["contacts"] = len(contacts)
        group_idx = self._pick_groups(convs, contacts)
        self.dest.mkdir(parents=True, exist_ok=True)
        b = ChatDbBuilder(self.dest / "chat.db", bulk=True, seed=self.rng.getrandbits(32))
        group_of = self._add_chats(b, convs, contacts, group_idx)

        ev = _Events()
        parents, incoming_direct = self._conversation_events(ev, convs, group_of)
        n_corpus = self.counts["corpus_messages"]
        n_orphans = max(2, n_corpus // 1500)
        # Orphans: incoming direct messages that lose their chat join.
        for idx in self.rng.sample(incoming_direct, min(n_orphans, len(incoming_direct))):
            ev.items[idx][2]["chat"] = None
            self.counts["orphans"] += 1
        self._tapback_events(ev, parents)
        self._extra_events(ev, parents, n_corpus)
        self._multilingual_events(ev, convs, contacts, group_of, parents)

        ev.items.sort(key=lambda e: (e[0], e[1]))
        self._write_messages(b, ev.items)
        self._rich_messages(b, parents)
        b.close()
        write_placeholders(self.dest / "chat.db", self.dest / "Attachments")  # one file left out, on purpose

        self.counts["expected_messages"] = (
            self.counts["corpus_messages"] + self.counts["attachments"] + self.counts["multilingual"]
            + self.counts["group_events"] + self.counts["rich_messages"]
        )
        ab_dir = self.dest / "AddressBook"
        write_demo_addressbook(ab_dir, [c for c in contacts], self.rng, self.counts)
        wa = write_demo_whatsapp(self.dest, contacts, self.rng, self.counts) if whatsapp else None
        mail_dir = write_demo_mail_store(self.dest, contacts, self.cast.seed, self.counts,
                                         mail_messages) if mail else None
        return DemoArchive(self.dest, self.dest / "chat.db", ab_dir, wa, self.counts, mail_dir=mail_dir,
                           attachments_dir=self.dest / "Attachments")

    def _pick_groups(self, convs: list, contacts: list[Contact]) -> list[int]:
        """Which conversations become group chats, and the one contact whose handle vanishes."""
        r = self.rng
        # Groups: a host conversation whose incoming turns are spread over 2-3 members.
        eligible = [i for i, (_, m, _) in enumerate(convs) if len(m) >= 6 and any(s != m[0][1] for _, s, _ in m)]
        n_groups = min(len(eligible), max(3, len(convs) // 150)) if len(contacts) >= 3 else 0
        group_idx = sorted(r.sample(eligible, n_groups)) if n_groups else []

        # Vanished handle: a contact outside the groups with few messages.
        in_groups = {convs[i][0].key for i in group_idx}
        msg_count: dict[str, int] = {}
        for c, m, _ in convs:
            msg_count[c.key] = msg_count.get(c.key, 0) + len(m)
        vanish_pool = sorted((c for c in contacts if c.key not in in_groups), key=lambda c: (msg_count[c.key], c.key))
        vanished = vanish_pool[len(vanish_pool) // 3] if len(vanish_pool) >= 4 else None
        if vanished is not None:
            vanished.vanished = True
        return group_idx

    def _add_chats(self, b: ChatDbBuilder, convs: list, contacts: list[Contact], group_idx: list[int]) -> dict[int, int]:
        """Handles and direct chats for every contact, then the group chats; each group
        conversation in ``convs`` becomes ``(members, messages, me key, chat rowid, name)``.

        Returns:
            Conversation index -> group number.
        """
        r = self.rng
        group_of: dict[int, int] = {}
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
        return group_of

    def _conversation_events(self, ev: _Events, convs: list, group_of: dict[int, int]) -> tuple[list, list[int]]:
        """The corpus messages (and a rename system message per named group).

        Returns:
            ``(parents, incoming_direct)``: ``(ts, guid, me, members, chat)`` of every message, for
            the tapbacks and extras; event indices of incoming direct messages, for the orphans.
        """
        r = self.rng
        parents: list[tuple[datetime, str, bool, Any, int]] = []
        incoming_direct: list[int] = []
        for i, conv in enumerate(convs):
            if i in group_of:
                members, msgs, me_key, chat, name = conv
                turn_sender = members[0]
                if name is not None:
                    ev.push(msgs[0][0] - timedelta(minutes=5), kind="system", chat=chat, title=name)
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
                guid = random_guid(r)
                ev.push(ts, kind="msg", chat=chat, who=who, me=me, text=text, guid=guid)
                if not me and i not in group_of and not members[0].vanished:
                    incoming_direct.append(len(ev.items) - 1)
                parents.append((ts, guid, me, members, chat))
        return parents, incoming_direct

    def _tapback_events(self, ev: _Events, parents: list) -> None:
        """Tapbacks on ~3 % of messages, ~15 % of them removed later, and one whose parent is gone."""
        r = self.rng
        for ts, guid, me, members, chat in r.sample(parents, round(len(parents) * 0.03)):
            kind = r.choices(TAPBACK_KINDS, TAPBACK_WEIGHTS)[0]
            emoji = None
            if r.random() < 0.06:
                kind, emoji = "emoji", r.choice(EMOJI_REACTIONS)
            who = None if not me else r.choice(members)
            t_add = ts + timedelta(seconds=r.randint(5, 900))
            ev.push(t_add, kind="tapback", chat=chat, who=who, me=not me, parent=guid, rkind=kind, emoji=emoji,
                    part=None if r.random() < 0.1 else 0)
            self.counts["tapbacks"] += 1
            if r.random() < 0.15:
                ev.push(t_add + timedelta(seconds=r.randint(30, 3600)), kind="tapback", chat=chat, who=who,
                        me=not me, parent=guid, rkind=kind, emoji=emoji, remove=True, part=0)
                self.counts["tapback_removals"] += 1
        # One tapback whose parent was deleted long ago.
        if parents:
            ts, _, me, members, chat = parents[len(parents) // 2]
            ev.push(ts + timedelta(seconds=40), kind="tapback", chat=chat, who=None, me=True, parent=random_guid(r),
                    rkind="like", emoji=None, part=0)
            self.counts["tapbacks_orphaned"] += 1

    def _extra_events(self, ev: _Events, parents: list, n_corpus: int) -> None:
        """Attachment messages (U+FFFC) and unsent messages next to corpus messages."""
        r = self.rng
        extras = r.sample(parents, min(len(parents), max(3, n_corpus // 250)))
        for ts, _, me, members, chat in extras:
            t = ts + timedelta(seconds=r.randint(20, 300))
            text = "\ufffc" if r.random() < 0.6 else r.choice(["look at this \ufffc", "\ufffc\ufffc from today"])
            n_att = text.count("\ufffc")
            ev.push(t, kind="msg", chat=chat, who=None if me else members[0], me=me, text=text, guid=random_guid(r),
                    attachments=n_att)
            self.counts["attachments"] += 1
        for ts, _, _, members, chat in r.sample(parents, min(len(parents), max(2, n_corpus // 3000))):
            ev.push(ts + timedelta(seconds=r.randint(5, 60)), kind="msg", chat=chat, who=None, me=True, text=None,
                    guid=random_guid(r), unsent=True)
            self.counts["unsent"] += 1

    def _multilingual_events(self, ev: _Events, convs: list, contacts: list[Contact], group_of: dict[int, int],
                             parents: list) -> None:
        """Each :data:`MULTILINGUAL` message, in a direct chat with a contact of that locale."""
        r = self.rng
        by_locale: dict[str, list[Contact]] = {}
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
            ev.push(t + timedelta(seconds=r.randint(60, 7200)), kind="msg", chat=c.chat, who=None if me else c,
                    me=me, text=text, guid=random_guid(r))
            self.counts["multilingual"] += 1

    def _rich_messages(self, b: ChatDbBuilder, parents: list) -> None:
        """Attachments, link previews, a reply and group events (:mod:`brb_pipeline.demo.rich`)."""
        direct = next((p for p in parents if len(p[3]) == 1 and not p[3][0].vanished and p[4] == p[3][0].chat), None)
        if direct is None:
            return
        group = next((p for p in parents if len(p[3]) > 1), None)
        write_rich_messages(
            b, self.dest / "Attachments", (direct[4], direct[3][0].rowid, direct[0]),
            None if group is None else (group[4], [m.rowid for m in group[3]], group[0]), direct[1], self.counts)

    def _write_messages(self, b: ChatDbBuilder, events: list) -> None:
        r = self.rng
        for n, (ts, _, kw) in enumerate(events):
            kind = kw["kind"]
            who = kw.get("who")
            handle = who.rowid if who is not None else 0
            self.counts["message_rows"] += 1
            if kind == "system":
                b.add_message(kw["chat"], 0, None, ts=ts, is_from_me=True, item_type=2, group_title=kw["title"],
                              guid=random_guid(r))
                self.counts["group_events"] += 1  # a rename: kept as a group event
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


def build_demo_archive(
    dest: Path, *, messages: int | None = 6000, seed: int = 7, whatsapp: bool = False, split_contacts: int = 1,
    mail: bool = False, mail_messages: int = 0,
) -> DemoArchive:
    """Write a demo archive into ``dest`` from the chitchat corpus; deterministic per seed.

    Args:
        dest: folder to write into; created if needed. An earlier demo archive there (marked by
            ``demo.json``) is replaced; any other existing ``chat.db`` there is an error.
        messages: number of corpus messages to take (whole conversations in start-time order,
            the last one cut); None takes the whole corpus (258,145). More than the corpus
            passes over it again with new people a year later each time
            (:func:`~brb_pipeline.demo.people.corpus_cycles`), as many times as it takes.
        seed: random seed for every choice layered on the corpus.
        whatsapp: also write a small ``ChatStorage.sqlite``.
        mail: also write a small Mail store (``Mail/V10``) with threads between the demo's
            e-mail contacts; the rest of the archive is the same as without it.
        mail_messages: with ``mail``, that many more mail messages in reply threads with those
            contacts (a Mail-heavy home when it is more than ``messages``).
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
    archive = _Gen(dest, messages, seed, split_contacts).build(whatsapp, mail, mail_messages)
    archive.seconds = time.perf_counter() - t0
    marker = {"seed": seed, "messages": messages, "split_contacts": split_contacts, "counts": archive.counts}
    (dest / MARKER).write_text(json.dumps(marker, indent=2))
    log.info(
        "Demo - %s corpus messages, %s contacts, %s groups in %.1f s",
        f"{archive.counts['corpus_messages']:,}", archive.counts["contacts"], archive.counts["groups"],
        time.perf_counter() - t0,
    )
    return archive
