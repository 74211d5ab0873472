"""HNSW (vss) and BM25 (fts) indexes over the ``chunks`` table, built once after each load.

Both indexes are dropped before a load and rebuilt afterwards (in the staging copy of the store
that ``stages/store.py`` publishes only with both indexes built), never maintained per insert:
an HNSW index built in one pass is faster to build and better connected, and DuckDB's FTS index
is a static snapshot (new rows are invisible to it until it is rebuilt).

An encrypted store has no HNSW index (DuckDB cannot build one inside an encrypted file, and a
plaintext side file would hold the embeddings, which can be partly inverted into text): its
"vector index" is the record :func:`build_hnsw` writes in ``meta`` (``{"exact": true, ...}``),
with the same life as an index (dropped by a load, stale when the rows change), and the search
runs an exact scan of the vectors (:mod:`brb_pipeline.core.search.sql`).

Lexical findability. DuckDB's default FTS ``ignore`` pattern ``(\\.|[^a-z])+`` deletes every
character outside a-z, so digits, Turkish, Arabic, CJK and words glued to emoji disappear. We
keep letters, digits and marks of every script (``[^\\p{L}\\p{N}\\p{M}]+`` is the separator),
lower-case, fold accents (``strip_accents=1``: "görüşürüz" is found by "görüşürüz" *and* by
"gorusuruz", vowelled and unvowelled Arabic match), and do not stem (multilingual text).
What a tokenizer cannot do is added as an extra indexed column, ``lexical_extra``, computed
by :func:`lexical_extra` for documents and queries alike (:func:`fts_query_text`):

* phone numbers, however typed ("+90 532 123 45 67", "0532 123 45 67"), also become their
  digits as typed, their E.164 digits and their national forms, with and without the trunk
  prefix ("905321234567 5321234567 05321234567"), parsed as ``core.handles`` does with the
  default region for numbers without a country code. Never a last-7 or last-10 suffix: those
  match other people's numbers in other countries;
* runs of CJK / kana / Hangul, written without spaces, also become character bigrams;
* emoji, which the separator pattern drops, become word-like tokens: ``🎉`` -> ``emoji1f389``.
  A sequence is one token: skin tones and variation selectors are dropped (👍🏽 is 👍),
  ZWJ sequences, flags and tag sequences keep their parts (👨‍👩‍👧 -> ``emoji1f468x1f469x1f467``),
  so a query with 🎉 finds the chunks with 🎉 (tapback marks in a chunk's lines count too).

Before any of this, chunk texts drop control and in-word zero-width characters
(``core.store.findable.findable_text``; queries go through it too), and long messages are continued
on further lines, never cut, so all of a message is indexed.
"""

from __future__ import annotations

import functools
import logging
import re
import time
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timezone

import duckdb

from brb_pipeline.core import DEFAULT_REGION
from brb_pipeline.core.store.params import IndexParams
from brb_pipeline.core.store.duck import encrypted, get_meta, set_meta, table_exists
from brb_pipeline.core.store.findable import findable_text
from brb_pipeline.core.errors import StoreError

log = logging.getLogger(__name__)

HNSW_INDEX = "chunks_hnsw"
FTS_SCHEMA = "fts_main_chunks"
HNSW_METRICS = {"cosine": "array_cosine_distance", "l2sq": "array_distance", "ip": "array_negative_inner_product"}
#: FTS separator: anything that is not a letter, digit or combining mark of any script.
FTS_IGNORE = r"[^\p{L}\p{N}\p{M}]+"
FTS_PARAMS = {
    "fields": ["content", "lexical_extra"],
    "stemmer": "none",
    "stopwords": "english",
    "ignore": FTS_IGNORE,
    "strip_accents": 1,
    "lower": 1,
}
REBUILD_HINT = "run `brb ingest` (or `brb reindex`) to rebuild it"
EXACT_REASON = "encrypted store: exact vector search"

_PHONE_RE = re.compile(r"\+?\d(?:[ \-.()/]{0,2}\d){6,}")
_NON_DIGIT_RE = re.compile(r"\D")
# Where emoji live (pictographs, dingbats, arrows, misc symbols, regional indicators, ©, ®).
_EMOJI_CLASS = "[\u00a9\u00ae\u203c\u2049\u2122-\u2bff\u3030\u303d\u3297\u3299\U0001f000-\U0001faff]"
_EMOJI_RUN_RE = re.compile(
    "[\U0001f1e6-\U0001f1ff]{2}|"  # a flag: two regional indicators
    + _EMOJI_CLASS + "(?:[\ufe0e\ufe0f\U0001f3fb-\U0001f3ff\U000e0020-\U000e007f\u20e3]|\u200d" + _EMOJI_CLASS + ")*"
)
_EMOJI_DROP = {0xFE0E, 0xFE0F, 0x200D, *range(0x1F3FB, 0x1F400)}  # presentation, joiner, skin tones
# Hiragana, katakana, CJK unified ideographs (+ext A, compat) and Hangul syllables.
_CJK_CLASS = "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]"
_CJK_RE = re.compile(_CJK_CLASS + "{2,}")
#: Cheap pre-filter (valid for Python re and Rust regex/polars): texts that may need extras.
LEXICAL_EXTRA_CANDIDATE = r"\d[ \-.()/]{0,2}\d[ \-.()/]{0,2}\d|" + _CJK_CLASS + "{2}|" + _EMOJI_CLASS


@dataclass
class IndexReport:
    """What one index build did."""

    index: str
    rows: int
    seconds: float
    params: dict = field(default_factory=dict)


def lexical_extra(text: str | None, region: str = DEFAULT_REGION) -> str:
    """Extra tokens that make phone numbers, CJK text and emoji findable (module docstring).

    Args:
        text: a chunk's content or a query.
        region: ISO 3166 region for numbers typed without a country code (the settings'
            ``default_region``); documents and queries must use the same one.

    Returns:
        Space-separated tokens; ``""`` when the text has no phone-like number, CJK run or emoji.
    """
    if not text:
        return ""
    out: list[str] = []
    for m in _PHONE_RE.finditer(text):
        out.extend(_phone_tokens(m.group(0), region))
    for m in _CJK_RE.finditer(text):
        run = m.group(0)
        out.extend(run[i : i + 2] for i in range(len(run) - 1))
    for m in _EMOJI_RUN_RE.finditer(text):
        token = emoji_token(m.group(0))
        if token:
            out.append(token)
    return " ".join(dict.fromkeys(out))


def emoji_token(seq: str) -> str | None:
    """``"emoji1f468x1f469"`` for an emoji sequence (skin tones, VS16 and joiners dropped);
    None when ``seq`` holds no symbol (a lone ``™``-range letterlike such as ℹ is a letter)."""
    cps = []
    for ch in seq:
        cp = ord(ch)
        if cp in _EMOJI_DROP:
            continue
        if not cps and unicodedata.category(ch) not in ("So", "Sm", "Po"):
            return None  # ℹ, Ⓜ and other letter-like characters are already word characters
        cps.append(f"{cp:x}")
    return "emoji" + "x".join(cps) if cps else None


@functools.lru_cache(maxsize=65536)
def _phone_tokens(raw: str, region: str) -> tuple[str, ...]:
    """Digits as typed, and for a number ``core.handles`` can parse its E.164 digits and its
    national number with and without the trunk prefix."""
    digits = _NON_DIGIT_RE.sub("", raw)
    out = [digits]
    from brb_pipeline.core.records.handles import normalize_handle  # phonenumbers only when a number is seen

    e164 = normalize_handle(raw, region)
    if e164 and e164.startswith("+"):
        import phonenumbers

        num = phonenumbers.parse(e164, None)
        national = _NON_DIGIT_RE.sub("", phonenumbers.format_number(num, phonenumbers.PhoneNumberFormat.NATIONAL))
        out += [e164[1:], phonenumbers.national_significant_number(num), national]
    return tuple(dict.fromkeys(out))


def fts_query_text(query: str, region: str = DEFAULT_REGION) -> str:
    """The string handed to ``match_bm25``: the query cleaned like chunk texts, plus its
    :func:`lexical_extra` tokens."""
    query = findable_text(query)
    extra = lexical_extra(query, region)
    return f"{query} {extra}" if extra else query


# Presence -------------------------------------------------------------------------------------


def hnsw_present(con: duckdb.DuckDBPyConnection) -> bool:
    """The HNSW index exists, or (encrypted store) the exact search was recorded by :func:`build_hnsw`."""
    row = con.execute(
        "SELECT count(*) FROM duckdb_indexes() WHERE database_name = current_database() "
        "AND index_name = ?",
        [HNSW_INDEX],
    ).fetchone()
    if row and row[0]:
        return True
    return bool((get_meta(con, "hnsw") or {}).get("exact")) and encrypted(con)


def fts_present(con: duckdb.DuckDBPyConnection) -> bool:
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = ? AND table_name IN ('docs', 'dict', 'terms', 'stats')",
        [FTS_SCHEMA],
    ).fetchone()
    return bool(row and row[0] == 4)


def _fts_schema_exists(con: duckdb.DuckDBPyConnection) -> bool:
    row = con.execute(
        "SELECT count(*) FROM duckdb_schemas() WHERE database_name = current_database() "
        "AND schema_name = ?",
        [FTS_SCHEMA],
    ).fetchone()
    return bool(row and row[0])


def drop_indexes(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the HNSW and FTS indexes (if present) and mark them missing in ``meta``.

    Safe inside an explicit transaction: a rollback restores both.
    """
    con.execute(f"DROP INDEX IF EXISTS {HNSW_INDEX}")
    if _fts_schema_exists(con):
        # drop_fts_index leaves nothing behind; a damaged index (a table missing) is dropped too.
        con.execute(f"DROP SCHEMA IF EXISTS {FTS_SCHEMA} CASCADE")
    if table_exists(con, "meta"):
        set_meta(con, "hnsw", None)
        set_meta(con, "fts", None)


# Builds ---------------------------------------------------------------------------------------


def _chunk_rows(con: duckdb.DuckDBPyConnection) -> int:
    if not table_exists(con, "chunks"):
        raise StoreError("no chunks in the store: run `brb ingest` first")
    return int(con.execute("SELECT count(*) FROM chunks").fetchone()[0])


def build_hnsw(
    con: duckdb.DuckDBPyConnection, *, m: int = IndexParams.m, ef_construction: int = IndexParams.ef_construction,
    metric: str = IndexParams.metric
) -> IndexReport:
    """Drop and rebuild the HNSW index on ``chunks.embedding``, then checkpoint.

    Must not run inside an explicit transaction (DuckDB's HNSW persistence has no WAL recovery).
    On an encrypted store nothing is built: ``meta`` records that vectors are searched exactly.

    Args:
        m: graph degree (HNSW ``M``).
        ef_construction: candidate list size while building.
        metric: ``cosine`` (the search code assumes it), ``l2sq`` or ``ip``.

    Returns:
        Rows indexed, build seconds and parameters.
    """
    if metric not in HNSW_METRICS:
        raise ValueError(f"unknown HNSW metric {metric!r}; expected one of {sorted(HNSW_METRICS)}")
    m, ef_construction = int(m), int(ef_construction)
    _outside_transaction(con)
    rows = _chunk_rows(con)
    t0 = time.perf_counter()
    con.execute(f"DROP INDEX IF EXISTS {HNSW_INDEX}")
    params: dict = {"metric": metric, "m": m, "ef_construction": ef_construction}
    exact = encrypted(con)
    if exact:
        # Never attempted: it fails and invalidates the database (DuckDB 1.4.4 and 1.5.5).
        params.update(exact=True, reason=EXACT_REASON)
    else:
        con.execute(
            f"CREATE INDEX {HNSW_INDEX} ON chunks USING HNSW (embedding) "
            f"WITH (metric = '{metric}', M = {m}, ef_construction = {ef_construction})"
        )
    seconds = time.perf_counter() - t0
    set_meta(
        con,
        "hnsw",
        {**params, "rows": rows, "seconds": round(seconds, 3), "built_at": _now(),
         "embedding_model": get_meta(con, "embedding_model")},
    )
    con.execute("CHECKPOINT")
    if exact:
        log.info("Indexing - encrypted store: %d chunk vectors are searched exactly (no HNSW)", rows)
    else:
        log.info("Indexing - HNSW over %d chunks in %.1f s (M=%d, ef_construction=%d)", rows, seconds, m,
                 ef_construction)
    return IndexReport(HNSW_INDEX, rows, seconds, params)


def _outside_transaction(con: duckdb.DuckDBPyConnection) -> None:
    """Refuse to run inside an explicit transaction (HNSW creation there is unsafe)."""
    try:
        con.execute("BEGIN TRANSACTION")
    except duckdb.TransactionException:
        raise RuntimeError("build_hnsw must not run inside an explicit transaction") from None
    con.execute("ROLLBACK")


def build_fts(con: duckdb.DuckDBPyConnection) -> IndexReport:
    """Rebuild the BM25 index over ``content`` and ``lexical_extra`` with multilingual settings."""
    rows = _chunk_rows(con)
    p = FTS_PARAMS
    t0 = time.perf_counter()
    ignore = p["ignore"].replace("'", "''")
    con.execute(
        "PRAGMA create_fts_index('chunks', 'chunk_id', 'content', 'lexical_extra', "
        f"stemmer = '{p['stemmer']}', stopwords = '{p['stopwords']}', ignore = '{ignore}', "
        f"strip_accents = {p['strip_accents']}, lower = {p['lower']}, overwrite = 1)"
    )
    seconds = time.perf_counter() - t0
    set_meta(con, "fts", {**p, "rows": rows, "seconds": round(seconds, 3), "built_at": _now()})
    con.execute("CHECKPOINT")
    log.info("Indexing - BM25 over %d chunks in %.1f s", rows, seconds)
    return IndexReport(FTS_SCHEMA, rows, seconds, dict(p))


def build_indexes(
    con: duckdb.DuckDBPyConnection, *, m: int = IndexParams.m, ef_construction: int = IndexParams.ef_construction,
    metric: str = IndexParams.metric
) -> list[IndexReport]:
    """Build both indexes (HNSW then BM25)."""
    return [build_hnsw(con, m=m, ef_construction=ef_construction, metric=metric), build_fts(con)]


def index_status(con: duckdb.DuckDBPyConnection) -> dict:
    """Describe both indexes against the store.

    Returns:
        ``{"store_rows", "embedding_model", "dim", "hnsw": {...}, "fts": {...}, "ready"}`` where
        each index dict has ``present``, ``rows`` (indexed at build time), ``stale`` (rows differ
        from the store) and its build parameters.
    """
    rows = int(con.execute("SELECT count(*) FROM chunks").fetchone()[0]) if table_exists(con, "chunks") else 0
    out: dict = {
        "store_rows": rows,
        "embedding_model": get_meta(con, "embedding_model"),
        "dim": get_meta(con, "dim"),
    }
    for name, present in (("hnsw", hnsw_present(con)), ("fts", fts_present(con))):
        info = dict(get_meta(con, name) or {})
        info["present"] = present
        info["stale"] = bool(present and info.get("rows") != rows)
        out[name] = info
    out["ready"] = all(out[n]["present"] and not out[n]["stale"] for n in ("hnsw", "fts"))
    return out


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
