"""Consistent read-only copies of the sources, so every later stage works on a frozen snapshot.

Each SQLite source is copied with SQLite's online backup API from a ``mode=ro`` connection: the
copy is one consistent read transaction and includes content committed to ``-wal`` but not yet
checkpointed (Messages keeps chat.db in WAL mode while it runs). Copies are written into a
temporary folder inside ``dest_dir`` and swapped in with renames, so a failed or locked snapshot
leaves the previous one intact. Nothing is ever written next to a source: the sources are opened
read-only and ``dest_dir`` may not be inside a source folder.

Layout of ``<dest_dir>/snapshot/``::

    chat.db
    AddressBook/AddressBook-v22.abcddb
    AddressBook/Sources/<UUID>/AddressBook-v22.abcddb
    ChatStorage.sqlite              (only when a WhatsApp path was given)
    Mail/V10/MailData/Envelope Index  (only when a Mail folder was given, with the .emlx
                                      bodies its messages need, at their relative paths)
    manifest.json                   (sizes, source fingerprints, seconds, warnings)

Given a :class:`~brb_pipeline.sources.sqlite_ro.FileIO` (an encrypted home), each store is backed
up into an in-memory database whose bytes are written through it (sealed), and so are the Mail
bodies: no plaintext copy touches the disk. The readers then open the copies through the same
``io``. The manifest holds sizes, stat fingerprints, counts and paths, no content: it stays plain.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from brb_pipeline.sources.sqlite_ro import LOCK_TIMEOUT_S
from brb_pipeline.core.errors import NotADatabaseError, SourceError, SourceMissingError, UnknownSchemaError
from brb_pipeline.sources.mail import ENVELOPE_INDEX, copy_bodies, locate_envelope_index
from brb_pipeline.sources.mail import WHAT as MAIL_WHAT
from brb_pipeline.sources.sqlite_ro import FileIO, memory_image, open_readonly, translate_sqlite_error

log = logging.getLogger(__name__)

SNAPSHOT_DIRNAME = "snapshot"
_OLD_DIRNAME = ".snapshot-old"
_TMP_PREFIX = ".snapshot-tmp-"
AB_FILENAME = "AddressBook-v22.abcddb"



class SnapshotLocationError(SourceError, ValueError):
    """The snapshot would be written inside a source folder (sources are never written to)."""


def check_destination(dest_dir: Path, source_dirs: list[Path]) -> None:
    """Refuse a home/snapshot folder inside a source folder, before anything is written.

    Raises:
        SnapshotLocationError.
    """
    dest_dir = Path(dest_dir).expanduser()
    for d in source_dirs:
        d = Path(d).expanduser()
        if d.exists() and _inside(dest_dir, d):
            raise SnapshotLocationError(f"snapshot folder {dest_dir} is inside source folder {d}; choose another --home")

@dataclass
class Snapshot:
    """Where the copies are and what they were copied from.

    Attributes:
        root: the snapshot folder (``<dest_dir>/snapshot``).
        chat_db: copy of chat.db, or None when no chat.db was asked for.
        addressbook_dir: copied AddressBook tree (same relative layout), or None when none.
        addressbook_files: every copied ``AddressBook-v22.abcddb``.
        whatsapp_db: copy of ChatStorage.sqlite, or None unless a path was given.
        sizes: bytes per copied file, keyed by its path relative to ``root``.
        fingerprints: source fingerprints (:func:`source_fingerprint` style) keyed by
            ``"chat_db"``, ``"addressbook"``, ``"whatsapp_db"``.
        seconds: wall time of the whole snapshot, in seconds.
        warnings: one-line, text-free warnings (e.g. AddressBook folder missing).
        counts: ``addressbook_stores``, ``addressbook_missing``, ``addressbook_skipped``.
    """

    root: Path
    chat_db: Path | None
    addressbook_dir: Path | None
    addressbook_files: list[Path]
    whatsapp_db: Path | None
    sizes: dict[str, int]
    fingerprints: dict[str, str]
    seconds: float
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    mail_db: Path | None = None  # copy of Mail's Envelope Index, or None unless a Mail folder was given


def _stat_part(p: Path) -> str:
    try:
        st = p.stat()
    except FileNotFoundError:
        return "-"
    return f"{st.st_size}:{st.st_mtime_ns}"


def source_fingerprint(chat_db: Path) -> str:
    """Cheap change marker of a SQLite source: size and mtime (ns) of the file, -wal and -shm.

    Never opens the database. Returns ``"missing"`` when the file does not exist, so a sensor
    can poll without raising.
    """
    p = Path(chat_db).expanduser()
    if not p.exists():
        return "missing"
    return "|".join(_stat_part(Path(str(p) + suffix)) for suffix in ("", "-wal", "-shm"))


def mail_fingerprint(mail_dir: Path) -> str:
    """:func:`source_fingerprint` of the Envelope Index of a Mail folder (its bodies are written
    with it): ``"missing"`` when the folder holds none, so a sensor can poll without raising."""
    try:
        return source_fingerprint(locate_envelope_index(mail_dir))
    except SourceMissingError:
        return "missing"


def addressbook_stores(addressbook_dir: Path) -> list[Path]:
    """Every ``AddressBook-v22.abcddb`` under the folder: the root one and ``Sources/*/``."""
    d = Path(addressbook_dir)
    found = []
    if (d / AB_FILENAME).is_file():
        found.append(d / AB_FILENAME)
    sources = d / "Sources"
    if sources.is_dir():
        found.extend(sorted(p for p in sources.glob(f"*/{AB_FILENAME}") if p.is_file()))
    return found


def _backup(src: Path, dst: Path, what: str, timeout_s: float, io: FileIO | None) -> int:
    """Copy ``src`` to ``dst`` from a read-only connection in one read transaction; returns bytes.

    Plain: through the backup API into the file. With ``io``: the pages serialized into memory and
    written through ``io``."""
    conn = open_readonly(src, what=what, timeout_s=timeout_s)
    try:
        if io is None:
            out = sqlite3.connect(dst)
            try:
                conn.backup(out)  # all pages in one step: one consistent read transaction
                # A WAL-mode source yields a WAL-mode header; make the copy one self-contained file.
                out.execute("PRAGMA journal_mode=DELETE")
            finally:
                out.close()
        else:
            # serialize reads every page through the pager inside one read transaction (WAL
            # frames included), like the backup, but into one buffer: no in-memory copy first.
            image = memory_image(conn)
            io.write(dst, image)
            del image
    except sqlite3.Error as e:
        raise translate_sqlite_error(e, what, src) from None
    finally:
        conn.close()
    return dst.stat().st_size


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False


def _recover(dest_dir: Path) -> None:
    """Finish or undo a swap interrupted by a crash; drop stale temp folders."""
    final, old = dest_dir / SNAPSHOT_DIRNAME, dest_dir / _OLD_DIRNAME
    if old.exists():
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(old, final)
    for stale in dest_dir.glob(_TMP_PREFIX + "*"):
        shutil.rmtree(stale, ignore_errors=True)


def take_snapshot(
    dest_dir: Path,
    *,
    chat_db: Path | None,
    addressbook_dir: Path | None,
    whatsapp_db: Path | None,
    timeout_s: float = LOCK_TIMEOUT_S,
    mail_dir: Path | None = None,
    io: FileIO | None = None,
) -> Snapshot:
    """Copy the given sources into ``<dest_dir>/snapshot``, replacing the previous snapshot.

    Only paths that are given are touched: the caller passes ``whatsapp_db=None`` unless the
    user opted in to WhatsApp.

    Args:
        dest_dir: where snapshots live (e.g. ``~/.brb``); must not be inside a source folder.
        chat_db: Apple Messages chat.db; None to skip iMessage.
        addressbook_dir: ``~/Library/Application Support/AddressBook``; None or missing is a
            counted warning (names stay unresolved), not an error.
        whatsapp_db: WhatsApp's ChatStorage.sqlite, or None.
        mail_dir: ``~/Library/Mail`` (or its ``V10`` folder), or None: its Envelope Index is
            copied like the other stores, then the bodies of the copied index's messages.
        timeout_s: how long to wait on a source lock before giving up.
        io: write the copies through this (sealed); None writes plain SQLite files.

    Returns:
        The :class:`Snapshot` (paths point into ``<dest_dir>/snapshot``).

    Raises:
        SourceMissingError (chat.db or a given WhatsApp file missing), NotADatabaseError,
        DatabaseLockedError, SnapshotLocationError (dest_dir inside a source folder).
    """
    t0 = time.perf_counter()
    dest_dir = Path(dest_dir).expanduser()
    mail_index = _check_sources(dest_dir, chat_db, addressbook_dir, whatsapp_db, mail_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    _recover(dest_dir)
    tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=dest_dir))
    try:
        c = _copy_sources(tmp, chat_db, addressbook_dir, whatsapp_db, timeout_s, io)
        if mail_index is not None:
            _copy_mail(mail_index, tmp, timeout_s, c, io)
        manifest = {
            "sizes": c.sizes,
            "fingerprints": c.fingerprints,
            "seconds": round(time.perf_counter() - t0, 3),
            "warnings": c.warnings,
            "counts": c.counts,
            "created_unix": time.time(),
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    final = _swap_in(tmp, dest_dir)
    seconds = time.perf_counter() - t0
    log.info(
        "Snapshot - chat.db %s, %d AddressBook stores, WhatsApp %s in %.2f s",
        "copied" if chat_db is not None else "skipped",
        len(c.addressbook),
        "copied" if whatsapp_db is not None else "off",
        seconds,
    )
    return Snapshot(
        root=final,
        chat_db=final / "chat.db" if chat_db is not None else None,
        addressbook_dir=final / "AddressBook" if c.addressbook else None,
        addressbook_files=[final / r for r in c.addressbook],
        whatsapp_db=final / "ChatStorage.sqlite" if whatsapp_db is not None else None,
        sizes=c.sizes,
        fingerprints=c.fingerprints,
        seconds=seconds,
        warnings=c.warnings,
        counts=c.counts,
        mail_db=final / "Mail" / mail_index.parent.parent.name / ENVELOPE_INDEX if mail_index is not None else None,
    )


def _check_sources(
    dest_dir: Path, chat_db: Path | None, addressbook_dir: Path | None, whatsapp_db: Path | None,
    mail_dir: Path | None = None,
) -> Path | None:
    """Raise before anything is written: a given database file is missing, or ``dest_dir`` lies
    inside a source folder."""
    sources = [p for p in (chat_db, whatsapp_db) if p is not None]
    src_dirs = [Path(p).expanduser().parent for p in sources]
    mail_index = locate_envelope_index(mail_dir) if mail_dir is not None else None
    if mail_dir is not None:
        src_dirs.append(Path(mail_dir).expanduser())
    if addressbook_dir is not None:
        src_dirs.append(Path(addressbook_dir).expanduser())
    for p, what in ((chat_db, "chat.db"), (whatsapp_db, "WhatsApp ChatStorage.sqlite")):
        if p is not None and not Path(p).expanduser().exists():
            raise SourceMissingError(f"{what} not found at {Path(p).expanduser()}: check the path")
    check_destination(dest_dir, src_dirs)
    return mail_index


@dataclass
class _Copied:
    """What a snapshot copy wrote into its temp folder (manifest fields, in manifest order)."""

    sizes: dict[str, int] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(
        default_factory=lambda: {"addressbook_stores": 0, "addressbook_missing": 0, "addressbook_skipped": 0}
    )
    addressbook: list[Path] = field(default_factory=list)  # copied stores, relative to the snapshot


def _copy_sources(
    tmp: Path, chat_db: Path | None, addressbook_dir: Path | None, whatsapp_db: Path | None, timeout_s: float,
    io: FileIO | None,
) -> _Copied:
    """Copy chat.db, the AddressBook stores and WhatsApp (those given) into ``tmp``."""
    c = _Copied()
    if chat_db is not None:
        src = Path(chat_db).expanduser()
        c.fingerprints["chat_db"] = source_fingerprint(src)
        c.sizes["chat.db"] = _backup(src, tmp / "chat.db", "chat.db", timeout_s, io)
    _copy_addressbook(addressbook_dir, tmp, timeout_s, c, io)
    if whatsapp_db is not None:
        src = Path(whatsapp_db).expanduser()
        c.fingerprints["whatsapp_db"] = source_fingerprint(src)
        c.sizes["ChatStorage.sqlite"] = _backup(
            src, tmp / "ChatStorage.sqlite", "WhatsApp ChatStorage.sqlite", timeout_s, io
        )
    return c


def _copy_mail(mail_index: Path, tmp: Path, timeout_s: float, c: _Copied, io: FileIO | None) -> None:
    """Copy Mail's Envelope Index like the other stores, then the bodies its messages need."""
    version = mail_index.parent.parent
    rel = Path("Mail") / version.name / ENVELOPE_INDEX
    c.fingerprints["mail_db"] = source_fingerprint(mail_index)
    (tmp / rel).parent.mkdir(parents=True)
    c.sizes[str(rel)] = _backup(mail_index, tmp / rel, MAIL_WHAT, timeout_s, io)
    c.counts.update(copy_bodies(version, tmp / "Mail" / version.name, timeout_s, io))


def _copy_addressbook(addressbook_dir: Path | None, tmp: Path, timeout_s: float, c: _Copied,
                      io: FileIO | None) -> None:
    """Copy every readable AddressBook store into ``tmp/AddressBook``; a missing folder or an
    unreadable store is a counted warning in ``c``, not an error."""
    stores = []
    ab_root = Path(addressbook_dir).expanduser() if addressbook_dir is not None else None
    if ab_root is None or not ab_root.is_dir():
        c.counts["addressbook_missing"] = 1
        where = "not configured" if ab_root is None else f"not found at {ab_root}"
        c.warnings.append(f"Snapshot - AddressBook folder {where}: contact names stay unresolved")
    else:
        stores = addressbook_stores(ab_root)
        if not stores:
            c.counts["addressbook_missing"] = 1
            c.warnings.append(
                f"Snapshot - no {AB_FILENAME} under {ab_root}: contact names stay unresolved"
            )
    fp = []
    for store in stores:
        rel = Path("AddressBook") / store.relative_to(ab_root)
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        try:
            c.sizes[str(rel)] = _backup(store, tmp / rel, "AddressBook", timeout_s, io)
        except (NotADatabaseError, UnknownSchemaError):
            c.counts["addressbook_skipped"] += 1
            c.warnings.append(f"Snapshot - skipped unreadable AddressBook store {store}")
            (tmp / rel).unlink(missing_ok=True)
            continue
        fp.append(f"{store.relative_to(ab_root)}={source_fingerprint(store)}")
        c.addressbook.append(rel)
    c.counts["addressbook_stores"] = len(c.addressbook)
    if fp:
        c.fingerprints["addressbook"] = ";".join(fp)


def _swap_in(tmp: Path, dest_dir: Path) -> Path:
    """Make the finished ``tmp`` copy the snapshot: the previous one is moved aside, then removed
    (:func:`_recover` finishes the swap if a crash interrupts it). Returns the snapshot folder."""
    final, old = dest_dir / SNAPSHOT_DIRNAME, dest_dir / _OLD_DIRNAME
    if final.exists():
        os.rename(final, old)
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final
