"""The contact stores of a demo archive: the owner's AddressBook and (opt-in) a WhatsApp store.

Both draw from the archive's one random source after chat.db is written, so they stay the same
for a seed.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from brb_pipeline.demo import names as N
from brb_pipeline.demo.addressbook_writer import PersonRecord, write_addressbook
from brb_pipeline.demo.people import US_AREAS, Contact, load_corpus, random_guid
from brb_pipeline.demo.whatsapp_writer import WAChatRecord, WAMessageRecord, write_whatsapp


def _typed(r: random.Random, c: Contact) -> str:
    """The number as a person would have typed it into Contacts."""
    nat = c.national
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


def write_demo_addressbook(ab_dir: Path, contacts: list[Contact], r: random.Random, counts: dict[str, int]) -> None:
    """The owner's Contacts: 80 % of the contacts named (numbers as typed), split over the root
    store and ``Sources/<UUID>/``, three people never texted and two deliberate conflicts (the
    same number under a second name in the other store). Sets each named contact's ``name``."""
    root_people: list[PersonRecord] = []
    source_people: list[PersonRecord] = []
    named: list[tuple[Contact, PersonRecord]] = []
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
            phones.append(_typed(r, c))
            if r.random() < 0.1:
                phones.append(f"({r.choice(US_AREAS)}) 555-{r.randrange(10000):04d}")  # work line, unused
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
                                        phones=[f"+1 {r.choice(US_AREAS)} 555 {r.randrange(10000):04d}"]))
    # Deliberate conflicts: the same number under a second name in the other store.
    phone_named = [(c, p) for c, p in named if c.cc]
    for c, p in phone_named[: min(2, len(phone_named))]:
        loc = r.choice(list(N.FIRST))
        dup = PersonRecord(r.choice(N.FIRST[loc]), r.choice(N.LAST[loc]), phones=[_typed(r, c)])
        (root_people if p in source_people else source_people).append(dup)
        counts["addressbook_conflicts"] += 1
    counts["named_contacts"] = len(named)
    counts["addressbook_people"] = len(root_people) + len(source_people)
    ab_dir.mkdir(parents=True, exist_ok=True)
    write_addressbook(ab_dir / "AddressBook-v22.abcddb", root_people)
    src = ab_dir / "Sources" / random_guid(r)
    src.mkdir(parents=True)
    write_addressbook(src / "AddressBook-v22.abcddb", source_people)
    counts["addressbook_stores"] = 2


def write_demo_whatsapp(dest: Path, contacts: list[Contact], r: random.Random, counts: dict[str, int]) -> Path:
    """A small ``ChatStorage.sqlite``: three direct chats and a group with phone contacts, from
    corpus conversations after the ones iMessage used. Returns its path."""
    phones = [c for c in contacts if c.cc and not c.vanished][:6]
    # Conversations beyond the ones used for iMessage, so WhatsApp text is not a duplicate.
    corpus = load_corpus()
    start = min(counts["conversations"], len(corpus) - 5)
    spare = [m for _, m in corpus[start:] if len({s for _, s, _ in m}) == 2][:5]
    chats: list[WAChatRecord] = []
    msgs: list[WAMessageRecord] = []

    def name_of(c: Contact) -> str:
        return " ".join(x for x in (c.name or (None, None)) if x) or c.handle

    for c, conv in zip(phones[:3], spare[:3], strict=False):
        jid = c.handle.lstrip("+") + "@s.whatsapp.net"
        chats.append(WAChatRecord(jid=jid, partner_name=name_of(c), is_group=False))
        me_key = conv[0][1]
        for ts, s, text in conv[:60]:
            msgs.append(WAMessageRecord(jid, s == me_key, None, ts, text or "👍", "3EB0" + r.randbytes(8).hex().upper()))
        if c is phones[0] and conv:  # one document and one voice note, with the real media columns
            ts = conv[min(len(conv), 60) - 1][0]
            msgs.append(WAMessageRecord(jid, False, None, ts + timedelta(minutes=2), None, "3EB0" + r.randbytes(8).hex().upper(),
                                        media_path="Media/" + jid + "/a/b/7f3c2e.pdf", media_type=8,
                                        media_bytes=482_133, media_title="Kira sözleşmesi 2025.pdf"))
            msgs.append(WAMessageRecord(jid, False, None, ts + timedelta(minutes=3), None, "3EB0" + r.randbytes(8).hex().upper(),
                                        media_path="Media/" + jid + "/c/d/9a1b04.opus", media_type=3,
                                        media_bytes=61_420, media_seconds=42))
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
    path = dest / "ChatStorage.sqlite"
    write_whatsapp(path, chats, msgs)
    counts["whatsapp_chats"] = len(chats)
    counts["whatsapp_messages"] = len(msgs)
    return path


def write_demo_mail_store(dest: Path, contacts: list[Contact], seed: int, counts: dict[str, int],
                          bulk: int = 0) -> Path:
    """A small Mail store under ``dest/Mail`` with threads between the demo's e-mail contacts
    (those whose iMessage handle is an address: the AddressBook knows them by it), plus ``bulk``
    messages in reply threads with them (a Mail-heavy home)."""
    from brb_pipeline.demo.mail_writer import write_demo_mail

    people = [(" ".join(x for x in (c.name or ()) if x), c.handle)
              for c in sorted(contacts, key=lambda c: c.name is None) if not c.cc and not c.vanished]
    demo = write_demo_mail(dest / "Mail", people, datetime(2018, 9, 3, 8, tzinfo=UTC), seed, bulk)
    counts.update(demo.counts)
    return dest / "Mail"
