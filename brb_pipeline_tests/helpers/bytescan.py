"""Find strings anywhere under a folder: raw bytes of every file, and every text value of every
SQLite, DuckDB and Parquet file read with its own reader, and every header and decoded MIME part
of every Mail ``.emlx`` file, and the gzip-compressed blocks of an HTML page (the 3-D map).

Raw bytes find what a reader no longer shows (SQLite free pages, WAL frames, DuckDB row groups
whose rows are only marked deleted, logs, JSON); the readers find what compression or encoding
hides from raw bytes (Parquet pages are zstd/snappy, DuckDB text may be FSST-compressed, mail
bodies base64 or quoted-printable, header names RFC 2047 encoded-words). Files are copied
to a temporary folder before they are opened, so scanning never changes what is scanned.

Used by the privacy tests: ``scan(home, needles)`` lists every place a needle was found. A file
of an encrypted home is read as someone holding a copy without the key would: sealed files and
encrypted DuckDB databases give only their raw bytes.
"""

from __future__ import annotations

import base64
import gzip
import re
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SQLITE_MAGIC = b"SQLite format 3\x00"
PARQUET_MAGIC = b"PAR1"


@dataclass(frozen=True)
class Finding:
    """One needle found in one place.

    Attributes:
        path: the file, relative to the scanned root.
        where: ``bytes`` (raw, UTF-8 or UTF-16), or ``sqlite:<table>.<column>``,
            ``duckdb:<schema>.<table>.<column>``, ``parquet:<column>``, ``emlx:header``,
            ``emlx:body`` or ``html:<block id>``.
        needle: what was found.
    """

    path: str
    where: str
    needle: str


def _kind(p: Path) -> str | None:
    if p.name.endswith(".emlx"):
        return "emlx"
    if p.name.endswith(".html"):
        return "html"
    with p.open("rb") as f:
        head = f.read(16)
    if head.startswith(SQLITE_MAGIC):
        return "sqlite"
    if head[8:12] == b"DUCK":
        return "duckdb"
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    return None


def _forms(needle: str) -> list[bytes]:
    """The byte forms a needle can take on disk: UTF-8, UTF-16-LE, and JSON's ASCII escapes
    ("Elif \\u015eahin": Dagster's storage writes non-ASCII names that way)."""
    import json

    forms = [needle.encode("utf-8"), needle.encode("utf-16-le")]
    escaped = json.dumps(needle, ensure_ascii=True)[1:-1].encode("ascii")
    if escaped not in forms:
        forms.append(escaped)
    return forms


def _raw(data: bytes, needles: list[str]) -> set[str]:
    low = data.lower()
    found = set()
    for n in needles:
        for b in _forms(n):
            if b in data or b.lower() in low:
                found.add(n)
    return found


def _text_hits(value: object, needles: list[str]) -> set[str]:
    if isinstance(value, bytes):
        return _raw(value, needles)
    text = str(value).lower()
    return {n for n in needles if any(f.decode("utf-8", "ignore").lower() in text for f in _forms(n)[::2])}


def _scan_sqlite(p: Path, needles: list[str]) -> list[tuple[str, str]]:
    out = []
    con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for t in tables:
            try:
                cur = con.execute(f'SELECT * FROM "{t}"')
            except sqlite3.Error:
                continue  # a virtual table whose module this build lacks; its shadow tables are read
            cols = [d[0] for d in cur.description]
            for row in cur:
                for col, v in zip(cols, row):
                    if v is not None and not isinstance(v, (int, float)):
                        out.extend((f"sqlite:{t}.{col}", n) for n in _text_hits(v, needles))
    finally:
        con.close()
    return sorted(set(out))


def _scan_duckdb(p: Path, needles: list[str]) -> list[tuple[str, str]]:
    from brb_pipeline.core.errors import EncryptionKeyError
    from brb_pipeline.core.store import duck

    out = []
    try:
        con = duck.connect(p, read_only=True)
    except EncryptionKeyError:  # encrypted, and the copy is outside its home: no key, as for a thief
        return []
    try:
        cols = con.execute(
            "SELECT schema_name, table_name, column_name FROM duckdb_columns() "
            "WHERE database_name = current_database() AND data_type NOT LIKE 'FLOAT%' "
            "AND data_type NOT IN ('INTEGER', 'BIGINT', 'DOUBLE', 'BOOLEAN', 'TIMESTAMP WITH TIME ZONE')"
        ).fetchall()
        for schema, table, col in cols:
            for n in needles:
                hit = con.execute(
                    f'SELECT count(*) FROM "{schema}"."{table}" WHERE contains(lower(CAST("{col}" AS VARCHAR)), ?)',
                    [n.lower()],
                ).fetchone()[0]
                if hit:
                    out.append((f"duckdb:{schema}.{table}.{col}", n))
    finally:
        con.close()
    return out


def _leaves(arr: pa.Array) -> list[pa.Array]:
    """Every string (or binary) leaf array inside a possibly nested Arrow array."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _leaves(arr.dictionary)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return [arr]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return [arr]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaves(arr.flatten())
    if pa.types.is_struct(t):
        return [leaf for i in range(t.num_fields) for leaf in _leaves(arr.field(i))]
    if pa.types.is_map(t):
        return _leaves(arr.keys) + _leaves(arr.items)
    return []


def _scan_parquet(p: Path, needles: list[str]) -> list[tuple[str, str]]:
    out = []
    table = pq.read_table(p)
    md = table.schema.metadata or {}
    for k, v in md.items():
        out.extend(("parquet:<schema metadata>", n) for n in _raw(k + b"=" + v, needles))
    for name in table.column_names:
        for chunk in table.column(name).chunks:
            for leaf in _leaves(chunk):
                if pa.types.is_binary(leaf.type) or pa.types.is_large_binary(leaf.type):
                    for v in leaf.to_pylist():
                        if v is not None:
                            out.extend((f"parquet:{name}", n) for n in _raw(v, needles))
                    continue
                low = pc.utf8_lower(leaf)
                for n in needles:
                    if pc.any(pc.match_substring(low, n.lower())).as_py():
                        out.append((f"parquet:{name}", n))
    return sorted(set(out))


def _scan_emlx(p: Path, needles: list[str]) -> list[tuple[str, str]]:
    """Every header (encoded-words decoded) and every decoded part of the message in an ``.emlx``
    file (the whole file after its length line, so a truncated one is read as far as it goes)."""
    import email
    import email.policy
    from email.header import decode_header, make_header

    data = p.read_bytes()
    msg = email.message_from_bytes(data.partition(b"\n")[2], policy=email.policy.compat32)
    out = []
    for part in msg.walk():
        for k, v in part.items():
            try:
                value = str(make_header(decode_header(v)))
            except Exception:  # a malformed encoded-word: the raw value
                value = str(v)
            out.extend(("emlx:header", n) for n in _text_hits(f"{k}: {value}", needles))
        payload = part.get_payload(decode=True)
        if isinstance(payload, bytes):
            try:
                text = payload.decode(part.get_content_charset() or "utf-8", "replace")
            except LookupError:
                text = payload.decode("utf-8", "replace")
            out.extend(("emlx:body", n) for n in _text_hits(text, needles) | _raw(payload, needles))
    return sorted(set(out))


_PACKED = re.compile(rb'<script id="([\w-]+)" type="application/octet-stream">([A-Za-z0-9+/=\s]+)</script>')


def _scan_html(p: Path, needles: list[str]) -> list[tuple[str, str]]:
    """The gzip+base64 blocks of a page (the 3-D map carries its points so: raw bytes never show
    their text), unpacked and read as text; a block that does not unpack is read as it is."""
    out = []
    for m in _PACKED.finditer(p.read_bytes()):
        try:
            text = gzip.decompress(base64.b64decode(m.group(2))).decode("utf-8", "replace")
        except (ValueError, OSError, EOFError):
            continue
        out.extend((f"html:{m.group(1).decode()}", n) for n in _text_hits(text, needles))
    return sorted(set(out))


_READERS = {"sqlite": _scan_sqlite, "duckdb": _scan_duckdb, "parquet": _scan_parquet, "emlx": _scan_emlx,
            "html": _scan_html}


def scan(root: Path, needles: list[str]) -> list[Finding]:
    """Every place under ``root`` where one of ``needles`` occurs (case-insensitive).

    Args:
        root: the folder (a brb home).
        needles: strings to look for; each is matched as UTF-8 and UTF-16-LE bytes and as text.

    Returns:
        Findings sorted by path; empty when nothing was found.
    """
    root = Path(root)
    findings: set[Finding] = set()
    if not root.exists():
        return []
    with tempfile.TemporaryDirectory(prefix="bytescan-") as tmp:
        for p in sorted(root.rglob("*")):
            if p.is_symlink() or not p.is_file():
                continue
            rel = str(p.relative_to(root))
            findings.update(Finding(rel, "bytes", n) for n in _raw(p.read_bytes(), needles))
            kind = _kind(p)
            if kind is None or p.name.endswith(("-wal", "-shm", "-journal", ".wal")):
                continue
            # a copy (with its WAL beside it) so opening it never writes into the scanned folder
            work = Path(tmp) / f"{len(list(Path(tmp).iterdir()))}-{p.name}"
            work.mkdir()
            copy = work / p.name
            shutil.copyfile(p, copy)
            for suffix in ("-wal", ".wal"):
                side = p.with_name(p.name + suffix)
                if side.exists():
                    shutil.copyfile(side, copy.with_name(copy.name + suffix))
            for where, n in _READERS[kind](copy, needles):
                findings.add(Finding(rel, where, n))
    return sorted(findings, key=lambda f: (f.path, f.where, f.needle))


def summary(findings: list[Finding]) -> str:
    """One line per (file, place) with the needles found there, for assertion messages."""
    by: dict[tuple[str, str], set[str]] = {}
    for f in findings:
        by.setdefault((f.path, f.where), set()).add(f.needle)
    return "\n".join(f"{p} [{w}]: {sorted(ns)}" for (p, w), ns in sorted(by.items()))
