"""Open ``brb.duckdb`` with the vss and fts extensions loaded from PyPI packages, never the network.

The extensions ship as ``duckdb-ext-vss`` / ``duckdb-ext-fts`` / ``duckdb-ext-httpfs`` wheels
that install the binaries under ``site-packages/duckdb_ext/extensions/v<duckdb>/<platform>/``.
They must match the DuckDB version exactly, so all four are pinned together.

Order matters: a database file holding an HNSW index cannot be modified until vss is loaded
("Cannot bind index ... unknown index type 'HNSW'"), so we open an in-memory connection, load
the extensions, and only then ``ATTACH`` the file and ``USE`` it.

In an encrypted home (:func:`brb_pipeline.core.crypto.files.duckdb_key` gives a key) the file is
attached with ``ENCRYPTION_KEY`` (AES-GCM: pages, WAL and, with ``temp_file_encryption``, spill
files). DuckDB writes encrypted files only with ``httpfs`` loaded (its OpenSSL; the built-in
crypto module can only read), so writable connections load it (about 90 ms) and read-only ones
do not. An HNSW index cannot be built inside an encrypted file, so such a store has none and its
vector search is an exact scan (:func:`encrypted`, :mod:`.index`); a read-only connection to
one does not load vss at all (the largest part of opening it).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
from pathlib import Path

import duckdb

from brb_pipeline.core.crypto import files
from brb_pipeline.core.errors import EncryptionKeyError, StoreError

log = logging.getLogger(__name__)

#: Catalog name the store file is attached under.
CATALOG = "brb"

_LOCK_RE = re.compile(r"\(PID (\d+)\)")


def extension_directory() -> Path:
    """Directory holding ``v<version>/<platform>/<name>.duckdb_extension`` from the PyPI packages.

    Raises:
        StoreError: when ``duckdb-ext-vss`` / ``duckdb-ext-fts`` are not installed.
    """
    spec = importlib.util.find_spec("duckdb_ext")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError(
            "DuckDB extensions missing: install duckdb-ext-vss and duckdb-ext-fts matching duckdb "
            + duckdb.__version__
        )
    for loc in spec.submodule_search_locations:
        d = Path(loc) / "extensions"
        if d.is_dir():
            return d
    raise StoreError("DuckDB extension directory not found under the duckdb_ext package")


def _load_httpfs(con: duckdb.DuckDBPyConnection) -> None:
    """Load httpfs, the extension that lets DuckDB write encrypted files (never the network).

    Raises:
        StoreError: the ``duckdb-ext-httpfs`` wheel is missing or its binary does not load.
    """
    ext = extension_directory()
    if not any(ext.glob(f"v{duckdb.__version__}/*/httpfs.duckdb_extension")):
        raise StoreError(f"the encrypted store needs the httpfs extension: install duckdb-ext-httpfs "
                         f"matching duckdb {duckdb.__version__}")
    try:
        con.execute("LOAD httpfs")
    except duckdb.Error as exc:
        raise StoreError(f"cannot load the DuckDB httpfs extension: {str(exc).splitlines()[0]}") from None


def connect(
    path: Path | None, *, read_only: bool = False, memory_limit: str | None = None
) -> duckdb.DuckDBPyConnection:
    """Open the chunk store with vss + fts loaded and HNSW persistence enabled (no vss when
    reading an encrypted store, which has no HNSW index).

    Whatever DuckDB spills goes to ``<path>.tmp`` beside the store (inside the home dir, which
    ``brb delete-all`` empties), never to a ``.tmp`` folder in the working directory.

    Args:
        path: ``brb.duckdb`` file; ``None`` for a throw-away in-memory store (tests, benchmarks).
        read_only: attach the file read-only (several readers may share it; no writer).
        memory_limit: DuckDB ``memory_limit`` such as ``"64MB"`` (buffer-managed memory only:
            an HNSW index does not count); ``None`` or ``""`` keeps DuckDB's default.

    Returns:
        A connection whose default catalog is the store, with ``TimeZone='UTC'`` so timestamps
        come back as UTC datetimes.

    Raises:
        StoreError: the file is locked by another process, is missing (read-only), or is not a
            DuckDB database; or the extensions cannot be loaded.
    """
    config = {
        "extension_directory": str(extension_directory()),
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }
    # no HNSW index in an encrypted store: reading one needs no vss (~280 ms of a one-shot search)
    vss = path is None or not read_only or files.duckdb_key(Path(path)) is None
    con = duckdb.connect(":memory:", config=config)
    try:
        try:
            if vss:
                con.execute("LOAD vss")
            con.execute("LOAD fts")
        except duckdb.Error as exc:
            raise StoreError(
                f"cannot load DuckDB vss/fts extensions for duckdb {duckdb.__version__}: "
                f"{str(exc).splitlines()[0]}"
            ) from None
        if vss:
            con.execute("SET hnsw_enable_experimental_persistence = true")
        con.execute("SET TimeZone = 'UTC'")
        if memory_limit:
            con.execute(f"SET memory_limit = '{_memory_size(memory_limit)}'")
        if path is not None:
            path = Path(path)
            con.execute(f"SET temp_directory = {_literal(str(path) + '.tmp')}")
            if read_only and not path.exists():
                raise StoreError(f"no search store at {path}: run `brb ingest` first")
            if not read_only:
                path.parent.mkdir(parents=True, exist_ok=True)
            attach(con, path, CATALOG, read_only=read_only)
            con.execute(f"USE {CATALOG}")
    except BaseException:
        con.close()
        raise
    return con


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$", re.IGNORECASE)


def _memory_size(text: str) -> str:
    """A DuckDB size literal (``"64MB"``, ``"1.5 GiB"``), checked before it is put into SQL.

    Raises:
        StoreError: anything else.
    """
    m = _SIZE_RE.match(text)
    if not m:
        raise StoreError(f"duckdb memory limit {text!r} is not a size like 64MB or 1GB")
    return f"{m.group(1)}{m.group(2)}"


def _literal(text: str) -> str:
    # SET and ATTACH take no bound parameters; the paths are ours (not user message data).
    return "'" + text.replace("'", "''") + "'"


def attach(con: duckdb.DuckDBPyConnection, path: Path, name: str, *, read_only: bool = False) -> None:
    """``ATTACH`` the database file ``path`` as ``name``, with the key of its home when that home
    is encrypted (loading httpfs for writing, and encrypting DuckDB's spill files).

    Raises:
        EncryptionKeyError: the file is encrypted and the key is missing or wrong, or the home is
            encrypted and the file is not.
        StoreError: the file is locked by another process or is not a DuckDB database.
    """
    path = Path(path)
    key = files.duckdb_key(path)
    opts = ["READ_ONLY"] if read_only else []
    if key is not None:
        if not read_only:
            _load_httpfs(con)
        con.execute("SET temp_file_encryption = true")
        opts.append(f"ENCRYPTION_KEY {_literal(key)}")
    clause = f" ({', '.join(opts)})" if opts else ""
    try:
        con.execute(f"ATTACH {_literal(str(path))} AS {name}{clause}")
    except duckdb.Error as exc:
        raise _attach_error(path, exc) from None


def _attach_error(path: Path, exc: duckdb.Error) -> StoreError:
    """The one-line error for a failed ``ATTACH`` of ``path``."""
    msg = str(exc)
    if "Wrong encryption key" in msg:
        return EncryptionKeyError(f"{path} was encrypted with another key than its home's, or is damaged: restore "
                                  "the home's key, or run `brb reindex` to rebuild it from staging")
    if "AES tag differs" in msg:  # the key opened its header: a block that does not verify is damage
        return StoreError(f"{path} is damaged (a block's AES tag does not verify): run `brb reindex` to rebuild "
                          "it from staging")
    if "without a key" in msg:
        return EncryptionKeyError(f"{path} is encrypted, but its home has no encryption.json to say which key "
                                  "opens it: restore that file (or the whole home) from where it came")
    if "is not encrypted" in msg:
        return EncryptionKeyError(f"{path} is not encrypted but its home is: move it away and run `brb ingest`")
    if isinstance(exc, duckdb.IOException):
        if "Could not set lock" in msg or "Conflicting lock" in msg:
            m = _LOCK_RE.search(msg)
            pid = f"pid {m.group(1)}" if m else "pid ?"
            return StoreError(f"{path.name} is in use by another brb process ({pid}) — wait for it or stop it")
        if "not a valid DuckDB database" in msg or "database file" in msg.lower():
            return StoreError(f"{path} is not a DuckDB database (damaged?): run `brb reindex` to rebuild it "
                              "from staging")
    return StoreError(f"cannot open {path}: {msg.splitlines()[0]}")


def encrypted(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the connection's current store is an encrypted file."""
    row = con.execute("SELECT any_value(encrypted) FROM duckdb_databases() "
                      "WHERE database_name = current_database()").fetchone()
    return bool(row and row[0])


# Store-level facts (embedding model, dim, index parameters) ---------------------------------

META_DDL = "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)"


def table_exists(con: duckdb.DuckDBPyConnection, name: str, catalog: str | None = None) -> bool:
    """True when ``name`` is a table of the ``main`` schema of ``catalog`` (default: the current one)."""
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = coalesce(?, current_database()) "
        "AND schema_name = 'main' AND table_name = ?",
        [catalog, name],
    ).fetchone()
    return bool(row and row[0])


def get_meta(con: duckdb.DuckDBPyConnection, key: str, default: object = None, catalog: str | None = None) -> object:
    """Return the JSON-decoded meta value for ``key`` (``default`` when absent), from ``catalog``'s
    meta table (default: the current catalog's)."""
    if not table_exists(con, "meta", catalog):
        return default
    table = f"{catalog}.main.meta" if catalog else "meta"
    row = con.execute(f"SELECT value FROM {table} WHERE key = ?", [key]).fetchone()
    return json.loads(row[0]) if row else default


def set_meta(con: duckdb.DuckDBPyConnection, key: str, value: object) -> None:
    """Store ``value`` (JSON-encodable) under ``key``; ``None`` deletes the key."""
    con.execute(META_DDL)
    if value is None:
        con.execute("DELETE FROM meta WHERE key = ?", [key])
    else:
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, json.dumps(value)])
