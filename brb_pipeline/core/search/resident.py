"""The chunk store held in memory for a search session: every vector, the BM25 postings and the
columns that filters, merging and hits read, loaded once from an open store.

Why. On the full demo corpus (63,570 chunks, 384-d) a session's hybrid search spent ~46 ms in the
HNSW query (``ef_search`` 256), ~38 ms in the BM25 SQL (3.2M postings scanned for the query's
terms) and ~32 ms fetching candidates' rows, where one exact float32 GEMV over every vector takes
~5 ms with recall 1, and BM25 over postings grouped by term takes a few. An encrypted store has no
HNSW index at all (its exact SQL scan is slower still). So a :class:`Resident` answers both lists
with numpy; the one-shot ``brb search "QUERY"`` keeps the SQL path (:mod:`.sql`), which needs
nothing loaded. ``benchmarks/bench_search.py --store`` times the two side by side.

Exactly the SQL's answers: the same BM25 formula, tokenizer and dictionary (the query is tokenized
by the index's own ``tokenize`` macro), the same cosine, the same filters applied before any top-n,
and the same order (score, then chunk id). Memory: ``4 * dim`` bytes per chunk for the vectors,
the texts (about 1 KB per chunk) and 4 bytes per indexed token occurrence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import duckdb
import numpy as np
import pyarrow as pa

from brb_pipeline.core.search.sql import Filters, store_state
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.store import line_index
from brb_pipeline.core.store.index import FTS_PARAMS, FTS_SCHEMA, REBUILD_HINT

_K1, _B = 1.2, 0.75  # as lexical_sql and DuckDB's match_bm25
_COLUMNS = ("chunk_id", "contact_id", "chat_id", "channel", "position", "conversation")  # as Python values
_TIMES = ("start_ts", "end_ts")  # as microseconds, made datetimes for the rows asked for


def _tokenize_sql(n: int) -> str:
    """One row of ``n`` term lists, for the parameters ``$1 .. $n``, by the index's tokenizer and stemmer."""
    stem = FTS_PARAMS["stemmer"]
    return "SELECT " + ", ".join(f"list_transform({FTS_SCHEMA}.tokenize(${i}), t -> stem(t, '{stem}'))"
                                 for i in range(1, n + 1))


def _micros(col: pa.ChunkedArray) -> np.ndarray:
    """Timestamps as float64 microseconds since the epoch (exact below 2**53), NaN for NULL (a NaN
    compares false, as a NULL does in the SQL filters). Never through Python datetimes: pyarrow
    makes those via pandas, which ``brb search`` keeps unloaded."""
    us = col.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy(zero_copy_only=False)
    return np.where(col.is_null().to_numpy(zero_copy_only=False), np.nan, us.astype(np.float64))


def _codes(values: list) -> tuple[np.ndarray, dict]:
    """Integer codes of a string column (NULL gets -1) and the value -> code map."""
    index: dict = {}
    codes = np.fromiter((-1 if v is None else index.setdefault(v, len(index)) for v in values),
                        dtype=np.int32, count=len(values))
    return codes, index


def _top(scores: np.ndarray, ids: Sequence[str], n: int) -> list[int]:
    """Row indices of the ``n`` best finite scores, best first, ties by chunk id (the SQL order)."""
    finite = np.flatnonzero(np.isfinite(scores))
    if n <= 0 or finite.size == 0:
        return []
    if finite.size > n:
        cut = np.partition(scores[finite], finite.size - n)[finite.size - n]
        finite = finite[scores[finite] >= cut]  # everything tied with the n-th stays for the tie-break
    return sorted(finite.tolist(), key=lambda i: (-scores[i], ids[i]))[:n]


def _unit_rows(col: pa.ChunkedArray) -> np.ndarray:
    """The ``FLOAT[dim]`` column as an ``(n, dim)`` float32 matrix of unit rows."""
    flat = col.combine_chunks().values.to_numpy(zero_copy_only=False)
    vectors = flat.reshape(-1, col.type.list_size).astype(np.float32, copy=False)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), np.float32(1e-12))


def _by_term(termids: np.ndarray, docs: np.ndarray, n_terms: int) -> tuple[np.ndarray, np.ndarray]:
    """Postings grouped by term: ``(ptr, docs)`` with term ``t``'s occurrences at
    ``docs[ptr[t]:ptr[t + 1]]``. Two stable 16-bit passes (numpy radix-sorts 16-bit keys)."""
    order = np.argsort((termids & 0xFFFF).astype(np.uint16), kind="stable")
    if n_terms > 0xFFFF:
        order = order[np.argsort((termids[order] >> 16).astype(np.uint16), kind="stable")]
    ptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(termids, minlength=n_terms), out=ptr[1:])
    return ptr, docs[order]


@dataclass
class Resident:
    """One store's search data in memory; :meth:`load` reads it, the other methods answer a query.
    Rows are in the store's row order; ``ids[i]`` is row ``i``'s chunk id."""

    state: tuple  # :func:`.sql.store_state` of the store it was loaded from (it never changes under it)
    ids: list[str]
    row_of: dict[str, int]
    columns: dict[str, list]  # _COLUMNS -> values per row (the times are start_us/end_us)
    content: pa.Array
    vectors: np.ndarray  # (n, dim) float32, unit rows
    contact_codes: np.ndarray
    contact_index: dict[str, int]
    channel_codes: np.ndarray
    channel_index: dict[str, int]
    start_us: np.ndarray
    end_us: np.ndarray
    dictionary: dict[str, tuple[int, int]]  # term -> (termid, document frequency)
    ptr: np.ndarray
    postings: np.ndarray  # row indices, grouped by term (see _by_term)
    doc_len: np.ndarray  # indexed length per row (float64)
    num_docs: int
    avgdl: float
    line_ptr: np.ndarray | None = None  # row i's message-line vectors are line_vecs[line_ptr[i]:line_ptr[i + 1]]
    line_vecs: np.ndarray | None = None  # (lines, dim) int8, as stored (:mod:`..store.line_index`)

    @classmethod
    def load(cls, con: duckdb.DuckDBPyConnection) -> Resident:
        """Read the chunks (and the BM25 index) of the connection's store.

        Raises:
            StoreError: the store or its index cannot be read (the message names the rebuild).
        """
        try:
            return cls._load(con)
        except duckdb.Error as exc:
            raise StoreError(f"cannot read the search store ({type(exc).__name__}): {REBUILD_HINT}") from None

    @classmethod
    def _load(cls, con: duckdb.DuckDBPyConnection) -> Resident:
        state = store_state(con)
        tbl = con.execute(f"SELECT {', '.join(_COLUMNS + _TIMES)}, content, embedding FROM chunks").fetch_arrow_table()
        columns = {c: tbl.column(c).to_pylist() for c in _COLUMNS}
        ids = columns["chunk_id"]
        row_of = {cid: i for i, cid in enumerate(ids)}
        contact_codes, contact_index = _codes(columns["contact_id"])
        channel_codes, channel_index = _codes(columns["channel"])
        dictionary, ptr, postings, doc_len, num_docs, avgdl = cls._load_bm25(con, row_of, len(ids))
        held = cls(state, ids, row_of, columns, tbl.column("content").combine_chunks(), _unit_rows(tbl.column("embedding")),
                   contact_codes, contact_index, channel_codes, channel_index, _micros(tbl.column("start_ts")),
                   _micros(tbl.column("end_ts")), dictionary, ptr, postings, doc_len, num_docs, avgdl)
        del tbl
        held.line_ptr, held.line_vecs = cls._load_lines(con, row_of, state[3])
        pa.default_memory_pool().release_unused()  # the fetched table's buffers (~100 MB at 64K chunks)
        return held

    @staticmethod
    def _load_lines(con: duckdb.DuckDBPyConnection, row_of: dict[str, int], dim: int | None
                    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The stored line vectors in row order (int8, a quarter of float32's memory), or Nones.
        Copied straight from the fetched column's data buffer: as Python ``bytes`` the 194 MB of a
        64K-chunk store cost ~600 MB of RSS that the allocator kept."""
        if dim is None or not line_index.present(con):
            return None, None
        tbl = con.execute(f"SELECT chunk_id, vectors FROM {line_index.LINE_VECTORS}").fetch_arrow_table()
        ids = tbl.column("chunk_id").to_pylist()
        rows = np.fromiter((row_of.get(cid, -1) for cid in ids), dtype=np.int64, count=len(ids))
        pieces = []  # (first table row, offsets, data) per Arrow chunk of the column; no pyarrow.compute
        first = 0      # (it imports pandas' shim, which a search keeps out: test_search_imports.py)
        for chunk in tbl.column("vectors").chunks:
            wide = chunk.type == pa.large_binary()
            offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int64 if wide else np.int32)
            offsets = offsets[chunk.offset:chunk.offset + len(chunk) + 1].astype(np.int64)
            data = np.frombuffer(chunk.buffers()[2], dtype=np.int8) if chunk.buffers()[2] else np.zeros(0, np.int8)
            pieces.append((first, offsets, data))
            first += len(chunk)
        lengths = np.concatenate([np.diff(o) for _, o, _ in pieces]) if pieces else np.zeros(0, np.int64)
        ok = np.flatnonzero((rows >= 0) & (lengths > 0) & (lengths % dim == 0))  # another length was never written
        counts = np.zeros(len(row_of), dtype=np.int64)
        counts[rows[ok]] = lengths[ok] // dim
        ptr = np.zeros(len(row_of) + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        where = {}  # table row -> (its chunk's data, start, end)
        for start, offsets, data in pieces:
            for k, (a, b) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist())):
                where[start + k] = (data, a, b)
        order = ok[np.argsort(rows[ok], kind="stable")].tolist()  # resident row order
        segments = [where[j][0][where[j][1]:where[j][2]] for j in order]
        flat = np.concatenate(segments) if segments else np.zeros(0, dtype=np.int8)
        return ptr, flat.reshape(-1, dim)

    @staticmethod
    def _load_bm25(con: duckdb.DuckDBPyConnection, row_of: dict[str, int], n: int) -> tuple:
        s = FTS_SCHEMA
        docs = con.execute(f"SELECT docid, name, len FROM {s}.docs").fetch_arrow_table()
        docids = docs.column("docid").to_numpy()
        rows = np.fromiter((row_of.get(name, -1) for name in docs.column("name").to_pylist()), dtype=np.int64,
                           count=docs.num_rows)
        row_at = np.full(int(docids.max(initial=-1)) + 1, -1, dtype=np.int64)
        row_at[docids] = rows
        doc_len = np.zeros(n, dtype=np.float64)
        doc_len[rows[rows >= 0]] = docs.column("len").to_numpy().astype(np.float64)[rows >= 0]
        vocab = con.execute(f"SELECT term, termid, df FROM {s}.dict").fetch_arrow_table()
        termid = vocab.column("termid").to_numpy()
        dictionary = dict(zip(vocab.column("term").to_pylist(), zip(termid.tolist(), vocab.column("df").to_pylist())))
        occ = con.execute(f"SELECT termid, docid FROM {s}.terms").fetch_arrow_table()
        occ_rows = row_at[occ.column("docid").to_numpy()]
        keep = occ_rows >= 0  # a document whose chunk is gone (never, in a published store)
        ptr, postings = _by_term(occ.column("termid").to_numpy()[keep], occ_rows[keep].astype(np.int32),
                                 int(termid.max(initial=-1)) + 1)
        num_docs, avgdl = con.execute(f"SELECT num_docs, avgdl FROM {s}.stats").fetchone()
        return dictionary, ptr, postings, doc_len, int(num_docs), float(avgdl or 0.0)

    def __len__(self) -> int:
        return len(self.ids)

    def mask(self, filters: Filters) -> np.ndarray | None:
        """The rows ``filters.sql()`` keeps (None: no filter)."""
        contact_ids, channel, since, until, chunk_ids = (filters.contact_ids, filters.channel, filters.since,
                                                         filters.until, filters.chunk_ids)
        keep = None
        if chunk_ids is not None:
            keep = np.zeros(len(self.ids), dtype=bool)
            keep[[self.row_of[c] for c in chunk_ids if c in self.row_of]] = True
        if contact_ids is not None:
            codes = [self.contact_index[c] for c in contact_ids if c in self.contact_index]
            keep = np.isin(self.contact_codes, codes)
        if channel is not None:
            keep = _and(keep, self.channel_codes == self.channel_index.get(channel, -2))
        if since is not None:
            keep = _and(keep, self.end_us >= _us(since))
        if until is not None:
            keep = _and(keep, self.start_us < _us(until))
        return keep

    def vector_top(self, vec: np.ndarray, n: int, keep: np.ndarray | None) -> list[tuple[str, float]]:
        """``(chunk_id, cosine similarity)`` of the ``n`` nearest kept rows, best first (exact)."""
        q = np.asarray(vec, dtype=np.float32).reshape(-1)
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        sims = self.vectors @ q
        if keep is not None:
            sims = np.where(keep, sims, -np.inf)
        return [(self.ids[i], float(sims[i])) for i in _top(sims, self.ids, n)]

    @staticmethod
    def tokens(con: duckdb.DuckDBPyConnection, *texts: str) -> list[list[str]]:
        """Each text's index terms, by the index's own tokenizer (one query for all: each costs
        a few ms, mostly compiling the tokenizer's Unicode regex)."""
        row = con.execute(_tokenize_sql(len(texts)), list(texts)).fetchone() if texts else ()
        return [list(terms or []) for terms in row]

    def min_df(self, terms: Sequence[str]) -> int | None:
        """The smallest document frequency among ``terms`` in the index (None: none indexed)."""
        dfs = [self.dictionary[t][1] for t in terms if t in self.dictionary]
        return min(dfs) if dfs else None

    def lexical_top(self, terms: Sequence[str], n: int, keep: np.ndarray | None) -> list[tuple[str, float]]:
        """``(chunk_id, BM25)`` of the ``n`` best kept rows matching any term, best first."""
        return self.lexical_top_coverage(terms, n, keep)[0]

    def lexical_top_coverage(self, terms: Sequence[str], n: int, keep: np.ndarray | None
                             ) -> tuple[list[tuple[str, float]], float]:
        """:meth:`lexical_top`, and the largest share of the terms' idf mass that one of those
        rows matches (``lexical_sql(coverage=True)``'s ``cov``; 0.0 when nothing matched)."""
        if not self.avgdl:
            return [], 0.0  # nothing indexed
        score = np.zeros(len(self.ids), dtype=np.float64)
        cov = np.zeros(len(self.ids), dtype=np.float64)
        total = 0.0
        norm = _K1 * ((1 - _B) + _B * (self.doc_len / self.avgdl))
        for term in dict.fromkeys(terms):
            if term not in self.dictionary:
                continue
            termid, df = self.dictionary[term]
            idf = math.log10(((self.num_docs - df) + 0.5) / (df + 0.5) + 1)  # DuckDB's log() is base 10
            tf = np.bincount(self.postings[self.ptr[termid]:self.ptr[termid + 1]], minlength=len(self.ids))
            rows = np.flatnonzero(tf)
            score[rows] += idf * (tf[rows] * (_K1 + 1)) / (tf[rows] + norm[rows])
            cov[rows] += idf
            total += idf
        matched = score > 0
        if keep is not None:
            matched &= keep
        top = _top(np.where(matched, score, -np.inf), self.ids, n)
        best = max((cov[i] for i in top), default=0.0) / total if total > 0 else 0.0
        return [(self.ids[i], float(score[i])) for i in top], float(best)

    def rows(self, chunk_ids: Sequence[str], columns: Sequence[str]) -> dict[str, tuple]:
        """chunk_id -> the values of ``columns`` (chunk_id first; ``content`` allowed), as
        :func:`.hybrid._fetch` returns them from SQL."""
        out = {}
        for cid in chunk_ids:
            i = self.row_of.get(cid)
            if i is not None:
                out[cid] = tuple(self._value(c, i) for c in columns)
        return out

    def _value(self, column: str, i: int) -> object:
        if column == "content":
            return self.content[i].as_py()
        if column in _TIMES:
            us = (self.start_us if column == "start_ts" else self.end_us)[i]
            return None if math.isnan(us) else _EPOCH + timedelta(microseconds=int(us))
        return self.columns[column][i]

    def embeddings(self, chunk_ids: Sequence[str]) -> np.ndarray:
        return self.vectors[[self.row_of[c] for c in chunk_ids]]

    def line_vectors(self, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """chunk_id -> its message lines' unit vectors (float32); {} when the store has none."""
        if self.line_ptr is None or self.line_vecs is None:
            return {}
        out = {}
        for cid in chunk_ids:
            i = self.row_of.get(cid)
            if i is not None and self.line_ptr[i + 1] > self.line_ptr[i]:
                v = self.line_vecs[self.line_ptr[i]:self.line_ptr[i + 1]].astype(np.float32)
                out[cid] = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), np.float32(1e-12))
        return out


def _and(a: np.ndarray | None, b: np.ndarray) -> np.ndarray:
    return b if a is None else a & b


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _us(ts: datetime) -> float:
    """Microseconds since the epoch, exactly (as :func:`_micros` stores them); naive is UTC."""
    ts = ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts
    return float((ts - _EPOCH) // timedelta(microseconds=1))
