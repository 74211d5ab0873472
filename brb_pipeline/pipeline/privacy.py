"""Forget a contact, or delete everything: data removed from every place brb keeps it.

Places: brb.db (contacts, batches, clusters, search log), brb.duckdb (rows and both indexes),
staging Parquet (parsed messages, per-batch chunks and embeddings, retired vectors, insights
layouts, label cache), the source snapshot, and the insights map. Dagster's own storage holds no
message text (assets never put it in metadata), but cluster labels are derived from text, so the
caller also wipes the insights assets' event history (see ``runner.wipe_derived_events``).

A forgotten contact stays forgotten: its handles and chats are remembered as salted hashes in
brb.db and filtered out of every later ingestion, so a scheduled run does not bring it back.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from brb_pipeline.core import metadata
from brb_pipeline.core.store.compact import compact_without
from brb_pipeline.core.errors import BrbError
from brb_pipeline.core.store.chunks import partition_path
from brb_pipeline.pipeline import paths
from brb_pipeline.pipeline.embed import drop_retired
from brb_pipeline.settings import Settings

log = logging.getLogger("brb")

FORGOTTEN_DDL = """CREATE TABLE IF NOT EXISTS forgotten (
    kind TEXT NOT NULL,        -- handle | chat | keycheck
    digest TEXT NOT NULL,      -- 'hmac:' + HMAC-SHA256 under the home's forget key (older homes:
                               -- bare salted sha256); the handle itself is not kept
    PRIMARY KEY (kind, digest)
)"""

#: Where the forget key lives when no OS keychain works: ``$BRB_KEY_DIR``, else
#: ``$XDG_CONFIG_HOME/brb``, else ``~/.config/brb`` (never inside the home dir).
KEY_DIR_ENV = "BRB_KEY_DIR"
KEYRING_SERVICE = "brb-pipeline forget key"
_HMAC = "hmac:"
_KEYCHECK = "brb forget key check"
_LEGACY_SALT = ".forget-salt"


class ForgetKeyError(BrbError):
    """The home's forget key is not where it was (keychain locked or key file gone)."""


def _home_id(s: Settings) -> str:
    return hashlib.sha256(str(Path(s.home).expanduser().resolve()).encode()).hexdigest()[:32]


def key_dir() -> Path:
    """The folder of forget key files (see :data:`KEY_DIR_ENV`)."""
    if os.environ.get(KEY_DIR_ENV):
        return Path(os.environ[KEY_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "brb"


def key_file(s: Settings) -> Path:
    """This home's key file: one per home, named by a hash of the home's absolute path."""
    return key_dir() / f"forget-{_home_id(s)}.key"


def _keyring():
    """The keyring module when an OS keychain backend is usable, else None. A key dir set in
    the environment always means files (tests, or a user who wants the key on their own volume)."""
    if os.environ.get(KEY_DIR_ENV):
        return None
    try:
        import keyring
        from keyring.backends import fail

        if isinstance(keyring.get_keyring(), fail.Keyring):
            return None
        return keyring
    except Exception:  # no keyring package or a broken backend: fall back to the key file
        return None


def _read_key(s: Settings) -> bytes | None:
    f = key_file(s)
    if f.exists():
        return bytes.fromhex(f.read_text().strip())
    kr = _keyring()
    if kr is not None:
        try:
            v = kr.get_password(KEYRING_SERVICE, _home_id(s))
        except Exception:
            v = None
        if v:
            return bytes.fromhex(v)
    return None


def _create_key(s: Settings) -> bytes:
    key = os.urandom(32)
    kr = _keyring()
    if kr is not None:
        try:
            kr.set_password(KEYRING_SERVICE, _home_id(s), key.hex())
            if kr.get_password(KEYRING_SERVICE, _home_id(s)) == key.hex():
                return key
        except Exception:
            pass  # e.g. Linux without a Secret Service: the key file below
    f = key_file(s)
    f.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key.hex())
    return key


def shred_key(s: Settings) -> bool:
    """Remove this home's forget key (file and keychain entry). Returns whether one existed."""
    found = False
    f = key_file(s)
    if f.exists():
        size = f.stat().st_size
        with f.open("r+b") as out:  # overwrite first: the file system may keep the old blocks
            out.write(os.urandom(size))
            out.flush()
            os.fsync(out.fileno())
        f.unlink()
        found = True
    kr = _keyring()
    if kr is not None:
        try:
            if kr.get_password(KEYRING_SERVICE, _home_id(s)) is not None:
                kr.delete_password(KEYRING_SERVICE, _home_id(s))
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
    """The home's key, checked against the digest of a fixed string kept in brb.db: a key that
    changed (keychain locked, key file lost) must fail loudly, not let forgotten people back in."""
    key = _read_key(s)
    check = c.execute("SELECT digest FROM forgotten WHERE kind = 'keycheck'").fetchone()
    if key is None:
        if check is not None:
            raise ForgetKeyError(f"the forget key of {s.home} is missing (looked in the OS keychain and {key_file(s)}):"
                                 " restore it, or run `brb delete-all`")
        if not create:
            return None
        key = _create_key(s)
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
        rows = c.execute("SELECT kind, digest FROM forgotten WHERE kind != 'keycheck'").fetchall()
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


def forget_contacts(s: Settings, contact_ids: list[str]) -> dict[str, Any]:
    """Remove everything derived from these contacts; remember them as forgotten.

    Returns:
        Counts of what was removed where (no names, no text).
    """
    report: dict[str, Any] = {"contacts": len(contact_ids)}
    contacts = metadata.read_contacts(s.brb_db)
    mine = contacts.filter(pl.col("contact_id").is_in(contact_ids))
    handles = sorted({h for hs in mine["handles"].to_list() for h in (hs or [])}) if mine.height else []
    batches = sorted(set(mine["batch"].drop_nulls().to_list())) if mine.height else []
    chat_ids: set[str] = set()
    shared: list[str] = []  # group chats they wrote in: their chunks hold the person's lines
    if paths.messages(s).exists():
        m = pl.scan_parquet(paths.messages(s))
        chat_ids = set(m.filter(pl.col("contact_id").is_in(contact_ids)).select("chat_id").unique()
                       .collect()["chat_id"].to_list())
        if handles:
            shared = sorted(set(m.filter(pl.col("sender").is_in(handles) & ~pl.col("contact_id").is_in(contact_ids))
                                .select("contact_id").unique().collect()["contact_id"].to_list()))
    if shared:
        batches = sorted(set(batches) | set(contacts.filter(pl.col("contact_id").is_in(shared))["batch"]
                                            .drop_nulls().to_list()))
    report["shared_chats_cleared"] = len(shared)
    with metadata.connect(s.brb_db) as c:
        c.execute("PRAGMA secure_delete = ON")  # freed pages are zeroed, not left readable
        c.execute(FORGOTTEN_DDL)
        key = _forget_key(s, c, create=True)
        c.executemany("INSERT OR IGNORE INTO forgotten VALUES ('handle', ?)", [(_hmac(key, h),) for h in handles])
        group_chats = [cid[2:] for cid in contact_ids if cid.startswith("g:")]
        c.executemany("INSERT OR IGNORE INTO forgotten VALUES ('chat', ?)", [(_hmac(key, ch),) for ch in group_chats])
        report["brb_db_contacts"] = c.execute(
            f"DELETE FROM contacts WHERE contact_id IN ({','.join('?' * len(contact_ids))})", contact_ids).rowcount
        report["brb_db_participants_removed"] = _drop_participants(c, set(handles))
        # the batches' content changed: make the next run re-chunk them (their rows are gone already)
        c.executemany("UPDATE batches SET embedded_fingerprint = NULL, loaded_fingerprint = NULL WHERE batch = ?",
                      [(b,) for b in batches])
        c.execute("DELETE FROM clusters")
    # staging: parsed and contact-resolved messages (their lines in shared group chats too)
    mine_expr = pl.col("contact_id").is_in(contact_ids) | pl.col("sender").fill_null("").is_in(handles)
    report["staging_messages"] = _filter_parquet(paths.messages(s), ~mine_expr, handles)
    if paths.parsed_messages(s).exists():
        keep = ~pl.col("chat_id").is_in(list(chat_ids))
        if handles:
            keep = keep & ~pl.col("sender").fill_null("").is_in(handles)
        report["staging_parsed"] = _filter_parquet(paths.parsed_messages(s), keep, handles)
        _filter_parquet(paths.parsed_chats(s), ~pl.col("chat_id").is_in(list(chat_ids)), handles)
    # staging: per-batch chunks and embeddings (keep the partition's schema metadata)
    removed_chunk_ids: set[str] = set()
    # Group chats they wrote in lose their chunks until the next ingestion re-chunks them without
    # the person's lines (their messages are filtered out of every later parse).
    doomed = list(contact_ids) + shared
    # every staged partition, not only their current batches: a person who changed batch, or a
    # batch key that no longer exists, may have left their chunks in another file
    for b in sorted(set(batches) | set(paths.staged_batch_files(s))):
        _filter_parquet(paths.chunks(s, b), ~pl.col("contact_id").is_in(doomed))
        removed_chunk_ids |= _filter_partition(partition_path(s.staging_dir, b), doomed)
    report["staging_chunks"] = len(removed_chunk_ids)
    # retired vectors (a cache until the next load) hold chunk text of any batch: drop them all
    report["retired_removed"] = drop_retired(s)
    # DuckDB: a DELETE only marks rows, so the store is rewritten into a fresh file without them
    # (indexes rebuilt there); a staging copy of the store may hold them too
    if s.duckdb_path.exists():
        report["store_rows"] = compact_without(s.duckdb_path, doomed)
    report["store_next_removed"] = _unlink(s.duckdb_path.with_name(s.duckdb_path.name + ".next"))
    # search log entries that routed to them or returned their chunks
    report["search_log"] = _forget_searches(s.brb_db, set(contact_ids), removed_chunk_ids)
    # snapshot: a raw copy of the sources, re-taken (and scrubbed) at the next ingestion
    report["snapshot_removed"] = _rmtree(s.snapshot_dir)
    # insights: layouts, labels and the map carry their text; drop them until the next run
    report["insights_removed"] = _rmtree(s.staging_dir / "insights") + _rmtree(s.insights_dir)
    # any other staged Parquet file naming them (a cache this function does not know by name)
    report["staging_other_files"] = _scrub_other_parquet(s, set(handles) | set(contact_ids))
    _vacuum(s.brb_db)
    _retire_legacy_salt(s)
    return report


def _drop_participants(c, handles: set[str]) -> int:
    """Take forgotten handles out of the contacts that stay (shared group chats); a name made
    from the participants' names is made again from those left. Returns contacts changed."""
    if not handles:
        return 0
    rows = c.execute("SELECT contact_id, handles_json, name_source FROM contacts").fetchall()
    names = {}
    for cid, hs, src in c.execute("SELECT contact_id, handles_json, display_name FROM contacts WHERE kind = 'direct'"):
        for h in json.loads(hs or "[]"):
            names.setdefault(h, src)
    changed = 0
    for cid, hs, src in rows:
        old = json.loads(hs or "[]")
        new = [h for h in old if h not in handles]
        if new == old:
            continue
        changed += 1
        c.execute("UPDATE contacts SET handles_json = ? WHERE contact_id = ?", (json.dumps(new), cid))
        if src == "participants":
            c.execute("UPDATE contacts SET display_name = ? WHERE contact_id = ?",
                      (_participants_name([names.get(h, h) for h in new]), cid))
    return changed


def _participants_name(names: list[str]) -> str:
    """The name core.contacts gives an unnamed group: "A", "A & B", "A, B & C", "A, B & 2 more"."""
    if not names:
        return "Unnamed group"
    if len(names) <= 2:
        return " & ".join(names)
    if len(names) == 3:
        return f"{names[0]}, {names[1]} & {names[2]}"
    return f"{names[0]}, {names[1]} & {len(names) - 2} more"


def _vacuum(db: Path) -> None:
    """Rewrite brb.db without free pages and empty its WAL (deleted rows leave no bytes)."""
    if not db.exists():
        return
    con = sqlite3.connect(db, isolation_level=None, timeout=30)
    try:
        con.execute("PRAGMA secure_delete = ON")
        con.execute("VACUUM")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()


def _retire_legacy_salt(s: Settings) -> None:
    """Remove ``.forget-salt`` once no digest made with it is left (see :func:`migrate_legacy`)."""
    p = s.home / _LEGACY_SALT
    if not p.exists() or not s.brb_db.exists():
        return
    with metadata.connect(s.brb_db) as c:
        c.execute(FORGOTTEN_DDL)
        left = c.execute(f"SELECT count(*) FROM forgotten WHERE kind != 'keycheck' AND digest NOT LIKE '{_HMAC}%'"
                         ).fetchone()[0]
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
    _retire_legacy_salt(s)
    return len(moved)


def delete_all(s: Settings) -> list[str]:
    """Delete everything brb stored under the home dir and shred the home's forget key.

    Returns:
        The paths removed (the key file or keychain entry as ``forget key``).
    """
    removed = []
    if s.home.exists():
        for p in sorted(s.home.iterdir()):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
            removed.append(str(p))
    if shred_key(s):
        removed.append("forget key")
    return removed


def _filter_parquet(path: Path, keep: pl.Expr, handles: list[str] | None = None) -> int:
    """Keep the rows matching ``keep``; take ``handles`` out of reaction and participant lists."""
    if not path.exists():
        return 0
    df = pl.read_parquet(path)
    kept = df.filter(keep)
    dropped = df.height - kept.height
    if handles:
        before = kept
        if "reactions" in kept.columns:
            sender = pl.element().struct.field("sender")
            kept = kept.with_columns(pl.col("reactions").list.eval(
                pl.element().filter(~sender.fill_null("").is_in(handles))))
        if "participants" in kept.columns:
            kept = kept.with_columns(pl.col("participants").list.eval(pl.element().filter(~pl.element().is_in(handles))))
        changed = not kept.equals(before)
    else:
        changed = False
    if dropped or changed:
        paths.atomic_write_parquet(kept, path)
    return dropped


def _scrub_other_parquet(s: Settings, values: set[str]) -> int:
    """Every Parquet file under staging: rows with a string column equal to one of ``values``
    (handles, contact ids) dropped, and those values taken out of string lists. The schema,
    metadata included, is kept. Returns the files rewritten."""
    if not values or not s.staging_dir.exists():
        return 0
    vals = sorted(values)
    n = 0
    for path in sorted(s.staging_dir.rglob("*.parquet")):
        table = pq.read_table(path)
        df = pl.from_arrow(table)
        strings = [c for c, t in df.schema.items() if t == pl.Utf8]
        lists = [c for c, t in df.schema.items() if t == pl.List(pl.Utf8)]
        hit = pl.lit(False)
        for c in strings:
            hit = hit | pl.col(c).is_in(vals).fill_null(False)
        out = df.filter(~hit).with_columns(
            [pl.col(c).list.eval(pl.element().filter(~pl.element().is_in(vals))) for c in lists])
        if out.equals(df):
            continue
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(out.to_arrow().cast(table.schema), tmp)
        tmp.replace(path)
        n += 1
    return n


def _unlink(p: Path) -> int:
    if p.exists():
        p.unlink()
        return 1
    return 0


def _filter_partition(path: Path, contact_ids: list[str]) -> set[str]:
    if not path.exists():
        return set()
    table = pq.read_table(path)
    df = pl.from_arrow(table.select(["chunk_id", "contact_id"]))
    gone = set(df.filter(pl.col("contact_id").is_in(contact_ids))["chunk_id"].to_list())
    if gone:
        import pyarrow as pa
        import pyarrow.compute as pc

        mask = pc.invert(pc.is_in(table.column("contact_id"), value_set=pa.array(contact_ids)))
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(table.filter(mask), tmp)  # the schema (with its metadata) is kept
        tmp.replace(path)
    return gone


def _forget_searches(db: Path, contact_ids: set[str], chunk_ids: set[str]) -> int:
    if not db.exists():
        return 0
    with metadata.connect(db) as c:
        if not c.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_log'").fetchone():
            return 0
        doomed = []
        for rowid, routed, results in c.execute("SELECT id, contact_ids, results FROM search_log"):
            hit_ids = {r[0] for r in json.loads(results or "[]")}
            if contact_ids & set(json.loads(routed or "[]")) or chunk_ids & hit_ids:
                doomed.append((rowid,))
        c.executemany("DELETE FROM search_log WHERE id = ?", doomed)
        return len(doomed)


def _rmtree(p: Path) -> int:
    if p.exists():
        shutil.rmtree(p)
        return 1
    return 0
