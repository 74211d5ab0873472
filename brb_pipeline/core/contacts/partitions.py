"""Where a person's conversations live in Dagster: name -> partition keys (``batch-NNN``), resolved
locally.

Dagster's storage is never encrypted, so an encrypted home keeps people's names out of it (no
``people`` table on ``contact_batches``); a person's partitions are found here instead, from
brb.db (unsealed in memory), and shown only to whoever asked: ``brb people --partitions`` in the
terminal, or the person finder page that ``brb ui`` serves from memory. Nothing here writes a
file or logs a name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from brb_pipeline.core import DEFAULT_REGION, metadata
from brb_pipeline.core.contacts.people_db import match_people, people_rows


def person_partitions(path: Path, name: str | None = None, *, default_region: str = DEFAULT_REGION,
                      limit: int | None = None) -> list[dict[str, Any]]:
    """Every person (or the people ``name`` names, by ``brb ingest --contact``'s rules), most
    messages first, with the partitions holding their conversations.

    Args:
        path: brb.db.
        name: a name, part of one, a nickname, a handle or a person id; None for everyone.
        default_region: how a phone number typed without a country code is read.
        limit: at most this many people.

    Returns:
        ``[{"person_id", "name", "messages", "partitions": [batch keys, sorted],
        "conversations": [{"conversation", "kind", "partition"}]}]``; ``conversation`` is
        "1:1" or the group's name, ``partition`` None for a conversation in no batch yet.
    """
    rows = people_rows(path)
    if name is not None:
        rows = match_people(rows, name, default_region=default_region) if name.strip() else []
    if limit is not None:
        rows = rows[:limit]
    with metadata.connect(path) as c:
        convs = {cid: (conv_name, kind, batch) for cid, conv_name, kind, batch in c.execute(
            "SELECT contact_id, display_name, kind, batch FROM contacts")}
    out = []
    for r in rows:
        mine = []
        for conv in r["conversations"]:
            conv_name, kind, batch = convs.get(conv["contact_id"], (None, conv["kind"], None))
            mine.append({"conversation": "1:1" if conv["kind"] == "direct" else (conv_name or "group"),
                         "kind": conv["kind"], "partition": batch})
        mine.sort(key=lambda m: (m["kind"] != "direct", m["partition"] or "~", m["conversation"]))
        out.append({"person_id": r["person_id"], "name": r["display_name"], "messages": r["messages"],
                    "partitions": sorted({m["partition"] for m in mine if m["partition"]}),
                    "conversations": mine})
    return out


def partition_lines(people: list[dict[str, Any]]) -> list[str]:
    """``brb people --partitions``: one line per person, their partitions and what each holds."""
    lines = []
    for p in people:
        where = " · ".join(f"{m['partition'] or 'no batch'} ({m['conversation']})" for m in p["conversations"])
        lines.append(f"{p['name']:<28} {','.join(p['partitions']) or '-':<22} {where}")
    return lines
