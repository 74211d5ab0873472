"""Write a small Apple Mail store (``V10/MailData/Envelope Index`` plus ``.emlx`` bodies) from the real DDL.

Layout as Mail 16 has it: the index at ``<mail_dir>/V10/MailData/Envelope Index``; each body at
``V10/<ACCOUNT-UUID>/<Mailbox>.mbox/<MAILBOX-UUID>/Data/Messages/<ROWID>.emlx`` as the RFC 822
message's byte length on the first line, the message, then an XML property list. Dates are Unix
seconds. Used by the demo generator and the tests; never run against a user's real store.
"""

from __future__ import annotations

import email.charset
import plistlib
import random
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.utils import format_datetime, formataddr
from pathlib import Path

from brb_pipeline.demo.sqlite_files import write_fresh

SCHEMA_SQL = Path(__file__).parent / "schemas" / "Envelope Index.sql"
OWNER = ("Demo Owner", "owner.demo@icloud.com")
_NS = uuid.UUID("6f1c0de5-0000-4000-8000-00000000b7b0")

Address = tuple[str, str]  # (display name, e-mail address)


@dataclass
class MailRecord:
    """One message as a test or the demo wants it.

    Attributes:
        thread: the ``conversation_id`` (0: none).
        mailbox: mailbox name ("INBOX", "Sent Messages", ...).
        sender: (name, address), or None for a draft.
        to, cc: recipients.
        subject: without prefix; ``reply`` adds "Re: " as ``subject_prefix``.
        ts: tz-aware send time; None writes NULL dates; ``raw_date`` overrides the stored value.
        raw: the RFC 822 bytes (``rfc822``); None writes no body file.
        emlx: "full", "partial" (``.partial.emlx``), "truncated" (the length line promises
            more than is there) or "garbage" (no length line).
        global_id: ``global_message_id``; equal ids are copies of one message. None: own id.
        deleted, list_flag: index columns (``list_id_hash`` set for list mail).
        attachments: ``attachments`` rows.
    """

    thread: int
    mailbox: str
    sender: Address | None
    to: Sequence[Address]
    subject: str
    ts: datetime | None
    raw: bytes | None = None
    reply: bool = False
    cc: Sequence[Address] = ()
    emlx: str = "full"
    global_id: int | None = None
    deleted: bool = False
    list_flag: bool = False
    attachments: int = 0
    raw_date: object = None


def rfc822(sender: Address, to: Sequence[Address], subject: str, ts: datetime, body: str, *,
           html: str | None = None, charset: str = "utf-8", encoding: str | None = None,
           headers: dict[str, str] | None = None, files: Sequence[tuple[str, str, bytes]] = ()) -> bytes:
    """An RFC 822 message: ``body`` as text/plain (or multipart/alternative with ``html``, or
    HTML only when ``body`` is ""), in ``charset``, ``encoding`` "qp"/"base64" (default: the
    charset's own); ``files`` (name, MIME type, bytes) follow as attachment parts in a
    multipart/mixed whose disposition carries ``size=``."""
    def part(text: str, subtype: str) -> MIMEText:
        cs = email.charset.Charset(charset)
        if encoding:
            cs.body_encoding = email.charset.QP if encoding == "qp" else email.charset.BASE64
        return MIMEText(text, subtype, cs)

    if html is not None and body:
        msg: MIMEMultipart | MIMEText = MIMEMultipart("alternative")
        msg.attach(part(body, "plain"))
        msg.attach(part(html, "html"))
    else:
        msg = part(html, "html") if html is not None else part(body, "plain")
    if files:
        mixed = MIMEMultipart("mixed")
        mixed.attach(msg)
        for name, mime, data in files:
            att = MIMEApplication(data, mime.split("/", 1)[1])
            att.replace_header("Content-Type", mime)
            att.add_header("Content-Disposition", "attachment", filename=name, size=str(len(data)))
            mixed.attach(att)
        msg = mixed
    msg["From"] = formataddr(sender)
    msg["To"] = ", ".join(formataddr(a) for a in to)
    msg["Subject"] = subject
    msg["Date"] = format_datetime(ts)
    msg["Message-ID"] = f"<{uuid.uuid5(_NS, sender[1] + subject + ts.isoformat())}@demo.brb>"
    for k, v in (headers or {}).items():
        msg[k] = v
    return msg.as_bytes()


def emlx_bytes(raw: bytes, mode: str = "full") -> bytes:
    """``raw`` in the ``.emlx`` container (see :class:`MailRecord` for ``mode``)."""
    plist = plistlib.dumps({"flags": 8590195713, "date-last-viewed": 0})
    if mode == "garbage":
        return b"not an emlx file\n" + raw[:40]
    if mode == "truncated":
        return f"{len(raw) + 500}\n".encode() + raw[: len(raw) // 2]
    return f"{len(raw)}\n".encode() + raw + plist


def write_mail_store(mail_dir: Path, records: Sequence[MailRecord], *, account: str = "demo") -> Path:
    """Create ``<mail_dir>/V10`` holding ``records``; returns the Envelope Index path.

    Args:
        mail_dir: the folder standing for ``~/Library/Mail``; an existing V10 index is replaced
            (body files already there are left alone: give a fresh folder).
        records: messages in ROWID order (ROWID 1..).
        account: seeds the account UUID.
    """
    v10 = Path(mail_dir) / "V10"
    acct = str(uuid.uuid5(_NS, account)).upper()
    index = v10 / "MailData" / "Envelope Index"
    write_fresh(index, SCHEMA_SQL, lambda conn: _fill(conn, records, acct, v10))
    (Path(mail_dir) / "PersistenceInfo.plist").write_bytes(plistlib.dumps({"LastUsedVersionDirectoryName": "V10"}))
    return index


def _fill(conn: sqlite3.Connection, records: Sequence[MailRecord], acct: str, v10: Path) -> None:
    ids: dict[tuple, int] = {}

    def row_id(table: str, cols: tuple[str, ...], values: tuple) -> int:
        key = (table, *values)
        if key not in ids:
            cur = conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", values)
            ids[key] = int(cur.lastrowid)
        return ids[key]

    for rowid, r in enumerate(records, start=1):
        mbox = row_id("mailboxes", ("url",), (f"imap://{acct}/{r.mailbox.replace(' ', '%20')}",))
        sender = row_id("addresses", ("address", "comment"), (r.sender[1], r.sender[0])) if r.sender else None
        subject = row_id("subjects", ("subject",), (r.subject,))
        if r.thread:
            row_id("conversations", ("conversation_id",), (r.thread,))
        date = r.raw_date if r.raw_date is not None else (int(r.ts.timestamp()) if r.ts else None)
        conn.execute(
            "INSERT INTO messages (ROWID, message_id, global_message_id, sender, subject_prefix, subject, date_sent,"
            " date_received, mailbox, deleted, size, conversation_id, list_id_hash, read) VALUES"
            " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
            (rowid, rowid, r.global_id or 100_000 + rowid, sender, "Re: " if r.reply else None, subject, date,
             date, mbox, int(r.deleted), len(r.raw or b""), r.thread, 7_771_234 if r.list_flag else None),
        )
        for kind, people in ((0, r.to), (1, r.cc)):
            for pos, a in enumerate(people):
                addr = row_id("addresses", ("address", "comment"), (a[1], a[0]))
                conn.execute("INSERT INTO recipients (message, address, type, position) VALUES (?, ?, ?, ?)",
                             (rowid, addr, kind, pos))
        for n in range(r.attachments):
            conn.execute("INSERT INTO attachments (message, attachment_id, name) VALUES (?, ?, ?)",
                         (rowid, f"{n + 2}", f"file{n + 1}.pdf"))
        if r.raw is not None:
            box = str(uuid.uuid5(_NS, acct + r.mailbox)).upper()
            name = f"{rowid}.partial.emlx" if r.emlx == "partial" else f"{rowid}.emlx"
            path = v10 / acct / f"{r.mailbox}.mbox" / box / "Data" / "Messages" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(emlx_bytes(r.raw, r.emlx))


@dataclass
class DemoMail:
    """What :func:`write_demo_mail` put in the store."""

    index: Path
    counts: dict[str, int] = field(default_factory=dict)


#: A phrase only the demo Mail store holds (search tests look for it).
MAIL_ONLY_PHRASE = "Wallowa kayak rental"


def write_demo_mail(mail_dir: Path, people: Sequence[Address], start: datetime, seed: int,
                    bulk: int = 0) -> DemoMail:
    """The demo's Mail store: threads with ``people`` (the demo's e-mail contacts), deterministic.

    Args:
        mail_dir: folder standing for ``~/Library/Mail``.
        people: (name, address) of contacts that the AddressBook knows by e-mail; padded with
            invented ones when fewer than three.
        start: time of the first message (UTC).
        seed: random seed (times between messages).
        bulk: that many more messages in reply threads (:func:`bulk_threads`), for a home that
            is mostly Mail.
    """
    r = random.Random(seed)
    pool = list(people) + [("Alex Rivers", "alex.rivers@example.org"), ("Sam Ortiz", "sam.ortiz@example.org"),
                           ("Kim Lee", "kim.lee@example.org")]
    a, b, c = pool[0], pool[1], pool[2]
    stranger = ("Jordan Vale", "jordan.vale@example.net")
    t = [start + timedelta(hours=6 * i + r.randint(0, 300) / 60) for i in range(14)]
    recs = _demo_threads(a, b, c, stranger, t)
    more = bulk_threads(pool, t[-1] + timedelta(days=1), seed, bulk) if bulk > 0 else []
    index = write_mail_store(mail_dir, recs + more)
    counts = {"mail_messages": len(recs) + len(more), "mail_threads": len({x.thread for x in recs + more if x.thread}),
              "mail_expected_messages": sum(1 for x in recs if x.thread in (1, 2, 3, 6) and x.sender
                                            and not x.deleted and x.global_id is None),
              "mail_bulk_messages": len(more)}
    return DemoMail(index, counts)


_OPENINGS = ("Hi {first},", "Hello {first},", "Dear {first},", "Hey {first}!", "Good morning {first},")
_LINES = (
    "the {thing} for the {event} is sorted, I paid the deposit of {n} euros this morning.",
    "could you send me the {thing} before {day}? The {event} depends on it.",
    "I found an old photo of the {event} while clearing out the {room}; I will scan it for you.",
    "my sister recommends a {thing} place near the {room} of the station, open until {h}.",
    "the {event} moved to {day}; the {thing} stays where it is, reference {code}.",
    "thanks for the {thing}, it arrived on {day} in one piece. The kids loved it.",
    "are we still on for the {event}? I can bring the {thing} and drive from {day} on.",
    "the landlord finally fixed the {room} heater, so the {event} can be at my place.",
    "I read the {thing} you suggested, the chapter about the {event} made me laugh.",
    "my flight lands at {h}:15 on {day}, booking {code}; no need to pick me up.",
)
_THINGS = ("tickets", "recipe", "invoice", "map", "guitar", "tent", "book", "cake", "bike", "camera")
_EVENTS = ("wedding", "hike", "concert", "reunion", "garage sale", "ski week", "birthday", "quiz night")
_ROOMS = ("attic", "basement", "kitchen", "garden", "north side")
_DAYS = ("Monday", "Tuesday", "Thursday", "Friday", "the weekend", "the 14th", "the 21st")
_SUBJECTS = ("Plans", "Quick question", "Photos", "The trip", "Next month", "Paperwork", "News", "Catching up")
# Attribution lines as mail clients write them (English, French, German, Spanish, Turkish, Japanese).
_ATTRIBUTION_FORMS = (
    "On {date}, {name} <{addr}> wrote:",
    "Le {d}.{m}.{y} à {hm}, {name} <{addr}> a écrit :",
    "Am {d}.{m}.{y} um {hm} schrieb {name} <{addr}>:",
    "El {d}/{m}/{y}, a las {hm}, {name} <{addr}> escribió:",
    "{name} <{addr}>, {d}.{m}.{y} {hm} tarihinde şunu yazdı:",
    "{y}年{m}月{d}日 {hm} {name} <{addr}>:",
)


def bulk_threads(people: Sequence[Address], start: datetime, seed: int, n: int, first: int = 100) -> list[MailRecord]:
    """``n`` messages in reply threads of 1 to 6 between the owner and one of ``people``:
    replies hours to days apart, each quoting the one before under an attribution line in one
    of several languages (what a reader must cut, and never the reply with it)."""
    r = random.Random(seed * 7919 + n)
    recs: list[MailRecord] = []
    thread = first
    while len(recs) < n:
        thread += 1
        t = start + timedelta(days=r.uniform(0, 730))  # threads spread over two years, interleaved
        partner, subject = r.choice(list(people)), r.choice(_SUBJECTS) + f" #{thread - first}"
        prev: tuple[Address, datetime, str] | None = None
        for k in range(min(r.randint(1, 6), n - len(recs))):
            mine = k % 2 == 1
            sender, to = (OWNER, partner) if mine else (partner, OWNER)
            t += timedelta(hours=r.uniform(7, 60))
            text = _bulk_text(r, to[0])
            body = text if prev is None else f"{text}\n\n{_attribution(r, *prev)}\n" + "\n".join(
                "> " + x for x in prev[2].splitlines())
            recs.append(MailRecord(thread, "Sent Messages" if mine else "INBOX", sender, [to],
                                   subject, t, rfc822(sender, [to], ("Re: " if k else "") + subject, t, body),
                                   reply=k > 0))
            prev = (sender, t, text)
    return recs


def _bulk_text(r: random.Random, to_name: str) -> str:
    words = {"thing": r.choice(_THINGS), "event": r.choice(_EVENTS), "room": r.choice(_ROOMS),
             "day": r.choice(_DAYS), "n": r.randint(2, 95), "h": r.randint(6, 22),
             "code": f"{r.choice('BKQTZ')}{r.randint(1000, 9999)}"}
    lines = [(x := r.choice(_LINES).format(**words))[0].upper() + x[1:] for _ in range(r.randint(1, 3))]
    first = (to_name or "there").split()[0]
    return r.choice(_OPENINGS).format(first=first) + "\n\n" + " ".join(lines)


def _attribution(r: random.Random, sender: Address, ts: datetime, _text: str) -> str:
    return r.choice(_ATTRIBUTION_FORMS).format(
        date=format_datetime(ts), name=sender[0], addr=sender[1], d=ts.day, m=ts.month, y=ts.year,
        hm=f"{ts:%H:%M}")


MAIL_FILE = "Overstory reading guide.pdf"  # the attachment of the group thread's reply


def _demo_threads(a: Address, b: Address, c: Address, stranger: Address, t: list[datetime]) -> list[MailRecord]:
    """The demo threads: 1 direct with ``a`` (base64, quoted-printable reply with a quote and a
    signature, an HTML reply), 2 direct with ``b`` in ISO-8859-9, 3 a group, 4 a mailing list,
    5 a noreply sender, 6 a stranger, plus a duplicate copy, a draft and a deleted message."""
    me = OWNER
    s1 = "Kayak trip on Saturday"
    first = (f"Hi!\n\nI booked the {MAIL_ONLY_PHRASE} for Saturday morning, two boats from 9 to 1.\n"
             "Can you bring the dry bags and sunscreen?\n\nCheers")
    reply = ("Perfect, I'll bring the dry bags and a thermos of coffee.\nShould we leave at 7:30?\n\n"
             f"On {format_datetime(t[0])}, {a[0]} <{a[1]}> wrote:\n> {first.splitlines()[2]}\n> Can you bring the dry bags?\n\n"
             "-- \nDemo Owner\nSent with love from the demo")
    html = ("<html><body><p>7:30 works, see you at the dock &amp; don't forget the deposit (40&nbsp;€).</p>"
            "<blockquote type=\"cite\">Perfect, I'll bring the dry bags</blockquote></body></html>")
    tr = "Merhaba,\n\nCumartesi akşamı yemeğe gelebilir misin? Görüşürüz, şimdiden teşekkürler.\n\n-- \nSelamlar"
    group_html = "<div>I vote for <b>The Overstory</b>. Meeting at my place on the 12th?</div>"
    news = ("This week in the neighborhood: street fair, farmers market hours and the library book sale.\n"
            "Unsubscribe at any time.")
    recs = [
        MailRecord(1, "INBOX", a, [me], s1, t[0], rfc822(a, [me], s1, t[0], first, encoding="base64")),
        MailRecord(1, "Sent Messages", me, [a], s1, t[1], rfc822(me, [a], "Re: " + s1, t[1], reply, encoding="qp"),
                   reply=True),
        MailRecord(1, "INBOX", a, [me], s1, t[2], rfc822(a, [me], "Re: " + s1, t[2], "", html=html), reply=True),
        MailRecord(2, "INBOX", b, [me], "Cumartesi yemeği", t[3],
                   rfc822(b, [me], "Cumartesi yemeği", t[3], tr, charset="iso-8859-9")),
        MailRecord(2, "Sent Messages", me, [b], "Cumartesi yemeği", t[4],
                   rfc822(me, [b], "Re: Cumartesi yemeği", t[4], "Çok isterim, saat kaçta?"), reply=True),
        MailRecord(3, "Sent Messages", me, [a, b], "Book club: next pick", t[5],
                   rfc822(me, [a, b], "Book club: next pick", t[5], "Ideas for next month's book?"), cc=[c]),
        MailRecord(3, "INBOX", b, [me, a], "Book club: next pick", t[6],
                   rfc822(b, [me, a], "Re: Book club: next pick", t[6], "I vote for The Overstory.",
                          html=group_html, files=[(MAIL_FILE, "application/pdf", b"%PDF-1.4 demo " * 1000)]),
                   cc=[c], reply=True, attachments=1),
        MailRecord(4, "INBOX", ("Neighborhood News", "news@lists.example.org"), [me], "Weekly digest", t[7],
                   rfc822(("Neighborhood News", "news@lists.example.org"), [me], "Weekly digest", t[7], news,
                          headers={"List-Id": "<news.lists.example.org>",
                                   "List-Unsubscribe": "<mailto:leave@lists.example.org>"}), list_flag=True),
        MailRecord(5, "INBOX", ("Shop", "noreply@shop.example.com"), [me], "Your order has shipped", t[8],
                   rfc822(("Shop", "noreply@shop.example.com"), [me], "Your order has shipped", t[8],
                          "Your order 1234 is on its way.", headers={"Auto-Submitted": "auto-generated"})),
        MailRecord(6, "INBOX", stranger, [me], "Found your glove", t[9],
                   rfc822(stranger, [me], "Found your glove", t[9], "I think you left a blue glove at the cafe.")),
        # the same INBOX message filed again (Gmail's All Mail): one global id, one message
        MailRecord(1, "Archive", a, [me], s1, t[0], rfc822(a, [me], s1, t[0], first), global_id=100_001),
        MailRecord(0, "Drafts", None, [a], "unfinished", t[10], None),
        MailRecord(6, "INBOX", stranger, [me], "Found your glove", t[11], None, deleted=True),
    ]
    return recs
