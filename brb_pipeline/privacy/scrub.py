"""Remove forgotten people from the snapshot copies, right after each snapshot is taken.

The snapshot is brb's own copy of the sources (the sources themselves are never written), so a
forgotten person is deleted from it as from any store: their messages (and tapbacks on them),
their handles and chat joins, their attachment rows, their direct chats and forgotten group
chats, and every AddressBook card holding one of their handles; in the Mail copy, the same
by thread (a thread is a chat: direct with one other participant), their addresses, and the
subjects, summaries and bodies only their messages used (see :mod:`.scrub_emlx` for the
``.emlx`` files). With ``secure_delete`` and a ``VACUUM`` so a copy keeps no free page with their
rows. Triggers of the copy are dropped first: chat.db's call functions only the Messages app
registers, and the copy needs none.

A sealed copy (an encrypted home) is opened in memory through the snapshot's ``FileIO``,
scrubbed and vacuumed there, and written back sealed: its plaintext never reaches the disk.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

from brb_pipeline.core.records.handles import normalize_handle
from brb_pipeline.privacy.forgotten import ForgottenRules, forgotten_rules, migrate_legacy
from brb_pipeline.privacy.scrub_emlx import scrub_bodies
from brb_pipeline.config.settings import Settings
from brb_pipeline.sources.imessage_rows import parent_guid
from brb_pipeline.sources.mail import THREAD_SQL, owner_addresses
from brb_pipeline.sources.sqlite_ro import FileIO

log = logging.getLogger("brb")


def scrub_snapshot(s: Settings, snapshot: dict[str, Any], io: FileIO | None = None) -> dict[str, int]:
    """Delete the forgotten people from the snapshot described by ``snapshot`` (the manifest
    of :func:`brb_pipeline.stages.ingest.run_snapshot`); ``io`` reads and writes sealed copies.

    Returns:
        Counts (no names, no text): messages, chats, handles and AddressBook cards removed,
        and (with Mail) ``bodies``: .emlx files deleted or rewritten.
    """
    rules = forgotten_rules(s)
    counts = {"messages": 0, "chats": 0, "handles": 0, "cards": 0}
    if rules is None:
        return counts
    if rules.salt is not None:  # older home: re-key the digests of what this snapshot shows
        seen_h, seen_c = _seen(snapshot, s.default_region, io)
        migrate_legacy(s, rules, seen_h, seen_c)
    if snapshot.get("chat_db"):
        _add(counts, _scrub_chatdb(_Copy(Path(snapshot["chat_db"]), io), rules, s.default_region))
    for ab in snapshot.get("addressbook_files") or []:
        counts["cards"] += _scrub_addressbook(_Copy(Path(ab), io), rules, s.default_region)
    if snapshot.get("whatsapp_db"):
        _add(counts, _scrub_whatsapp(_Copy(Path(snapshot["whatsapp_db"]), io), rules, s.default_region))
    if snapshot.get("mail_db"):
        _add(counts, _scrub_mail(_Copy(Path(snapshot["mail_db"]), io), rules, s.default_region))
    if any(counts.values()):
        log.info("Snapshot - forgotten people removed from the copy: %d messages, %d chats, %d handles, %d cards,"
                 " %d mail bodies", counts["messages"], counts["chats"], counts["handles"], counts["cards"],
                 counts.get("bodies", 0))
    return counts


def _add(counts: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        counts[k] = counts.get(k, 0) + v


def _seen(snapshot: dict[str, Any], region: str, io: FileIO | None) -> tuple[set[str], set[str]]:
    handles: set[str] = set()
    chats: set[str] = set()
    if snapshot.get("chat_db"):
        con = _Copy(Path(snapshot["chat_db"]), io).open()
        try:
            handles |= {normalize_handle(r, region) for (r,) in con.execute("SELECT id FROM handle")} - {None}
            chats |= {f"imessage:{g}" for (g,) in con.execute("SELECT guid FROM chat")}
        finally:
            con.close()
    if snapshot.get("whatsapp_db"):
        con = _Copy(Path(snapshot["whatsapp_db"]), io).open()
        try:
            for (jid,) in con.execute("SELECT ZCONTACTJID FROM ZWACHATSESSION WHERE ZCONTACTJID IS NOT NULL"):
                chats.add(f"whatsapp:{jid}")
                handles.add(normalize_handle(jid, region))
            handles |= {normalize_handle(j, region) for (j,) in con.execute(
                "SELECT ZMEMBERJID FROM ZWAGROUPMEMBER WHERE ZMEMBERJID IS NOT NULL")}
        finally:
            con.close()
    if snapshot.get("mail_db"):
        con = _Copy(Path(snapshot["mail_db"]), io).open()
        try:
            handles |= {normalize_handle(a, region) for (a,) in con.execute("SELECT address FROM addresses")}
            chats |= {f"mail:{t}" for (t,) in con.execute(f"SELECT DISTINCT {THREAD_SQL} FROM messages m")}
        finally:
            con.close()
    return handles - {None}, chats


class _Copy:
    """One SQLite copy of the snapshot: the file itself, or (with ``io``) a sealed image of it."""

    def __init__(self, path: Path, io: FileIO | None) -> None:
        self.path = path
        self.io = io

    def open(self) -> sqlite3.Connection:
        """A connection in autocommit mode with ``secure_delete`` on (in memory for a sealed copy)."""
        con = sqlite3.connect(self.path if self.io is None else ":memory:", isolation_level=None)
        if self.io is not None:
            con.deserialize(self.io.read(self.path))
        con.execute("PRAGMA secure_delete = ON")
        return con

    def finish(self, con: sqlite3.Connection) -> None:
        """Commit, vacuum (no free page keeps a deleted row) and close; a sealed copy is written back."""
        con.execute("COMMIT")
        con.execute("DROP TABLE IF EXISTS temp._gone")
        con.execute("VACUUM")
        if self.io is not None:
            self.io.write(self.path, con.serialize())
        con.close()


def _tables(con: sqlite3.Connection) -> dict[str, set[str]]:
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t: {r[1] for r in con.execute(f'PRAGMA table_info("{t}")')} for t in names}


def _drop_triggers(con: sqlite3.Connection) -> None:
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        con.execute(f'DROP TRIGGER IF EXISTS "{name}"')


def _delete_in(con: sqlite3.Connection, table: str, column: str, ids: set[int] | set[str]) -> int:
    if not ids:
        return 0
    con.execute("CREATE TEMP TABLE IF NOT EXISTS _gone (v)")
    con.execute("DELETE FROM _gone")
    con.executemany("INSERT INTO _gone VALUES (?)", [(v,) for v in ids])
    return con.execute(f'DELETE FROM "{table}" WHERE "{column}" IN (SELECT v FROM _gone)').rowcount


def _scrub_chatdb(copy: _Copy, rules: ForgottenRules, region: str) -> dict[str, int]:
    con = copy.open()
    try:
        cols = _tables(con)
        gone_h = {rid for rid, raw in con.execute("SELECT ROWID, id FROM handle")
                  if rules.is_handle(normalize_handle(raw, region))}
        parts: dict[int, set[int]] = {}
        for chat, hid in con.execute("SELECT chat_id, handle_id FROM chat_handle_join"):
            parts.setdefault(chat, set()).add(hid)
        style = "style" if "style" in cols["chat"] else "NULL"
        gone_c = set()
        for rid, guid, st in con.execute(f"SELECT ROWID, guid, {style} FROM chat"):
            p = parts.get(rid, set())
            direct = st != 43 and len(p) <= 1
            if (direct and p & gone_h) or rules.is_chat(f"imessage:{guid}"):
                gone_c.add(rid)
        if not gone_h and not gone_c:
            con.close()
            return {}
        doomed: set[int] = set()
        if gone_c:
            q = ",".join("?" * len(gone_c))
            doomed |= {m for (m,) in con.execute(f"SELECT message_id FROM chat_message_join WHERE chat_id IN ({q})",
                                                 sorted(gone_c))}
        if gone_h:
            q = ",".join("?" * len(gone_h))
            doomed |= {m for (m,) in con.execute(
                f"SELECT ROWID FROM message WHERE is_from_me = 0 AND handle_id IN ({q})", sorted(gone_h))}
        # tapbacks on their messages quote the message ("Loved “...”"): they go with it
        if "associated_message_guid" in cols["message"] and doomed:
            guids = {g for rid, g in con.execute("SELECT ROWID, guid FROM message") if rid in doomed}
            doomed |= {rid for rid, a in con.execute(
                "SELECT ROWID, associated_message_guid FROM message WHERE associated_message_guid IS NOT NULL")
                if parent_guid(a) in guids}
        _drop_triggers(con)
        con.execute("BEGIN")
        if "message_attachment_join" in cols and "attachment" in cols:
            atts = set()
            for mid, aid in con.execute("SELECT message_id, attachment_id FROM message_attachment_join"):
                if mid in doomed:
                    atts.add(aid)
            _delete_in(con, "message_attachment_join", "message_id", doomed)
            still = {a for (a,) in con.execute("SELECT attachment_id FROM message_attachment_join")}
            _delete_in(con, "attachment", "ROWID", atts - still)
        for t in ("chat_message_join", "chat_recoverable_message_join", "recoverable_message_part"):
            if t in cols:
                _delete_in(con, t, "message_id", doomed)
                _delete_in(con, t, "chat_id", gone_c)
        n_msg = _delete_in(con, "message", "ROWID", doomed)
        for col in ("handle_id", "other_handle"):  # kept messages no longer point at a removed handle
            if col in cols["message"] and gone_h:
                con.execute("CREATE TEMP TABLE IF NOT EXISTS _gone (v)")
                con.execute("DELETE FROM _gone")
                con.executemany("INSERT INTO _gone VALUES (?)", [(v,) for v in gone_h])
                con.execute(f"UPDATE message SET {col} = 0 WHERE {col} IN (SELECT v FROM _gone)")
        _delete_in(con, "chat_handle_join", "handle_id", gone_h)
        _delete_in(con, "chat_handle_join", "chat_id", gone_c)
        n_chat = _delete_in(con, "chat", "ROWID", gone_c)
        n_h = _delete_in(con, "handle", "ROWID", gone_h)
        copy.finish(con)
    except BaseException:
        con.close()
        raise
    return {"messages": n_msg, "chats": n_chat, "handles": n_h}


#: AddressBook columns pointing at the card (``ZABCDRECORD.Z_PK``) a row belongs to.
_OWNER_COLUMNS = ("ZOWNER", "ZCONTACT")


def _scrub_addressbook(copy: _Copy, rules: ForgottenRules, region: str) -> int:
    con = copy.open()
    try:
        cols = _tables(con)
        if "ZABCDRECORD" not in cols:
            con.close()
            return 0
        owners = set()
        for table, col in (("ZABCDPHONENUMBER", "ZFULLNUMBER"), ("ZABCDEMAILADDRESS", "ZADDRESS"),
                           ("ZABCDMESSAGINGADDRESS", "ZADDRESS")):
            if table in cols and {"ZOWNER", col} <= cols[table]:
                owners |= {o for o, v in con.execute(f'SELECT ZOWNER, "{col}" FROM "{table}"')
                           if o is not None and v and rules.is_handle(normalize_handle(v, region))}
        if not owners:
            con.close()
            return 0
        _drop_triggers(con)
        con.execute("BEGIN")
        for table, tcols in cols.items():
            if table == "ZABCDRECORD":
                continue
            for col in tcols:
                if col in _OWNER_COLUMNS or (table.startswith("Z_") and col.endswith("CONTACTS")):
                    _delete_in(con, table, col, owners)
        n = _delete_in(con, "ZABCDRECORD", "Z_PK", owners)
        copy.finish(con)
    except BaseException:
        con.close()
        raise
    return n


def _scrub_whatsapp(copy: _Copy, rules: ForgottenRules, region: str) -> dict[str, int]:
    con = copy.open()
    try:
        cols = _tables(con)
        gone_s, jids = set(), set()
        for pk, jid, kind in con.execute("SELECT Z_PK, ZCONTACTJID, ZSESSIONTYPE FROM ZWACHATSESSION"):
            if jid and ((kind == 0 and rules.is_handle(normalize_handle(jid, region))) or rules.is_chat(f"whatsapp:{jid}")):
                gone_s.add(pk)
                if kind == 0:
                    jids.add(jid)
        members = set()
        for pk, jid in con.execute("SELECT Z_PK, ZMEMBERJID FROM ZWAGROUPMEMBER"):
            if jid and rules.is_handle(normalize_handle(jid, region)):
                members.add(pk)
                jids.add(jid)
        if not gone_s and not members:
            con.close()
            return {}
        doomed = set()
        for pk, sess, gm, me, frm in con.execute(
                "SELECT Z_PK, ZCHATSESSION, ZGROUPMEMBER, ZISFROMME, ZFROMJID FROM ZWAMESSAGE"):
            if sess in gone_s or gm in members or (not me and frm and rules.is_handle(normalize_handle(frm, region))):
                doomed.add(pk)
        _drop_triggers(con)
        con.execute("BEGIN")
        if "ZWAMEDIAITEM" in cols:
            _delete_in(con, "ZWAMEDIAITEM", "ZMESSAGE", doomed)
        n_msg = _delete_in(con, "ZWAMESSAGE", "Z_PK", doomed)
        if "ZWAGROUPINFO" in cols:
            _delete_in(con, "ZWAGROUPINFO", "ZCHATSESSION", gone_s)
        _delete_in(con, "ZWAGROUPMEMBER", "Z_PK", members)
        _delete_in(con, "ZWAGROUPMEMBER", "ZCHATSESSION", gone_s)
        if "ZWAPROFILEPUSHNAME" in cols:
            _delete_in(con, "ZWAPROFILEPUSHNAME", "ZJID", jids)
        n_chat = _delete_in(con, "ZWACHATSESSION", "Z_PK", gone_s)
        copy.finish(con)
    except BaseException:
        con.close()
        raise
    return {"messages": n_msg, "chats": n_chat, "handles": len(members)}


def _scrub_mail(copy: _Copy, rules: ForgottenRules, region: str) -> dict[str, int]:
    """Mail's Envelope Index copy, then the body files beside it (``path.parent.parent``)."""
    con = copy.open()
    try:
        gone_a, gone_t, doomed, touched = _mail_doomed(con, rules, region)
        if not gone_a and not gone_t:
            con.close()
            return {}
        _drop_triggers(con)
        con.execute("BEGIN")
        n_msg = _delete_mail(con, _tables(con), set(gone_a), {int(t) for t in gone_t if t.isdigit()}, doomed)
        copy.finish(con)
    except BaseException:
        con.close()
        raise
    n_bodies = scrub_bodies(copy.path.parent.parent, doomed, touched,
                            lambda a: rules.is_handle(normalize_handle(a, region)), gone_a.values(), copy.io)
    return {"messages": n_msg, "chats": len(gone_t), "handles": len(gone_a), "bodies": n_bodies}


def _mail_doomed(con: sqlite3.Connection, rules: ForgottenRules, region: str
                 ) -> tuple[dict[int, str], set[str], set[int], set[int]]:
    """(their address rows, their threads, messages to delete, messages kept in a thread they
    were part of). As in chat.db: a direct thread (one participant besides the owner) with them
    or a forgotten thread goes whole; elsewhere their messages go, and so do the owner's (and
    drafts) sent only to forgotten people. A Mail thread has no identity beyond its participants:
    one left with a single other person reads as a direct thread with them from then on."""
    raw = dict(con.execute("SELECT ROWID, address FROM addresses").fetchall())
    handle = {rid: normalize_handle(a, region) for rid, a in raw.items()}
    gone_a = {rid: raw[rid] for rid, h in handle.items() if rules.is_handle(h)}
    _, owner = owner_addresses(con, region)
    to: dict[int, set[int]] = {}
    for mid, aid in con.execute("SELECT message, address FROM recipients"):
        to.setdefault(mid, set()).add(aid)
    rows = con.execute(f"SELECT m.ROWID, {THREAD_SQL}, m.sender FROM messages m").fetchall()
    parts: dict[str, set[str]] = {}
    for mid, thread, sender in rows:
        ids = to.get(mid, set()) | ({sender} if sender is not None else set())
        parts.setdefault(thread, set()).update(h for a in ids if (h := handle.get(a)) and h not in owner)
    gone_h = {handle[a] for a in gone_a}
    gone_t = {t for t, p in parts.items() if (len(p) <= 1 and p & gone_h) or rules.is_chat(f"mail:{t}")}
    doomed, touched = set(), set()
    for mid, thread, sender in rows:
        others = {handle.get(a) for a in to.get(mid, set())} - owner - {None}
        mine = sender is None or handle.get(sender) in owner
        if thread in gone_t or sender in gone_a or (mine and others and others <= gone_h):
            doomed.add(mid)
        elif parts[thread] & gone_h:
            touched.add(mid)
    return gone_a, gone_t, doomed, touched


def _delete_mail(con: sqlite3.Connection, cols: dict[str, set[str]], gone_a: set[int], gone_conv: set[int],
                 doomed: set[int]) -> int:
    """Delete the doomed messages, their rows elsewhere, and what only they (or the removed
    addresses) used. Returns messages removed."""
    def refs(table: str, col: str, where: str = "") -> set:
        if table not in cols or col not in cols[table]:
            return set()
        return {v for (v,) in con.execute(f'SELECT "{col}" FROM "{table}" {where}') if v is not None}

    marks = f"WHERE ROWID IN ({','.join(str(int(m)) for m in doomed) or 'NULL'})"
    used = {c: refs("messages", c, marks) for c in ("subject", "summary", "global_message_id", "message_id")}
    for table, col in (("recipients", "message"), ("attachments", "message"), ("labels", "message_id"),
                       ("message_references", "message"), ("message_metadata", "message_id")):
        if col in cols.get(table, ()):
            _delete_in(con, table, col, doomed)
    n_msg = _delete_in(con, "messages", "ROWID", doomed)
    left = {c: refs("messages", c) for c in used}
    gone = {c: used[c] - left[c] for c in used}
    gone["message_id"] -= {0}
    _delete_in(con, "subjects", "ROWID", gone["subject"])
    if "summaries" in cols:
        _delete_in(con, "summaries", "ROWID", gone["summary"])
    if "message_global_data" in cols:
        data = gone["global_message_id"] | gone["message_id"]
        q = f"WHERE ROWID IN ({','.join(str(int(v)) for v in data) or 'NULL'})" \
            f" OR message_id IN ({','.join(str(int(v)) for v in gone['message_id']) or 'NULL'})"
        summaries = refs("message_global_data", "generated_summary", q)
        con.execute(f"DELETE FROM message_global_data {q}")
        if "generated_summaries" in cols:
            _delete_in(con, "generated_summaries", "ROWID", summaries - refs("message_global_data", "generated_summary"))
    if "conversation_id_message_id" in cols:
        _delete_in(con, "conversation_id_message_id", "conversation_id", gone_conv)
        _delete_in(con, "conversation_id_message_id", "message_id", gone["message_id"])
    if "conversations" in cols:
        _delete_in(con, "conversations", "conversation_id", gone_conv)
    _delete_in(con, "recipients", "address", gone_a)
    if "sender_addresses" in cols:
        senders = refs("sender_addresses", "sender", f"WHERE address IN ({','.join(map(str, gone_a)) or 'NULL'})")
        _delete_in(con, "sender_addresses", "address", gone_a)
        if "senders" in cols:
            _delete_in(con, "senders", "ROWID", senders - refs("sender_addresses", "sender"))
    _delete_in(con, "addresses", "ROWID", gone_a)
    return n_msg
