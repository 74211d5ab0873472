"""Who said each line: the one place a sender becomes the name a reader sees.

* :func:`speaker` names a message's sender: "Me" for the owner, the person's AddressBook name,
  the raw handle only when no card has it, "Unknown" when the source has no sender.
  Chunking writes every passage line with it.
* :func:`passage_lines` reads a stored passage (``content``: ``Name (HH:MM): text`` lines) back
  into per-line ``sender``/``sender_handle``/``person_id``/``time``/``text``, given the
  conversation's members (search hits in ``--json``).

The MCP server renders whole conversations with ``assistant.lines`` (sender, time and id per line).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

ME = "Me"
UNKNOWN_SENDER = "Unknown"


def speaker(is_from_me: bool | None, handle: str | None, names: Mapping[str, str]) -> str:
    """The name a line shows for its sender (see the module doc)."""
    if is_from_me:
        return ME
    if not handle:
        return UNKNOWN_SENDER
    return names.get(handle, handle)


def passage_lines(content: str, members: Sequence[tuple[str, str, Sequence[str]]]) -> list[dict[str, Any]]:
    """A passage's lines with their senders.

    Args:
        content: a chunk's (or merged passage's) ``content``.
        members: ``(person_id, display_name, handles)`` of the conversation's people.

    Returns:
        One dict per line: ``sender`` (as shown; None when the line names no known sender),
        ``sender_handle`` (the person's first handle; None for "Me" or when the name is shared by
        two members of the chat), ``person_id``, ``is_from_me``, ``time`` ("HH:MM" or None) and
        ``text``.
    """
    labels: dict[str, tuple[str | None, str | None]] = {}
    for pid, name, handles in members:
        first = handles[0] if handles else None
        labels[name] = (None, None) if name in labels else (pid, first)  # a shared name: no handle
    labels[ME] = (None, None)
    ordered = sorted(labels, key=len, reverse=True)
    out = []
    for line in content.split("\n"):
        out.append(_line(line, ordered, labels))
    return out


def _line(line: str, ordered: list[str], labels: Mapping[str, tuple[str | None, str | None]]) -> dict[str, Any]:
    for name in ordered:
        if not line.startswith(name):
            continue
        tail = line[len(name):]
        time = None
        if tail.startswith(" (") and tail[7:10] == "): " and tail[4] == ":":
            time, text = tail[2:7], tail[10:]
        elif tail.startswith(": "):
            text = tail[2:]
        else:
            continue
        pid, handle = labels[name]
        return {"sender": name, "sender_handle": handle, "person_id": pid, "is_from_me": name == ME,
                "time": time, "text": text}
    return {"sender": None, "sender_handle": None, "person_id": None, "is_from_me": False, "time": None,
            "text": line}
