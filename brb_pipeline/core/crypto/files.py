"""Reading and writing the home's files, sealed when the home is encrypted.

Which key (if any) a path takes is asked of the provider installed with
:func:`set_key_provider` (``keys.provider`` installs one that reads the home's ``encryption.json``).
Reads accept both forms: a sealed file is opened with the key, a plain one is read as it is (a
plaintext home, or files made before the home was encrypted). Writes are atomic (a temp file
renamed into place), so a killed process leaves the previous file or the new one, never half.
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from brb_pipeline.core.crypto.sealed import MAGIC, is_sealed, seal_to, subkey, unseal
from brb_pipeline.core.errors import EncryptionKeyError

KeyProvider = Callable[[Path], "bytes | None"]
_provider: KeyProvider | None = None


def set_key_provider(provider: KeyProvider | None) -> None:
    """Install the function that maps a path to its home's data key (the function returns None
    for a plaintext home). Until one is installed, :func:`file_key` raises."""
    global _provider
    _provider = provider


def file_key(path: Path) -> bytes | None:
    """The data key of the encrypted home ``path`` lies in; None outside one.

    Raises:
        EncryptionKeyError: the home is encrypted and its key is missing or wrong.
    """
    if _provider is None:  # a programming error: reading sealed bytes as plaintext would be worse
        raise RuntimeError("no key provider installed: the entry point must call brb_pipeline.keys.install()")
    return _provider(Path(path))


def duckdb_key(path: Path) -> str | None:
    """The ``ENCRYPTION_KEY`` DuckDB gets for a database file at ``path`` (None: plaintext)."""
    key = file_key(path)
    return subkey(key, "duckdb").hex() if key is not None else None


def sealed(path: Path) -> bool:
    """Whether the file at ``path`` is sealed (False for a missing or plain file)."""
    try:
        with open(path, "rb") as f:
            return is_sealed(f.read(len(MAGIC)))
    except OSError:
        return False


def _key_for_sealed(path: Path) -> bytes:
    key = file_key(path)
    if key is None:
        raise EncryptionKeyError(f"{path} is encrypted, but its home has no encryption.json to say which key"
                                 " opens it: restore that file (or the whole home) from where it came")
    return key


def read_bytes(path: Path, *, key: bytes | None = None) -> bytes:
    """The plaintext content of ``path``.

    Args:
        key: the home's key when the caller holds it: for a file deeper under the home than
            :func:`file_key` looks (a snapshot's Mail bodies).
    """
    path = Path(path)
    raw = path.read_bytes()
    return unseal(key or _key_for_sealed(path), raw, what=str(path)) if is_sealed(raw) else raw


Buffer = bytes | bytearray | memoryview


def write_bytes(path: Path, data: Buffer | Sequence[Buffer], *, key: bytes | None = None) -> None:
    """Write ``data`` to ``path`` atomically, sealed when its home is encrypted (or under ``key``,
    as for :func:`read_bytes`).

    ``data`` is one buffer or a sequence of them, written one after the other (a patched header
    before an untouched body, without joining them into a copy). Sealing is done step by step
    into the file, so a large file is never held twice in memory.
    """
    path = Path(path)
    key = key if key is not None else file_key(path)
    parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)
    _atomic_write(path, parts, key)


def _atomic_write(path: Path, parts: Sequence[Buffer], key: bytes | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        if key is not None:
            seal_to(key, parts, f)
        else:
            for part in parts:
                f.write(part)
        f.flush()
        os.fsync(f.fileno())  # the new content is on disk before the rename makes it the file
    tmp.replace(path)


def read_text(path: Path) -> str:
    return read_bytes(path).decode("utf-8")


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def read_json(path: Path) -> Any:
    return json.loads(read_bytes(path))


def write_json(path: Path, value: Any, **dump_kw: Any) -> None:
    write_bytes(path, json.dumps(value, **dump_kw).encode("utf-8"))


def _source(path: Path) -> Path | io.BytesIO:
    """What a Parquet reader should open: the path itself, or the decrypted bytes."""
    return io.BytesIO(read_bytes(path)) if sealed(path) else path


def read_parquet(path: Path, columns: list[str] | None = None) -> Any:
    """A polars frame of the Parquet file at ``path`` (sealed or not)."""
    import polars as pl

    return pl.read_parquet(_source(Path(path)), columns=columns)


def scan_parquet(path: Path) -> Any:
    """A polars lazy frame: a real scan of a plain file, the decrypted frame of a sealed one."""
    import polars as pl

    path = Path(path)
    return pl.read_parquet(_source(path)).lazy() if sealed(path) else pl.scan_parquet(path)


#: The last sealed Parquet file :func:`read_parquet_where` opened: (path, stat key, ParquetFile).
_where_open: tuple[Path, tuple[int, int, int], Any] | None = None
_where_lock = threading.Lock()


def read_parquet_where(path: Path, column: str, value: str) -> Any:
    """The rows of a Parquet file whose string ``column`` equals ``value``, as a polars frame.

    Only the row groups whose statistics can hold ``value`` are decoded, so a file grouped by
    that column (``paths.messages``, one batch per row group) costs one batch's rows per call,
    not the whole file. A sealed file is decrypted once and kept open (its compressed plaintext)
    until a call names another file or the file changes (another inode, size or mtime): a run's
    per-batch stages read the same file once each.
    """
    import polars as pl
    import pyarrow.parquet as pq

    global _where_open
    path = Path(path)
    st = path.stat()
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    with _where_lock:
        if not sealed(path):
            pf = pq.ParquetFile(path)
        elif _where_open is not None and _where_open[0] == path and _where_open[1] == stamp:
            pf = _where_open[2]
        else:
            _where_open = None  # the old plaintext goes before the new one is read
            pf = pq.ParquetFile(io.BytesIO(read_bytes(path)))
            _where_open = (path, stamp, pf)
        meta = pf.metadata
        groups = []
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            stats = next((rg.column(j).statistics for j in range(rg.num_columns)
                          if rg.column(j).path_in_schema == column), None)
            if stats is None or not stats.has_min_max or stats.min <= value <= stats.max:
                groups.append(i)
        table = pf.read_row_groups(groups, use_threads=False) if groups else pf.schema_arrow.empty_table()
    return pl.from_arrow(table).filter(pl.col(column) == value)


def read_arrow(path: Path, columns: list[str] | None = None) -> Any:
    """A pyarrow table of the Parquet file at ``path`` (sealed or not)."""
    import pyarrow.parquet as pq

    return pq.read_table(_source(Path(path)), columns=columns)


def parquet_file(path: Path) -> Any:
    """A ``pyarrow.parquet.ParquetFile`` (row groups streamed from a plain file, read from the
    decrypted bytes of a sealed one): its ``metadata`` and ``iter_batches``."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(_source(Path(path)))


def read_parquet_schema(path: Path) -> Any:
    """The Arrow schema (with its key-value metadata) of the Parquet file at ``path``."""
    import pyarrow.parquet as pq

    return pq.read_schema(_source(Path(path)))


def write_parquet(frame: Any, path: Path, *, compression: str = "zstd", **kw: Any) -> None:
    """Write a polars frame or an Arrow table to ``path`` atomically (sealed in an encrypted home)."""
    path = Path(path)
    table = frame if hasattr(frame, "schema") and hasattr(frame, "column_names") else frame.to_arrow()
    with parquet_writer(path, table.schema, compression=compression, **kw) as write:
        write(table)


@contextmanager
def parquet_writer(path: Path, schema: Any, **writer_kw: Any) -> Iterator[Callable[[Any], None]]:
    """Write a Parquet file table by table (one or more row groups each) through a temp file.

    In an encrypted home the file is built in memory and sealed when the block ends. On an error
    nothing is written and an earlier file at ``path`` stays as it was.

    Yields:
        ``write(table)``: appends an Arrow table of ``schema``.
    """
    import pyarrow.parquet as pq

    path = Path(path)
    key = file_key(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    sink: Any = io.BytesIO() if key is not None else str(tmp)
    writer = pq.ParquetWriter(sink, schema, **writer_kw)
    try:
        yield writer.write_table
        writer.close()
    except BaseException:
        writer.close()
        if key is None:
            tmp.unlink(missing_ok=True)
        raise
    if key is not None:
        _atomic_write(path, [sink.getbuffer()], key)
    else:
        os.replace(tmp, path)
