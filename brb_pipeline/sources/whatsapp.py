"""Read WhatsApp's ``ChatStorage.sqlite`` into the normalized message and chat frames.

**Opt-in only.** This reader must only ever be called when the user explicitly enabled WhatsApp
(``Settings.whatsapp_enabled``); the caller enforces that, this module never looks for the file
on its own.

Facts used (WhatsApp for iOS / macOS Core Data store):

* ``ZWACHATSESSION``: one row per chat; ``ZCONTACTJID`` is the partner (``<digits>@s.whatsapp.net``)
  or group (``<id>@g.us``) JID; ``ZSESSIONTYPE`` 0 direct, 1 group, 3 status broadcast (skipped);
  ``ZPARTNERNAME`` the contact or group name as shown in the app.
* ``ZWAMESSAGE``: ``ZMESSAGEDATE`` is REAL seconds since 2001-01-01 UTC; ``ZISFROMME``;
  ``ZFROMJID`` is the partner JID for incoming direct messages and the group JID for incoming
  group messages, whose sender is ``ZGROUPMEMBER`` -> ``ZWAGROUPMEMBER.ZMEMBERJID``;
  ``ZMEDIAITEM`` -> ``ZWAMEDIAITEM`` marks an attachment; ``ZSTANZAID`` is the protocol id.
* ``ZMESSAGETYPE`` 6 and 10 are system notices (group events, security-code changes): skipped.

:func:`read_whatsapp` returns the whole store as one frame; :class:`WhatsAppStream` yields the
same rows in blocks so a caller can write them out without holding them all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl

from brb_pipeline.sources.sqlite_ro import LOCK_TIMEOUT_S
from brb_pipeline.core.records.handles import DEFAULT_REGION
from brb_pipeline.core.records.handles import normalize_handle
from brb_pipeline.core.records import CHAT_SCHEMA, EXTRA, MESSAGE_SCHEMA, ORPHAN_CHAT_ID, REACTION, ReadResult, read_all
from brb_pipeline.sources.sqlite_ro import BlockReader, closed_on_error, open_readonly, stat_warnings
from brb_pipeline.sources.whatsapp_media import media_extra, media_select

log = logging.getLogger(__name__)

CHANNEL = "whatsapp"
WHAT = "WhatsApp ChatStorage"
SESSION_DIRECT, SESSION_GROUP, SESSION_STATUS = 0, 1, 3
SYSTEM_MESSAGE_TYPES = (6, 10)
APPLE_EPOCH_US = int(datetime(2001, 1, 1, tzinfo=timezone.utc).timestamp()) * 1_000_000
FETCH_ROWS = 10_000  # source rows per block

REQUIRED = {
    "ZWACHATSESSION": {"Z_PK", "ZCONTACTJID", "ZSESSIONTYPE", "ZPARTNERNAME"},
    "ZWAMESSAGE": {
        "Z_PK", "ZCHATSESSION", "ZISFROMME", "ZFROMJID", "ZMESSAGEDATE", "ZSTANZAID", "ZTEXT",
        "ZGROUPMEMBER", "ZMEDIAITEM", "ZMESSAGETYPE",
    },
    "ZWAGROUPMEMBER": {"Z_PK", "ZCHATSESSION", "ZMEMBERJID"},
}

_MESSAGES_SQL = """
SELECT m.Z_PK, m.ZSTANZAID, m.ZCHATSESSION, m.ZISFROMME, m.ZFROMJID, gm.ZMEMBERJID,
       m.ZMESSAGEDATE, m.ZTEXT, m.ZMEDIAITEM, m.ZMESSAGETYPE{media_columns}
FROM ZWAMESSAGE AS m
LEFT JOIN ZWAGROUPMEMBER AS gm ON gm.Z_PK = m.ZGROUPMEMBER
{media_join}
ORDER BY m.Z_PK
"""

# Stanza ids that may repeat once normalized (trimmed like ``str.strip``): the only ids whose
# first occurrence must be remembered across blocks. Odd types and ``pk-...`` ids (which could
# meet a Z_PK fallback id) are always candidates.
_DUPLICATE_CANDIDATES_SQL = """
SELECT ZSTANZAID FROM ZWAMESSAGE
WHERE typeof(ZSTANZAID) NOT IN ('text', 'null')
   OR (typeof(ZSTANZAID) = 'text' AND (trim(ZSTANZAID, :ws) LIKE 'pk-%' OR trim(ZSTANZAID, :ws) IN (
       SELECT trim(ZSTANZAID, :ws) AS k FROM ZWAMESSAGE WHERE typeof(ZSTANZAID) = 'text'
       GROUP BY k HAVING count(*) > 1)))
"""
_WHITESPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace())

Cancel = Callable[[], bool]
ProgressFn = Callable[[int, int], None]


def read_whatsapp(
    path: Path,
    *,
    default_region: str = DEFAULT_REGION,
    cancel: Cancel | None = None,
    progress: ProgressFn | None = None,
    chunk_rows: int = FETCH_ROWS,
    timeout_s: float = LOCK_TIMEOUT_S,
) -> ReadResult:
    """Read a WhatsApp store into MESSAGE_SCHEMA / CHAT_SCHEMA frames (channel ``"whatsapp"``).

    Only call this when the user opted in to WhatsApp; the caller enforces it.

    Args:
        path: ``ChatStorage.sqlite`` (ideally a snapshot; it is opened read-only anyway).
        default_region: region for JIDs/numbers without a country code (JIDs normally have one).
        cancel: polled between chunks; returning True raises :class:`CancelledError`
            (a ``CancelToken`` works as is).
        progress: called as ``progress(rows_done, rows_total)`` after each chunk.
        chunk_rows: message rows fetched per chunk.
        timeout_s: how long to wait on a locked file (seconds).

    Returns:
        ReadResult. ``message_id`` is ``"whatsapp:" + ZSTANZAID`` (``"whatsapp:pk-<Z_PK>"`` when
        the stanza id is missing, ``"whatsapp:<stanza>#<Z_PK>"`` for a repeated one); ``chat_id``
        is ``"whatsapp:" + ZCONTACTJID``; ``ts`` UTC microseconds. Stats: ``messages_read``,
        ``status_skipped``, ``empty_skipped``, ``system_skipped``, ``bad_timestamp``, ``orphans``,
        ``unknown_sender``, ``attachments``, ``duplicate_ids``, ``chats``, ``groups``.

    Raises:
        SourceMissingError, NotADatabaseError, DatabaseLockedError, UnknownSchemaError,
        CancelledError.
    """
    with WhatsAppStream(path, default_region=default_region, cancel=cancel, progress=progress,
                        chunk_rows=chunk_rows, timeout_s=timeout_s) as stream:
        return read_all(stream)


class WhatsAppStream(BlockReader):
    """A WhatsApp store read block by block: the rows of :func:`read_whatsapp`, never all at once.

    Use as a context manager (the connection is closed on exit): ``chats`` is known on entry,
    :meth:`blocks` yields MESSAGE_SCHEMA frames in Z_PK order, :meth:`result` then gives the
    stats and warnings (its ``messages`` is empty). Memory held between blocks: the sessions,
    the normalized senders and the stanza ids that may repeat, not the messages.

    Args:
        path, default_region, cancel, progress, chunk_rows, timeout_s: as for
            :func:`read_whatsapp`.
    """

    def __init__(self, path: Path, *, chunk_rows: int = FETCH_ROWS, **options: Any) -> None:
        super().__init__(path, chunk_rows=chunk_rows, **options)
        self.stats = dict.fromkeys(
            ("messages_read", "status_skipped", "empty_skipped", "system_skipped", "bad_timestamp", "orphans",
             "unknown_sender", "attachments", "duplicate_ids", "chats", "groups", "undecodable_text"),
            0,
        )
        self.chats = pl.DataFrame(schema=CHAT_SCHEMA)
        self.senders: dict[str, str | None] = {}  # raw sender JID -> normalized handle
        self.repeatable: set[str] = set()  # normalized ids that may repeat
        self.seen: set[str] = set()  # those of them already given out

    def __enter__(self) -> "WhatsAppStream":
        self._conn = open_readonly(self.path, what=WHAT, required=REQUIRED, timeout_s=self.timeout_s,
                                   io=self.io)
        conn = self._conn
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        with closed_on_error(conn, WHAT, self.path):
            sessions = conn.execute("SELECT Z_PK, ZCONTACTJID, ZSESSIONTYPE, ZPARTNERNAME FROM ZWACHATSESSION").fetchall()
            members = conn.execute(
                "SELECT ZCHATSESSION, ZMEMBERJID FROM ZWAGROUPMEMBER WHERE ZCHATSESSION IS NOT NULL"
            ).fetchall()
            self.total = conn.execute("SELECT count(*) FROM ZWAMESSAGE").fetchone()[0] or 0
            self.chats, self.info = _chats(sessions, members, self.region, self.stats)
            rows = conn.execute(_DUPLICATE_CANDIDATES_SQL, {"ws": _WHITESPACE})
            self.repeatable = {v for (raw,) in rows if (v := _str(raw)) is not None}
            columns, join = media_select(conn)
            self.sql = _MESSAGES_SQL.format(media_columns=columns, media_join=join)
        return self

    def blocks(self) -> Iterator[pl.DataFrame]:
        """Yield the kept messages in Z_PK order, ``chunk_rows`` source rows at a time.

        Yields:
            MESSAGE_SCHEMA frames (possibly empty).

        Raises:
            CancelledError, DatabaseLockedError (and the other source errors) between chunks.
        """
        return self._fetch_blocks(
            self.sql, WHAT, "WhatsApp - read cancelled after {done:,} of {total:,} rows",
            lambda rows: _normalize(_frame(rows), self.info, self))

    def _summary(self) -> tuple[pl.DataFrame, list[str]]:
        """Chats and warnings (logged)."""
        stats = self.stats
        warnings = stat_warnings(stats, {
            "bad_timestamp": "WhatsApp - {n} messages without a usable date were skipped",
            "orphans": "WhatsApp - {n} messages point at no chat session",
            "undecodable_text": "WhatsApp - {n} messages had invalid UTF-8 (replaced)",
        })
        for w in warnings:
            log.warning(w)
        log.info(
            "WhatsApp - %d messages in %d chats (%d status, %d empty, %d system skipped)",
            stats["messages_read"], stats["chats"], stats["status_skipped"], stats["empty_skipped"],
            stats["system_skipped"],
        )
        return self.chats, warnings


def _str(v: object) -> str | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    s = str(v).strip()
    return s or None


def _chats(
    sessions: list[tuple], members: list[tuple], region: str, stats: dict[str, int]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """CHAT_SCHEMA frame plus a per-session lookup (session pk -> chat_id, kind, partner handle)."""
    by_session: dict[int, set[str]] = {}
    for spk, jid in members:
        h = normalize_handle(_str(jid), region)
        if h is not None:
            by_session.setdefault(spk, set()).add(h)
    chat_rows, info_rows = [], []
    for spk, jid, stype, name in sessions:
        jid_s = _str(jid)
        chat_id = f"{CHANNEL}:{jid_s}" if jid_s else f"{CHANNEL}:session-{spk}"
        if stype == SESSION_STATUS or jid_s == "status@broadcast":
            info_rows.append((spk, chat_id, "status", None))
            continue
        is_group = stype == SESSION_GROUP or (jid_s or "").endswith("@g.us")
        if is_group:
            participants = sorted(by_session.get(spk, ()))
            partner = None
            stats["groups"] += 1
        else:
            partner = normalize_handle(jid_s, region)
            participants = [partner] if partner else []
        chat_rows.append((CHANNEL, chat_id, "group" if is_group else "direct", _str(name), participants))
        info_rows.append((spk, chat_id, "group" if is_group else "direct", partner))
    stats["chats"] = len(chat_rows)
    chats = pl.DataFrame(chat_rows, schema=CHAT_SCHEMA, orient="row")
    info = pl.DataFrame(
        info_rows,
        schema={"session": pl.Int64, "chat_id": pl.Utf8, "kind": pl.Utf8, "partner": pl.Utf8},
        orient="row",
    )
    return chats, info


_RAW = {
    "pk": pl.Int64, "stanza": pl.Utf8, "session": pl.Int64, "from_me": pl.Int64, "from_jid": pl.Utf8,
    "member_jid": pl.Utf8, "date": pl.Float64, "text": pl.Utf8, "media": pl.Int64, "mtype": pl.Int64,
    "m_path": pl.Utf8, "m_size": pl.Int64, "m_title": pl.Utf8, "m_secs": pl.Int64,
}


def _frame(rows: list[tuple]) -> pl.DataFrame:
    # Columns may hold odd types (a REAL in ZTEXT, text in ZMESSAGEDATE): coerce per value.
    cols = list(zip(*rows)) if rows else [[] for _ in _RAW]
    out = {}
    for (name, dtype), values in zip(_RAW.items(), cols):
        if name == "text":  # keep the text as written; only "" becomes null
            values = [None if v is None or v == "" or v == b"" else (v if isinstance(v, str) else _str(v)) for v in values]
        elif dtype == pl.Utf8:
            values = [_str(v) for v in values]
        elif dtype == pl.Float64:
            values = [float(v) if isinstance(v, (int, float)) else None for v in values]
        else:
            values = [int(v) if isinstance(v, (int, float)) else None for v in values]
        out[name] = pl.Series(name, values, dtype=dtype)
    return pl.DataFrame(out)


def _normalize(raw: pl.DataFrame, info: pl.DataFrame, state: WhatsAppStream) -> pl.DataFrame:
    """One block of raw rows -> MESSAGE_SCHEMA; adds to ``state.stats``.

    Args:
        raw: rows of :data:`_RAW` in Z_PK order, following the blocks already normalized.
        info: session pk -> chat_id, kind, partner (from :func:`_chats`).
        state: the stream's counters, sender cache and repeatable ids (updated).
    """
    stats = state.stats
    df = _drop_skipped(raw.join(info, on="session", how="left", maintain_order="left"), stats)
    stats["orphans"] += int(df.select(pl.col("chat_id").is_null().sum()).item())
    stats["undecodable_text"] += int(df.select(pl.col("text").str.contains("\ufffd", literal=True).fill_null(False).sum()).item())
    df = _with_sender(df, state)

    # Stable ids: the stanza id, made unique by Z_PK when WhatsApp repeated one.
    base = pl.coalesce(pl.col("stanza"), pl.lit("pk-") + pl.col("pk").cast(pl.Utf8))
    df = df.with_columns(base.alias("_base"))
    dup = pl.Series("_dup", _repeats(df.get_column("_base"), state), dtype=pl.Boolean)
    df = df.with_columns(dup)
    stats["duplicate_ids"] += int(dup.sum())
    message_id = pl.lit(f"{CHANNEL}:") + pl.when(pl.col("_dup")).then(pl.col("_base") + pl.lit("#") + pl.col("pk").cast(pl.Utf8)).otherwise(pl.col("_base"))

    ts_us = (pl.col("date") * 1_000_000).round(0).cast(pl.Int64) + APPLE_EPOCH_US
    has_media = pl.col("media").is_not_null()
    out = df.select(
        pl.lit(CHANNEL).alias("channel"),
        message_id.alias("message_id"),
        pl.col("pk").alias("source_rowid"),
        pl.col("chat_id").fill_null(f"{CHANNEL}:{ORPHAN_CHAT_ID}"),
        pl.col("sender"),
        pl.col("is_from_me"),
        ts_us.cast(pl.Datetime("us")).dt.replace_time_zone("UTC").alias("ts"),
        pl.col("text"),
        pl.when(pl.col("text").is_not_null()).then(pl.lit("text")).otherwise(pl.lit("none")).alias("text_source"),
        pl.lit(False).alias("undecodable"),
        pl.lit(False).alias("edited"),
        has_media.cast(pl.Int32).alias("attachments"),
        pl.lit([], dtype=pl.List(REACTION)).alias("reactions"),
        _extras(df).alias("extras"),
    )
    stats["attachments"] += int(out.get_column("attachments").sum() or 0)
    stats["messages_read"] += out.height
    return out.cast(dict(MESSAGE_SCHEMA)).select(list(MESSAGE_SCHEMA.names()))


def _extras(df: pl.DataFrame) -> pl.Series:
    """Each kept message's media extras (null without a media row); counts nothing."""
    cols = [df.get_column(c).to_list() for c in ("media", "mtype", "m_path", "m_size", "m_title", "m_secs")]
    values = [media_extra(t, p, n, ti, s) if m is not None else None for m, t, p, n, ti, s in zip(*cols)]
    return pl.Series("extras", values, dtype=pl.List(EXTRA))


def _drop_skipped(df: pl.DataFrame, stats: dict[str, int]) -> pl.DataFrame:
    """Drop status updates, system rows, empty rows and rows without a usable date; counts each."""
    is_status = pl.col("kind") == "status"
    stats["status_skipped"] += int(df.select(is_status.fill_null(False).sum()).item())
    df = df.filter(~is_status.fill_null(False))

    is_system = pl.col("mtype").is_in(list(SYSTEM_MESSAGE_TYPES)).fill_null(False)
    stats["system_skipped"] += int(df.select(is_system.sum()).item())
    df = df.filter(~is_system)

    empty = pl.col("text").is_null() & pl.col("media").is_null()
    stats["empty_skipped"] += int(df.select(empty.sum()).item())
    df = df.filter(~empty)

    bad_ts = pl.col("date").is_null() | pl.col("date").is_nan() | (pl.col("date").abs() > 4e9)
    stats["bad_timestamp"] += int(df.select(bad_ts.sum()).item())
    return df.filter(~bad_ts)


def _with_sender(df: pl.DataFrame, state: WhatsAppStream) -> pl.DataFrame:
    """Add ``is_from_me`` and the normalized ``sender``; counts ``unknown_sender``."""
    stats = state.stats
    # Sender: the group member's JID, else ZFROMJID unless it names the group, else the partner.
    from_me = pl.col("from_me").fill_null(0) != 0
    from_jid_ok = pl.when(pl.col("from_jid").str.ends_with("@g.us")).then(None).otherwise(pl.col("from_jid"))
    df = df.with_columns(
        from_me.alias("is_from_me"),
        pl.coalesce(pl.col("member_jid"), from_jid_ok).alias("sender_raw"),
    )
    uniq = df.get_column("sender_raw").drop_nulls().unique().to_list()
    for u in uniq:
        if u not in state.senders:
            state.senders[u] = normalize_handle(u, state.region)
    mapping = pl.DataFrame(
        {"sender_raw": uniq, "sender_norm": [state.senders[u] for u in uniq]},
        schema={"sender_raw": pl.Utf8, "sender_norm": pl.Utf8},
    )
    df = df.join(mapping, on="sender_raw", how="left", maintain_order="left")
    sender = (
        pl.when(pl.col("is_from_me"))
        .then(None)
        .otherwise(pl.coalesce(pl.col("sender_norm"), pl.when(pl.col("kind") == "direct").then(pl.col("partner"))))
    )
    df = df.with_columns(sender.alias("sender"))
    stats["unknown_sender"] += int(df.select((~pl.col("is_from_me") & pl.col("sender").is_null()).sum()).item())
    return df


def _repeats(bases: pl.Series, state: WhatsAppStream) -> list[bool]:
    """True for each id already given out earlier in the store (the first occurrence keeps it).

    Only ids in ``state.repeatable`` can repeat; they are remembered in ``state.seen``.
    """
    out = [False] * len(bases)
    if not state.repeatable or not len(bases):
        return out
    for i in bases.is_in(list(state.repeatable)).arg_true().to_list():
        b = bases[i]
        out[i] = b in state.seen
        state.seen.add(b)
    return out
