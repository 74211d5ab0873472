"""Small normalized message frames for tests of the stages that consume them."""

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone

import polars as pl

from brb_pipeline.core.records import MESSAGE_SCHEMA

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)


def message_frame(rows: Sequence[tuple], *, message_id: Callable[[int], str] = lambda i: f"imessage:m{i:04d}",
                  t0: datetime = T0) -> pl.DataFrame:
    """MESSAGE_SCHEMA plus ``contact_id`` (``"c:" + chat``) from compact rows.

    Args:
        rows: ``(chat_id, minutes after t0, text, is_from_me, sender)`` per message.
        message_id: row index -> message id.
    """
    data: dict[str, list] = {name: [] for name in MESSAGE_SCHEMA.names()}
    data["contact_id"] = []
    for i, (chat, minutes, text, mine, sender) in enumerate(rows):
        data["channel"].append("imessage")
        data["message_id"].append(message_id(i))
        data["source_rowid"].append(i + 1)
        data["chat_id"].append(chat)
        data["sender"].append(None if mine else sender)
        data["is_from_me"].append(mine)
        data["ts"].append(t0 + timedelta(minutes=minutes))
        data["text"].append(text)
        data["text_source"].append("text")
        data["undecodable"].append(False)
        data["edited"].append(False)
        data["attachments"].append(0)
        data["reactions"].append([])
        data["extras"].append([])
        data["contact_id"].append("c:" + chat)
    return pl.DataFrame(data, schema={**dict(MESSAGE_SCHEMA), "contact_id": pl.Utf8})
