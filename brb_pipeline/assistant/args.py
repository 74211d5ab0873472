"""Checking a tool's arguments: each bad one is a :class:`ToolError` whose one sentence says what
is wrong and what would be right, so a model can correct its call."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


class ToolError(Exception):
    """A tool call that cannot be answered as asked; the message is one sentence for the model."""


class Args:
    """A tool call's arguments, read one at a time; :meth:`done` refuses any left unread."""

    def __init__(self, tool: str, args: dict[str, Any] | None, known: list[str]) -> None:
        if args is not None and not isinstance(args, dict):
            raise ToolError(f"The arguments of {tool} must be a JSON object.")
        self.tool, self.args, self.known = tool, dict(args or {}), known

    def done(self) -> None:
        extra = sorted(set(self.args) - set(self.known))
        if extra:
            raise ToolError(f"{self.tool} has no argument {extra[0]!r}; it takes: {', '.join(self.known)}.")

    def text(self, name: str, *, max_len: int, required: bool = False) -> str | None:
        v = self.args.get(name)
        if v is None or (isinstance(v, str) and not v.strip() and not required):
            if required:
                raise ToolError(f"{self.tool} needs {name!r}: a non-empty string.")
            return None
        if not isinstance(v, str) or not v.strip():
            raise ToolError(f"{name!r} must be a non-empty string.")
        if len(v) > max_len:
            raise ToolError(f"{name!r} is {len(v)} characters long; the limit is {max_len}.")
        return v.strip()

    def integer(self, name: str, default: int, lo: int, hi: int) -> int:
        v = self.args.get(name)
        if v is None:
            return default
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ToolError(f"{name!r} must be a whole number from {lo} to {hi}.")
        return v

    def choice(self, name: str, options: tuple[str, ...], default: str | None = None) -> str | None:
        v = self.args.get(name)
        if v is None:
            return default
        if v not in options:
            raise ToolError(f"{name!r} must be one of {', '.join(options)}.")
        return v

    def date(self, name: str) -> datetime | None:
        """An ISO 8601 date or date-time; one without a zone is UTC (as ``brb search --since``)."""
        v = self.text(name, max_len=40)
        if v is None:
            return None
        d = parse_time(v)
        if d is None:
            raise ToolError(f"{name!r} must be a date like 2024-05-01 or 2024-05-01T18:00.")
        return d


def parse_time(value: str) -> datetime | None:
    """``value`` as an aware datetime (naive: UTC), or None when it is not ISO 8601."""
    try:
        d = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return d if d.tzinfo else d.replace(tzinfo=timezone.utc)
