"""The forgotten list: who :func:`~brb_pipeline.privacy.forget.forget_contacts` removed, kept so
they stay removed.

A forgotten contact's handles and group chats are remembered in brb.db as keyed digests (HMAC
under the home's forget key, kept in the OS keychain or a key file outside the home), never as
the values, and filtered out of every later ingestion, so a scheduled run does not bring them
back. Older homes used bare salted digests; :func:`migrate_legacy` re-keys each one when an
ingestion sees its handle again.
"""

from __future__ import annotations

import hashlib
import json
import hmac
import os
import sqlite3
import uuid
from pathlib import Path

import polars as pl

from brb_pipeline.core import metadata
from brb_pipeline.core.errors import BrbError
from brb_pipeline.keys.keystore import os_keychain, home_path_id, key_dir, shred_file, write_key_file
from brb_pipeline.config.settings import Settings

FORGOTTEN_DDL = """CREATE TABLE IF NOT EXISTS forgotten (
    kind TEXT NOT NULL,        -- handle | chat | keycheck | keyid (the name the forget key is kept under)
    digest TEXT NOT NULL,      -- 'hmac:' + HMAC-SHA256 under the home's forget key (older homes:
                               -- bare salted sha256); the handle itself is not kept
    PRIMARY KEY (kind, digest)
)"""

KEYRING_SERVICE = "brb-pipeline forget key"
_HMAC = "hmac:"
_KEYCHECK = "brb forget key check"
_LEGACY_SALT = ".forget-salt"


class ForgetKeyError(BrbError):
    """The home's forget key is not where it was (keychain locked or key file gone)."""


def key_file(s: Settings, key_id: str | None = None) -> Path:
    """A forget key file: named by the id kept in the home's brb.db (``key_id``), or, for a
    home keyed before that id existed, by a hash of the home's absolute path."""
    return key_dir() / f"forget-{key_id or home_path_id(s.home)}.key"


def _read_key(s: Settings, key_id: str | None) -> bytes | None:
    f = key_file(s, key_id)
    if f.exists():
        return bytes.fromhex(f.read_text().strip())
    kr = os_keychain()
    if kr is not None:
        try:
            v = kr.get_password(KEYRING_SERVICE, key_id or home_path_id(s.home))
        except Exception:
            v = None
        if v:
            return bytes.fromhex(v)
    return None


def _store_key(s: Settings, key_id: str, key: bytes) -> None:
    kr = os_keychain()
    if kr is not None:
        try:
            kr.set_password(KEYRING_SERVICE, key_id, key.hex())
            if kr.get_password(KEYRING_SERVICE, key_id) == key.hex():
                return
        except Exception:
            pass  # e.g. Linux without a Secret Service: the key file below
    write_key_file(key_file(s, key_id), key)


def _stored_key_id(c: sqlite3.Connection) -> str | None:
    row = c.execute("SELECT digest FROM forgotten WHERE kind = 'keyid'").fetchone()
    return row[0] if row else None


def _key_by_id(s: Settings, c: sqlite3.Connection) -> tuple[str | None, bytes | None]:
    """(the key id kept in brb.db, the key found under it). A home keyed by its path (before the
    id) has its key filed again under a new id on first use, so a moved or restored home finds it;
    the path-named copy stays until :func:`shred_key`."""
    key_id = _stored_key_id(c)
    if key_id is not None:
        return key_id, _read_key(s, key_id)
    key = _read_key(s, None)
    if key is None:
        return None, None
    key_id = uuid.uuid4().hex
    _store_key(s, key_id, key)  # first the key under its id, then the id in brb.db
    c.execute("INSERT OR IGNORE INTO forgotten VALUES ('keyid', ?)", (key_id,))
    return key_id, key


def shred_key(s: Settings) -> bool:
    """Remove this home's forget key (file and keychain entry, under its id and under the home's
    path). Call it while brb.db is still there (it names the key). Returns whether one existed."""
    names: list[str | None] = [None]
    if s.brb_db.exists():
        try:
            with metadata.connect(s.brb_db) as c:
                c.execute(FORGOTTEN_DDL)
                names.append(_stored_key_id(c))
        except Exception:  # an unreadable brb.db: the path-named key is still shredded
            pass
    found = False
    kr = os_keychain()
    for key_id in dict.fromkeys(names):
        found = shred_file(key_file(s, key_id)) or found
        if kr is not None:
            try:
                name = key_id or home_path_id(s.home)
                if kr.get_password(KEYRING_SERVICE, name) is not None:
                    kr.delete_password(KEYRING_SERVICE, name)
                    found = True
            except Exception:
                pass
    return found


def _legacy_salt(s: Settings) -> bytes | None:
    p = s.home / _LEGACY_SALT
    return p.read_bytes() if p.exists() else None


def _hmac(key: bytes, value: str) -> str:
    return _HMAC + hmac.new(key, value.encode(), hashlib.sha256).hexdigest()


def _digest(salt: bytes, value: str) -> str:
    """Digest of homes forgotten before the keyed hash (kept readable, never written)."""
    return hashlib.sha256(salt + value.encode()).hexdigest()


def _forget_key(s: Settings, c, *, create: bool) -> bytes | None:
    """The home's key, found by the id kept in brb.db and checked against the digest of a fixed
    string kept there too: a key that changed (keychain locked, key file lost) must fail loudly,
    not let forgotten people back in."""
    key_id, key = _key_by_id(s, c)
    check = c.execute("SELECT digest FROM forgotten WHERE kind = 'keycheck'").fetchone()
    if key is None:
        if check is not None:
            raise ForgetKeyError(f"the forget key of {s.home} is missing (looked in the OS keychain and "
                                 f"{key_file(s, key_id)}): restore it, or run `brb delete-all`")
        if not create:
            return None
        key, key_id = os.urandom(32), key_id or uuid.uuid4().hex
        _store_key(s, key_id, key)
        c.execute("INSERT OR IGNORE INTO forgotten VALUES ('keyid', ?)", (key_id,))
    if check is None:
        c.execute("INSERT OR IGNORE INTO forgotten VALUES ('keycheck', ?)", (_hmac(key, _KEYCHECK),))
    elif check[0] != _hmac(key, _KEYCHECK):
        raise ForgetKeyError(f"the forget key found for {s.home} is not the one it was made with: restore it,"
                             " or run `brb delete-all`")
    return key


class ForgottenRules:
    """The forgotten handles and chats (keyed digests), applied to freshly parsed frames and
    to snapshot copies.

    Args:
        key: the home's forget key (HMAC-SHA256).
        handles: digests of forgotten handles.
        chats: digests of forgotten group chat ids.
        salt: the salt of digests written before the keyed hash, or None.
    """

    def __init__(self, key: bytes | None, handles: set[str], chats: set[str], salt: bytes | None = None) -> None:
        self.key = key
        self.salt = salt
        self.handles = handles
        self.chats = chats
        self._memo: dict[str, tuple[str, ...]] = {}

    def digests(self, value: str) -> tuple[str, ...]:
        """The digests ``value`` may be stored under (keyed; legacy salted when a salt is left)."""
        d = self._memo.get(value)
        if d is None:
            d = tuple(x for x in (_hmac(self.key, value) if self.key else None,
                                  _digest(self.salt, value) if self.salt else None) if x)
            self._memo[value] = d
        return d

    def is_handle(self, value: str | None) -> bool:
        return value is not None and any(d in self.handles for d in self.digests(value))

    def is_chat(self, value: str | None) -> bool:
        return value is not None and any(d in self.chats for d in self.digests(value))

    def _gone(self, expr: pl.Expr, which: str) -> pl.Expr:
        test = self.is_handle if which == "handle" else self.is_chat
        return expr.map_elements(test, return_dtype=pl.Boolean)

    def gone_chats(self, chats: pl.DataFrame) -> set[str]:
        """Chat ids to drop: direct chats with a forgotten participant and forgotten chats."""
        direct_gone = chats.filter(
            (pl.col("kind") == "direct")
            & pl.col("participants").list.eval(self._gone(pl.element(), "handle")).list.any()
        )["chat_id"].to_list()
        group_gone = chats.filter(self._gone(pl.col("chat_id"), "chat"))["chat_id"].to_list()
        return set(direct_gone) | set(group_gone)

    def keep(self, gone_chats: set[str]) -> pl.Expr:
        """Message predicate: not in a gone chat and not sent by a forgotten handle."""
        return ~pl.col("chat_id").is_in(list(gone_chats)) & ~(
            pl.col("sender").is_not_null() & self._gone(pl.col("sender"), "handle").fill_null(False))

    def scrub_chats(self, chats: pl.DataFrame) -> pl.DataFrame:
        """Forgotten handles taken out of the participant lists of the chats that stay."""
        return chats.with_columns(pl.col("participants").list.eval(
            pl.element().filter(~self._gone(pl.element(), "handle"))))

    def scrub_reactions(self, messages: pl.DataFrame) -> pl.DataFrame:
        """Forgotten handles' reactions taken off the messages that stay."""
        if "reactions" not in messages.columns:
            return messages
        sender = pl.element().struct.field("sender")
        return messages.with_columns(pl.col("reactions").list.eval(
            pl.element().filter(~(sender.is_not_null() & self._gone(sender, "handle").fill_null(False)))))


def forgotten_rules(s: Settings) -> ForgottenRules | None:
    """What :func:`forget_contacts` remembered, or None when nobody was forgotten."""
    if not s.brb_db.exists():
        return None
    with metadata.connect(s.brb_db) as c:
        c.execute(FORGOTTEN_DDL)
        rows = c.execute("SELECT kind, digest FROM forgotten WHERE kind NOT IN ('keycheck', 'keyid')").fetchall()
        if not rows:
            return None
        key = _forget_key(s, c, create=False)
    return ForgottenRules(key, {d for k, d in rows if k == "handle"}, {d for k, d in rows if k == "chat"},
                          salt=_legacy_salt(s))


def forgotten_filter(s: Settings, messages: pl.DataFrame, chats: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Drop messages of forgotten contacts (their direct chats, their messages in groups,
    forgotten group chats) from freshly parsed frames. Returns (messages, chats, dropped)."""
    rules = forgotten_rules(s)
    if rules is None:
        return messages, chats, 0
    gone = rules.gone_chats(chats)
    kept = rules.scrub_reactions(messages.filter(rules.keep(gone)))
    return kept, rules.scrub_chats(chats.filter(~pl.col("chat_id").is_in(list(gone)))), messages.height - kept.height


def remember(s: Settings, c: sqlite3.Connection, handles: list[str], chats: list[str]) -> None:
    """Add handles and group chats to the forgotten list on ``c`` (keyed digests, never the values),
    creating the home's forget key on first use."""
    c.execute(FORGOTTEN_DDL)
    key = _forget_key(s, c, create=True)
    c.executemany("INSERT OR IGNORE INTO forgotten VALUES ('handle', ?)", [(_hmac(key, h),) for h in handles])
    c.executemany("INSERT OR IGNORE INTO forgotten VALUES ('chat', ?)", [(_hmac(key, ch),) for ch in chats])


def retire_legacy_salt(s: Settings) -> None:
    """Remove ``.forget-salt`` once no digest made with it is left (see :func:`migrate_legacy`)."""
    p = s.home / _LEGACY_SALT
    if not p.exists() or not s.brb_db.exists():
        return
    with metadata.connect(s.brb_db) as c:
        c.execute(FORGOTTEN_DDL)
        left = c.execute("SELECT count(*) FROM forgotten WHERE kind NOT IN ('keycheck', 'keyid')"
                         f" AND digest NOT LIKE '{_HMAC}%'").fetchone()[0]
    if not left:
        p.unlink()


def migrate_legacy(s: Settings, rules: ForgottenRules, handles: set[str], chats: set[str]) -> int:
    """Rewrite salted digests as keyed ones for the handles and chats seen again (a salted
    digest cannot be re-keyed without its handle: each is migrated when an ingestion sees it).

    Returns:
        Digests migrated.
    """
    if rules.salt is None:
        return 0
    moved = []
    for kind, values, have in (("handle", handles, rules.handles), ("chat", chats, rules.chats)):
        for v in values:
            old = _digest(rules.salt, v)
            if old in have:
                moved.append((kind, old, v))
    if not moved:
        return 0
    with metadata.connect(s.brb_db) as c:
        c.execute("PRAGMA secure_delete = ON")
        key = _forget_key(s, c, create=True)
        for kind, old, v in moved:
            c.execute("INSERT OR IGNORE INTO forgotten VALUES (?, ?)", (kind, _hmac(key, v)))
            c.execute("DELETE FROM forgotten WHERE kind = ? AND digest = ?", (kind, old))
    rules.key = key
    rules._memo.clear()
    for kind, old, v in moved:
        (rules.handles if kind == "handle" else rules.chats).add(_hmac(key, v))
    retire_legacy_salt(s)
    return len(moved)


def backup_forgotten(s: Settings) -> None:
    """Write the forgotten list's keyed digests beside brb.db (``Home.forgotten_copy``, atomically),
    after every forget: a brb.db damaged past reading (a sealed image with one bad byte) must not
    let forgotten people back in."""
    with metadata.connect(s.brb_db) as c:
        c.execute(FORGOTTEN_DDL)
        rows = c.execute("SELECT kind, digest FROM forgotten ORDER BY kind, digest").fetchall()
    path = s.paths.forgotten_copy
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps([list(r) for r in rows]))
    os.replace(tmp, path)


def forgotten_copy(s: Settings) -> list[tuple]:
    try:
        return [tuple(r) for r in json.loads(s.paths.forgotten_copy.read_text())]
    except (OSError, ValueError, TypeError):
        return []
