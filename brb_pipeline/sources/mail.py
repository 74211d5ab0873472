"""Read Apple Mail (``Envelope Index`` plus ``.emlx`` bodies) into the normalized message and chat frames.

**Opt-in only.** Call this reader only when the user enabled Mail (``Settings.mail_enabled``);
the caller enforces that, this module never looks for the store on its own.

Facts used (Mail 16, ``~/Library/Mail/V10/MailData/Envelope Index``):

* ``messages``: ``sender`` -> ``addresses`` (``address``, display name in ``comment``; NULL for
  a draft), ``subject`` -> ``subjects``, ``subject_prefix`` ("Re: " on replies), ``mailbox`` ->
  ``mailboxes.url`` (``imap://<ACCOUNT-UUID>/Sent%20Messages``), ``conversation_id`` the thread,
  ``global_message_id`` the same message across mailboxes (Gmail's All Mail copy), ``deleted``,
  ``list_id_hash``/``unsubscribe_type``/``automated_conversation`` set on list and automated mail.
* ``recipients``: ``message``, ``address`` -> ``addresses``, ``type`` (0 To, 1 Cc).
* ``date_sent``/``date_received`` are whole seconds, Unix or Apple-2001 by magnitude (decided
  once per store).
* Bodies are ``<ROWID>.emlx`` (or ``<ROWID>.partial.emlx``) anywhere under the version folder
  (``V10/<ACCOUNT>/<Mailbox>.mbox/<UUID>/Data/[digits/]Messages/``): found by walking it once.

The owner's addresses are the senders of mail in a Sent mailbox; their messages are
``is_from_me``. One thread is one chat (``chat_id`` ``"mail:<conversation_id>"``): direct with
one other participant, group with more.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import polars as pl

from brb_pipeline.sources.sqlite_ro import LOCK_TIMEOUT_S
from brb_pipeline.core.errors import SourceMissingError
from brb_pipeline.core.records import CHAT_SCHEMA, EXTRA, MESSAGE_SCHEMA, REACTION, ReadResult, read_all
from brb_pipeline.core.records.handles import normalize_handle
from brb_pipeline.sources.mail_body import Body, is_noreply, read_emlx
from brb_pipeline.sources.sqlite_ro import (
    BlockReader,
    FileIO,
    closed_on_error,
    open_readonly,
    stat_warnings,
    table_columns,
    translate_sqlite_error,
)

log = logging.getLogger(__name__)

CHANNEL = "mail"
WHAT = "Mail Envelope Index"
ENVELOPE_INDEX = Path("MailData") / "Envelope Index"  # inside a version folder (V10)
SENT_MAILBOXES = {"sent messages", "sent", "sent items", "sent mail", "gesendet", "envoyés"}
APPLE_EPOCH_S = int(datetime(2001, 1, 1, tzinfo=timezone.utc).timestamp())
MAX_UNIX_S = int(datetime(2100, 1, 1, tzinfo=timezone.utc).timestamp())
FETCH_ROWS = 2_000  # messages per block: each reads its body file

REQUIRED = {
    "messages": {"ROWID", "global_message_id", "sender", "subject_prefix", "subject", "date_sent",
                 "date_received", "mailbox", "deleted", "conversation_id"},
    "mailboxes": {"ROWID", "url"},
    "addresses": {"ROWID", "address", "comment"},
    "subjects": {"ROWID", "subject"},
    "recipients": {"message", "address"},
}
_OPTIONAL_FLAGS = ("list_id_hash", "unsubscribe_type", "automated_conversation")
_EMLX = re.compile(r"^(\d+)(\.partial)?\.emlx$")

# The first copy of each message (by global_message_id) that is neither deleted nor a draft.
_KEPT = """m.deleted = 0 AND m.sender IS NOT NULL AND m.ROWID IN (
    SELECT min(ROWID) FROM messages WHERE deleted = 0 AND sender IS NOT NULL GROUP BY global_message_id)"""
#: A message's thread key in SQL over ``messages m`` (its ``chat_id`` is ``mail:<key>``).
THREAD_SQL = "CASE WHEN coalesce(m.conversation_id, 0) != 0 THEN CAST(m.conversation_id AS TEXT) ELSE 'm' || m.ROWID END"


def locate_envelope_index(mail_dir: Path) -> Path:
    """The ``Envelope Index`` of a Mail folder: ``mail_dir`` itself may be the version folder
    (``.../V10``), else the highest ``V<n>`` folder of ``mail_dir`` that holds one.

    Raises:
        SourceMissingError: no such folder or no Envelope Index in it.
    """
    d = Path(mail_dir).expanduser()
    if (d / ENVELOPE_INDEX).exists():
        return d / ENVELOPE_INDEX
    versions = sorted((int(p.name[1:]), p) for p in d.glob("V*") if p.name[1:].isdigit()) if d.is_dir() else []
    for _, v in reversed(versions):
        if (v / ENVELOPE_INDEX).exists():
            return v / ENVELOPE_INDEX
    raise SourceMissingError(f"{WHAT} not found under {d} (expected V10/{ENVELOPE_INDEX}): check the --mail path")


def body_files(version_dir: Path) -> Iterator[tuple[int, bool, Path]]:
    """Every body file under a version folder: (ROWID, is a ``.partial.emlx``, path)."""
    for root, _dirs, files in os.walk(version_dir):
        for name in files:
            m = _EMLX.match(name)
            if m:
                yield int(m.group(1)), bool(m.group(2)), Path(root) / name


def emlx_files(version_dir: Path) -> dict[int, Path]:
    """ROWID -> body file under a version folder (a full ``.emlx`` wins over a ``.partial.emlx``)."""
    found: dict[int, Path] = {}
    for rowid, partial, path in body_files(version_dir):
        if rowid not in found or not partial:
            found[rowid] = path
    return found


def owner_addresses(conn: sqlite3.Connection, region: str) -> tuple[set[int], set[str]]:
    """The Sent mailboxes (ROWIDs) and the owner's addresses (normalized): the senders of their mail."""
    sent = {pk for pk, url in conn.execute("SELECT ROWID, url FROM mailboxes") if _is_sent(url)}
    marks = ",".join("?" * len(sent))
    rows = conn.execute(
        f"SELECT DISTINCT a.address FROM messages m JOIN addresses a ON a.ROWID = m.sender WHERE m.mailbox IN ({marks})",
        tuple(sent)).fetchall() if sent else []
    return sent, {h for (a,) in rows if (h := normalize_handle(a, region))}


def read_mail(path: Path, **options: Any) -> ReadResult:
    """Read a Mail store into MESSAGE_SCHEMA / CHAT_SCHEMA frames (channel ``"mail"``).

    Only call this when the user opted in to Mail; the caller enforces it.

    Args:
        path: the ``Envelope Index`` file (ideally the snapshot copy); bodies are looked for
            under its version folder (``path.parent.parent``).
        options: as for :class:`MailStream`.

    Returns:
        ReadResult. ``message_id`` is ``"mail:<global_message_id>"``, ``chat_id``
        ``"mail:<conversation_id>"``, ``ts`` UTC microseconds, ``text`` the subject (on a
        thread's original, not on replies) and the body with quotes and signature cut.

    Raises:
        SourceMissingError, NotADatabaseError, DatabaseLockedError, UnknownSchemaError,
        CancelledError.
    """
    with MailStream(path, **options) as stream:
        return read_all(stream)


class MailStream(BlockReader):
    """A Mail store read block by block (see :func:`read_mail`); use as a context manager.

    Args:
        path: the ``Envelope Index``.
        exclude_lists: drop mailing-list and automated mail (List-*/Precedence/Auto-Submitted
            headers, the index's list flags, noreply senders).
        default_region, cancel, progress, chunk_rows, timeout_s: as for the other readers.
    """

    def __init__(self, path: Path, *, exclude_lists: bool = True, chunk_rows: int = FETCH_ROWS,
                 **options: Any) -> None:
        super().__init__(path, chunk_rows=chunk_rows, **options)
        self.exclude_lists = exclude_lists
        self.stats = dict.fromkeys(
            ("messages_read", "drafts_skipped", "deleted_skipped", "duplicate_copies", "list_excluded",
             "bad_timestamp", "empty_skipped", "body_missing", "body_undecodable", "charset_replaced",
             "html_bodies", "quotes_cut", "quotes_kept", "signatures_cut", "attachments", "chats", "groups", "owner_addresses"),
            0,
        )
        self.chats = pl.DataFrame(schema=CHAT_SCHEMA)
        self.owner: set[str] = set()
        self.sent: set[int] = set()
        self.bodies: dict[int, Path] = {}
        self.threads_read: set[str] = set()  # chat_ids with a kept message
        self.unix = True
        self._flags_sql = "0"

    def __enter__(self) -> "MailStream":
        self._conn = open_readonly(self.path, what=WHAT, required=REQUIRED, timeout_s=self.timeout_s,
                                   io=self.io)
        conn = self._conn
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        with closed_on_error(conn, WHAT, self.path):
            have = table_columns(conn, "messages")
            flags = [f"coalesce(m.{c}, 0) > 0" for c in _OPTIONAL_FLAGS if c in have]
            self._flags_sql = "(" + " OR ".join(flags) + ")" if flags else "0"
            self._counts(conn)
            self.chats = self._threads(conn)
        self.bodies = emlx_files(self.path.parent.parent)
        return self

    def _counts(self, conn: sqlite3.Connection) -> None:
        """Sent mailboxes, the owner's addresses, skipped rows, the date epoch, the total."""
        self.sent, self.owner = owner_addresses(conn, self.region)
        st = self.stats
        st["owner_addresses"] = len(self.owner)
        st["deleted_skipped"] = conn.execute("SELECT count(*) FROM messages WHERE deleted != 0").fetchone()[0]
        st["drafts_skipped"] = conn.execute(
            "SELECT count(*) FROM messages WHERE deleted = 0 AND sender IS NULL").fetchone()[0]
        self.total = conn.execute(f"SELECT count(*) FROM messages m WHERE {_KEPT}").fetchone()[0] or 0
        live = conn.execute("SELECT count(*) FROM messages WHERE deleted = 0 AND sender IS NOT NULL").fetchone()[0]
        st["duplicate_copies"] = live - self.total
        top = conn.execute(
            "SELECT max(coalesce(date_sent, date_received)) FROM messages WHERE typeof(coalesce(date_sent, date_received))"
            " IN ('integer', 'real') AND coalesce(date_sent, date_received) < ?", (MAX_UNIX_S,)).fetchone()[0]
        # Apple-2001 seconds of today are ~7.8e8; anything beyond a year from now must be Unix.
        now_apple = datetime.now(timezone.utc).timestamp() - APPLE_EPOCH_S
        self.unix = top is None or top > now_apple + 366 * 86400

    def _threads(self, conn: sqlite3.Connection) -> pl.DataFrame:
        """CHAT_SCHEMA: one row per thread, participants = senders and recipients but the owner."""
        skip_lists = f" AND NOT {self._flags_sql}" if self.exclude_lists else ""
        sql = f"""
            SELECT {THREAD_SQL} AS thread, a.address, a.comment FROM messages m JOIN addresses a ON a.ROWID = m.sender
            WHERE {_KEPT}{skip_lists}
            UNION ALL
            SELECT {THREAD_SQL} AS thread, a.address, a.comment FROM messages m JOIN recipients r ON r.message = m.ROWID
            JOIN addresses a ON a.ROWID = r.address WHERE {_KEPT}{skip_lists}"""
        people: dict[str, dict[str, str | None]] = {}
        for thread, address, comment in conn.execute(sql):
            members = people.setdefault(thread, {})
            h = normalize_handle(address, self.region)
            if h is None or h in self.owner or (self.exclude_lists and is_noreply(h)):
                continue
            if comment and comment.strip():
                members[h] = comment.strip()
            else:
                members.setdefault(h, None)
        rows = []
        for thread, members in sorted(people.items()):
            handles = sorted(members)
            if not handles:  # only the owner or excluded senders: its messages go to the unknown bucket
                continue
            group = len(handles) > 1
            name = None if group else members[handles[0]]
            rows.append((CHANNEL, f"{CHANNEL}:{thread}", "group" if group else "direct", name, handles))
        self.stats["chats"] = len(rows)
        self.stats["groups"] = sum(r[2] == "group" for r in rows)
        return pl.DataFrame(rows, schema=CHAT_SCHEMA, orient="row")

    def blocks(self) -> Iterator[pl.DataFrame]:
        """Yield the kept messages in ROWID order, ``chunk_rows`` index rows at a time.

        Raises:
            CancelledError, DatabaseLockedError (and the other source errors) between blocks.
        """
        sql = f"""
            SELECT m.ROWID, m.global_message_id, {THREAD_SQL}, a.address, s.subject, m.subject_prefix,
                   coalesce(m.date_sent, m.date_received), m.mailbox, {self._flags_sql},
                   (SELECT count(*) FROM attachments t WHERE t.message = m.ROWID)
            FROM messages m LEFT JOIN addresses a ON a.ROWID = m.sender LEFT JOIN subjects s ON s.ROWID = m.subject
            WHERE {_KEPT} ORDER BY m.ROWID"""
        return self._fetch_blocks(
            sql, WHAT, "Mail - read cancelled after {done:,} of {total:,} messages",
            lambda rows: _frame([r for row in rows if (r := self._message(row)) is not None]))

    def _message(self, row: tuple) -> tuple | None:
        """One index row -> a MESSAGE_SCHEMA tuple, or None when it is skipped (counted)."""
        rowid, gid, thread, address, subject, prefix, date, mailbox, listed, n_att = row
        st = self.stats
        sender = normalize_handle(address, self.region) if isinstance(address, str) else None
        if self.exclude_lists and (listed or is_noreply(sender)):
            st["list_excluded"] += 1
            return None
        ts = _ts(date, self.unix)
        if ts is None:
            st["bad_timestamp"] += 1
            return None
        body = self._body(rowid)
        if self.exclude_lists and body.automated:
            st["list_excluded"] += 1
            return None
        if body.broken:  # a truncated or garbage body file: no message to read, counted
            st["body_undecodable"] += 1
            return None
        original = not (prefix or "").strip()
        subject_text = (subject or "").strip() if original else ""
        text = "\n\n".join(t for t in (subject_text, body.text) if t) or None
        if text is None and not n_att and not body.files:
            st["empty_skipped"] += 1
            return None
        for key, hit in (("charset_replaced", body.replaced), ("html_bodies", body.html),
                         ("quotes_cut", body.quote_cut), ("quotes_kept", body.quote_kept),
                         ("signatures_cut", body.signature_cut)):
            st[key] += bool(hit)
        st["attachments"] += int(n_att or 0)
        st["messages_read"] += 1
        mine = mailbox in self.sent or sender in self.owner
        self.threads_read.add(f"{CHANNEL}:{thread}")
        return (CHANNEL, f"{CHANNEL}:{gid}", rowid, f"{CHANNEL}:{thread}", None if mine else sender, mine, ts,
                text, "text" if text else "none", False, False, max(int(n_att or 0), len(body.files)), [],
                _file_extras(body.files))

    def _body(self, rowid: int) -> Body:
        path = self.bodies.get(rowid)
        if path is None:
            self.stats["body_missing"] += 1
            return Body()
        return read_emlx(path, self.io.read if self.io is not None else None)

    def _summary(self) -> tuple[pl.DataFrame, list[str]]:
        """Chats that kept a message (a thread of list mail known only by its headers goes) and
        warnings (logged)."""
        st = self.stats
        chats = self.chats.filter(pl.col("chat_id").is_in(list(self.threads_read)))
        st["chats"], st["groups"] = chats.height, int((chats.get_column("kind") == "group").sum())
        warnings = stat_warnings(st, {
            "bad_timestamp": "Mail - {n} messages without a usable date were skipped",
            "body_undecodable": "Mail - {n} messages were skipped: their body file is truncated or unreadable",
            "body_missing": "Mail - {n} messages have no downloaded body (.emlx)",
            "charset_replaced": "Mail - {n} bodies had bytes invalid in their charset (replaced)",
        })
        if not st["owner_addresses"]:
            warnings.append("Mail - no Sent mailbox found: no message is counted as yours")
        for w in warnings:
            log.warning(w)
        log.info("Mail - %d messages in %d threads (%d list/automated, %d duplicate copies skipped)",
                 st["messages_read"], st["chats"], st["list_excluded"], st["duplicate_copies"])
        return chats, warnings


def _file_extras(files: list) -> list[dict]:
    """EXTRA entries for a body's attachment parts (names and types only; no path: Mail keeps
    the files inside its own store)."""
    return [{"kind": "file", "name": name, "mime": mime, "bytes": size, "path": None, "exists": None,
             "text": None, "ref": None} for name, mime, size in files]


def _is_sent(url: object) -> bool:
    if not isinstance(url, str):
        return False
    last = unquote(urlparse(url).path).rstrip("/").rsplit("/", 1)[-1]
    return last.strip().lower() in SENT_MAILBOXES


def _ts(value: object, unix: bool) -> datetime | None:
    """Seconds (Unix or Apple 2001) -> aware UTC datetime; None when missing or absurd."""
    if not isinstance(value, (int, float)) or value != value:
        return None
    s = float(value) + (0 if unix else APPLE_EPOCH_S)
    if s <= 0 or s > MAX_UNIX_S:
        return None
    return datetime.fromtimestamp(s, timezone.utc)


def _frame(rows: list[tuple]) -> pl.DataFrame:
    schema = dict(MESSAGE_SCHEMA)
    schema["reactions"] = pl.List(REACTION)
    schema["extras"] = pl.List(EXTRA)
    if not rows:
        return pl.DataFrame(schema=MESSAGE_SCHEMA)
    return pl.DataFrame(rows, schema=schema, orient="row").select(list(MESSAGE_SCHEMA.names()))


def copy_bodies(version_dir: Path, dest_version_dir: Path, timeout_s: float = LOCK_TIMEOUT_S,
                io: FileIO | None = None) -> dict[str, int]:
    """Copy the body files of the messages in ``dest_version_dir``'s Envelope Index copy.

    The index is copied first (one consistent read); then exactly the bodies its kept messages
    need are copied from the live ``version_dir``, keeping their relative paths. A body that
    vanished in between is counted, not an error (the message is read without a body). With
    ``io`` (a sealed snapshot) the index copy is read and the bodies are written through it.

    Returns:
        ``mail_bodies`` copied, ``mail_bodies_missing``, ``mail_body_bytes``.
    """
    conn = open_readonly(dest_version_dir / ENVELOPE_INDEX, what=WHAT, required=REQUIRED, timeout_s=timeout_s,
                         io=io)
    try:
        wanted = {r for (r,) in conn.execute(f"SELECT m.ROWID FROM messages m WHERE {_KEPT}")}
    except sqlite3.Error as e:
        raise translate_sqlite_error(e, WHAT, dest_version_dir / ENVELOPE_INDEX) from None
    finally:
        conn.close()
    counts = {"mail_bodies": 0, "mail_bodies_missing": 0, "mail_body_bytes": 0}
    for rowid, src in sorted(emlx_files(version_dir).items()):
        if rowid not in wanted:
            continue
        dst = dest_version_dir / src.relative_to(version_dir)
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            if io is not None:
                io.write(dst, src.read_bytes())
            else:
                shutil.copyfile(src, dst)
        except OSError:
            counts["mail_bodies_missing"] += 1
            continue
        counts["mail_bodies"] += 1
        counts["mail_body_bytes"] += dst.stat().st_size
    return counts
