"""Decoding one chat.db ``message`` row: its date, its text (body, edits, unsent parts), its tapbacks.

:mod:`brb_pipeline.sources.imessage` runs the queries and streams the blocks; the rules that turn
the values of a row into a message's fields live here, each testable on plain values.

Dates: ``message.date`` is nanoseconds since 2001-01-01 UTC on modern macOS and seconds on old
ones; the unit is decided per value by magnitude. Output timestamps are UTC microseconds. A
NULL, zero or impossible date (before 2002, from 2100 on, text, beyond int64) gives ``ts = null``:
the message is kept, counted as ``date_invalid``, and chunking places it by ROWID within its chat
with no time shown.
"""

from __future__ import annotations

import plistlib

import polars as pl

from brb_pipeline.core.records import REACTION, REACTION_KINDS
from brb_pipeline.sources.typedstream import decode_attributed_body

_APPLE_EPOCH_US = 978_307_200 * 1_000_000
# |date| above this is nanoseconds (2001 + 100 s in ns is 1e11); below it, seconds (year 5170).
_NS_THRESHOLD = 100_000_000_000
# A converted date outside [2002-01-01, 2100-01-01) UTC is not a real send time: Messages (iChat)
# history starts in 2002, 0 is the "unset" value (2001-01-01), a date in milli- or microseconds
# read as nanoseconds lands in January 2001, and a year-1 or year-9999 value is corruption.
VALID_FROM_US = 1_009_843_200 * 1_000_000  # 2002-01-01 UTC
VALID_UNTIL_US = 4_102_444_800 * 1_000_000  # 2100-01-01 UTC

def apple_date_to_us(col: pl.Expr) -> pl.Expr:
    """Apple ``message.date`` (ns or s since 2001-01-01 UTC) -> ``Datetime("us", "UTC")``.

    NULL, 0 and dates outside [2002, 2100) (see :data:`VALID_FROM_US`) become null, never an
    error; the message is kept and the ``date_invalid`` stat counts it.
    """
    # Seconds beyond +-1e11 never reach the multiplication (they are read as ns), so no overflow.
    us = pl.when(col.abs() > _NS_THRESHOLD).then(col // 1000).otherwise(col * 1_000_000) + _APPLE_EPOCH_US
    valid = (us >= VALID_FROM_US) & (us < VALID_UNTIL_US)
    return pl.when(valid).then(us).otherwise(None).cast(pl.Datetime("us", "UTC"))


def edit_history(info: bytes | None) -> tuple[str | None, bool, bool]:
    """The facts brb uses from a ``message_summary_info`` binary plist.

    Layout (macOS 13+): ``ec`` maps a message part index (``"0"``, ``"1"``...) to every version
    of that part, oldest first, each ``{"d": edit time in seconds since 2001, "t":
    attributedBody typedstream}``; ``ep`` lists edited parts, ``rp`` retracted (unsent) parts,
    ``otr`` original text ranges. Other keys are ignored.

    Returns:
        ``(final text of the parts not retracted or None, edited, some part retracted)``;
        ``(None, False, False)`` for a blob that is not such a plist (never raises).
    """
    if not info:
        return None, False, False
    try:
        d = plistlib.loads(bytes(info))
    except Exception:  # damaged or foreign blob: treated as absent
        return None, False, False
    if not isinstance(d, dict):
        return None, False, False
    ec = d.get("ec") if isinstance(d.get("ec"), dict) else {}
    rp = d.get("rp") if isinstance(d.get("rp"), list) else []
    retracted = {str(p) for p in rp}
    parts = []
    for key in sorted(ec, key=lambda k: (len(str(k)), str(k))):  # "2" before "10"
        versions = ec[key]
        if str(key) in retracted or not isinstance(versions, list) or not versions:
            continue
        last = versions[-1]
        body = last.get("t") if isinstance(last, dict) else None
        try:
            text = decode_attributed_body(body) if isinstance(body, bytes) else None
        except Exception:
            text = None
        if text:
            parts.append(text)
    edited = bool(ec) or bool(d.get("ep"))
    return (" ".join(parts) or None), edited, bool(retracted)


def parent_guid(assoc: str | None) -> str | None:
    """Parent message guid of a tapback's ``associated_message_guid`` (``p:N/GUID``, ``bp:GUID``)."""
    if not assoc:
        return None
    if assoc.startswith("p:"):
        slash = assoc.find("/")
        return assoc[slash + 1 :] if slash >= 0 else assoc[2:]
    if assoc.startswith("bp:"):
        return assoc[3:]
    return assoc


def row_text(text: str | None, blob: bytes | None, info: bytes | None, flag: int,
             stats: dict[str, int]) -> tuple[str | None, str, bool, int]:
    """The text a message row shows, where it came from, and its edited/retracted flag bits.

    ``text`` wins; else the ``attributedBody`` blob; else the final version in the edit
    history. Counts ``from_edit_history`` and ``partly_unsent`` in ``stats``.

    Args:
        text: ``message.text``.
        blob: ``attributedBody`` (fetched only when ``text`` is NULL or '').
        info: ``message_summary_info`` (fetched only where it can matter).
        flag: the row's flag bits (2 edited, 4 retracted, as the query sets them).
        stats: the reader's counters, updated in place.

    Returns:
        ``(text or None, text_source, undecodable, flag with the edit history's bits added)``.
    """
    undec = False
    if text:
        src = "text"
    elif blob is not None:
        try:
            text = decode_attributed_body(blob)
        except Exception:  # one bad blob must not stop the read; it is counted by the caller
            text = None
        if text:
            src = "attributed_body"
        else:
            text, src, undec = None, "none", True
    else:
        text, src = None, "none"
    if info is not None:
        final, was_edited, some_retracted = edit_history(info)
        if was_edited:
            flag |= 2
        if text is None and final:
            text, src, undec = final, "edit_history", False
            stats["from_edit_history"] += 1
        if some_retracted:
            flag |= 4
            if text is not None:
                stats["partly_unsent"] += 1
    return text, src, undec, flag


def reaction_frame(state: dict[tuple, tuple]) -> pl.DataFrame:
    """Final tapback state -> one row per parent ``message_id`` with its ``reactions`` list.

    Args:
        state: ``(parent message_id, is_from_me, sender, kind index) -> (date, emoji)``, in the
            order of each reaction's latest add.

    Returns:
        Frame ``message_id`` (Utf8), ``reactions`` (List(REACTION), sorted by time, ties in
        latest-add order).
    """
    rx = pl.DataFrame(
        {
            "message_id": [k[0] for k in state],
            "kind": [REACTION_KINDS[k[3]] for k in state],
            "sender": [k[2] for k in state],
            "is_from_me": [k[1] for k in state],
            "date": [v[0] for v in state.values()],
            "emoji": [v[1] for v in state.values()],
        },
        schema={"message_id": pl.Utf8, "kind": pl.Utf8, "sender": pl.Utf8, "is_from_me": pl.Boolean,
                "date": pl.Int64, "emoji": pl.Utf8},
    )
    return (
        rx.with_columns(apple_date_to_us(pl.col("date")).alias("ts"))
        .sort("ts", maintain_order=True)
        .group_by("message_id", maintain_order=True)
        .agg(pl.struct("kind", "sender", "is_from_me", "ts", "emoji").alias("reactions"))
        .with_columns(pl.col("reactions").cast(pl.List(REACTION)))
    )
