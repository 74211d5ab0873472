"""Dates said in words inside a question ("last summer", "in May 2023", "two weeks ago") -> since/until.

:func:`when` finds at most one date phrase in a question and resolves it against ``now`` into a
half-open range ``[since, until)`` (aware UTC datetimes). Calendar phrases (a month and year, a
year, a season, last/this week, month or year) are resolved here; relative phrases ("two weeks
ago", "3 days ago", "yesterday") and month names are parsed with ``dateparser``. A phrase that
looks like a date but does not resolve ("before the wedding") comes back with ``since`` and
``until`` None and ``resolved`` False, so the caller can say so; it is never an error. A question
without any date cue never imports ``dateparser`` (it costs ~0.3 s to import) and is never changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_MONTHS = ("january february march april may june july august september october november december").split()
_MONTH_RE = r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?" \
            r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_SEASONS = {"spring": (3, 6), "summer": (6, 9), "fall": (9, 12), "autumn": (9, 12), "winter": (12, 15)}
_NUM = r"(?:\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|a couple of)"
_UNIT = r"(?:day|week|month|year)s?"
_PATTERNS = [  # (kind, regex), tried in order; the first match wins
    ("month_year", re.compile(rf"\b(?P<m>{_MONTH_RE})\.?,?\s+(?:of\s+)?(?P<y>(?:19|20)\d\d)\b", re.I)),
    ("season", re.compile(r"\b(?P<rel>last|this|past)\s+(?P<s>spring|summer|fall|autumn|winter)\b"
                          r"|\b(?P<s2>spring|summer|fall|autumn|winter)\s+(?:of\s+)?(?P<y>(?:19|20)\d\d)\b", re.I)),
    ("period", re.compile(r"\b(?P<rel>last|this|past|previous)\s+(?P<u>week|month|year)\b", re.I)),
    ("ago", re.compile(rf"\b(?P<n>{_NUM})\s+(?P<u>{_UNIT})\s+ago\b", re.I)),
    ("yesterday", re.compile(r"\b(?:yesterday|the day before yesterday)\b", re.I)),
    ("year", re.compile(r"\b(?P<p>in|during|since|before|after|until)\s+(?P<y>(?:19|20)\d\d)\b", re.I)),
    # "in May": a month name after a preposition ("may" alone is a verb too often).
    ("month", re.compile(rf"\b(?P<p>in|during|last|this|since|before|after|until)\s+(?P<m>{_MONTH_RE})\b", re.I)),
    # Events only the user knows: reported, never resolved.
    ("event", re.compile(r"\b(?:before|after|since)\s+(?:the|our|my|his|her|their)\s+[^\W\d_]+", re.I)),
]
_BOUND_RE = re.compile(r"\b(since|after|before|until)\s+$", re.I)


@dataclass(frozen=True)
class When:
    """A date phrase of a question and the range it names (both None when not resolved)."""

    phrase: str
    since: datetime | None
    until: datetime | None
    resolved: bool

    def as_json(self) -> dict[str, object]:
        return {"phrase": self.phrase, "resolved": self.resolved,
                "since": self.since.isoformat() if self.since else None,
                "until": self.until.isoformat() if self.until else None}


def when(query: str, now: datetime | None = None) -> When | None:
    """The first date phrase of ``query`` and its range relative to ``now`` (default: now, UTC);
    None when the question says no date."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    for kind, rx in _PATTERNS:
        m = rx.search(query)
        if m is None:
            continue
        rng = _RESOLVE[kind](m, now)
        if rng is None:
            return When(m.group(0), None, None, False)
        since, until = _bounded(query[:m.start()] + (m.groupdict().get("p") or "") + " ", *rng)
        return When(m.group(0), since, until, True)
    return None


def _bounded(before: str, since: datetime, until: datetime) -> tuple[datetime | None, datetime | None]:
    """"since/after X" keeps only the lower bound, "before/until X" only the upper one."""
    b = _BOUND_RE.search(before)
    word = b.group(1).lower() if b else ""
    if word in ("since", "after"):
        return (until if word == "after" else since), None
    if word in ("before", "until"):
        return None, since
    return since, until


def _month_start(year: int, month: int) -> datetime:
    year += (month - 1) // 12
    return datetime(year, (month - 1) % 12 + 1, 1, tzinfo=UTC)


def _month_num(name: str) -> int:
    return next(i for i, m in enumerate(_MONTHS, 1) if m.startswith(name.lower().rstrip(".")[:3]))


def _month_year(m: re.Match, now: datetime) -> tuple[datetime, datetime]:
    month, year = _month_num(m.group("m")), int(m.group("y"))
    return _month_start(year, month), _month_start(year, month + 1)


def _season(m: re.Match, now: datetime) -> tuple[datetime, datetime]:
    name = (m.group("s") or m.group("s2")).lower()
    lo, hi = _SEASONS[name]
    if m.group("y"):
        year = int(m.group("y"))
    else:  # "last summer": the latest one that has ended; "this summer": this year's
        year = now.year
        if m.group("rel").lower() in ("last", "past") and _month_start(year, hi) > now:
            year -= 1
    if name == "winter":  # December of the year before to February
        year -= 1 if m.group("y") or now.month < 12 else 0
    return _month_start(year, lo), _month_start(year, hi)


def _period(m: re.Match, now: datetime) -> tuple[datetime, datetime]:
    unit, back = m.group("u").lower(), m.group("rel").lower() != "this"
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "week":
        start = day - timedelta(days=day.weekday()) - (timedelta(days=7) if back else timedelta(0))
        return start, start + timedelta(days=7)
    if unit == "month":
        start = _month_start(now.year, now.month - (1 if back else 0))
        return start, _month_start(start.year, start.month + 1)
    year = now.year - (1 if back else 0)
    return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)


def _parse(text: str, now: datetime) -> datetime | None:
    """``dateparser`` on one phrase, relative to ``now``, preferring the past."""
    import dateparser  # only for a question that holds a date cue

    got = dateparser.parse(text, languages=["en"], settings={
        "RELATIVE_BASE": now.replace(tzinfo=None), "PREFER_DATES_FROM": "past", "RETURN_AS_TIMEZONE_AWARE": False})
    return got.replace(tzinfo=UTC) if got else None


def _ago(m: re.Match, now: datetime) -> tuple[datetime, datetime] | None:
    """"two weeks ago": one unit either side of the point dateparser finds."""
    n = re.sub(r"^(a few|a couple of)$", lambda x: "3" if x.group(1) == "a few" else "2", m.group("n").lower())
    point = _parse(f"{n} {m.group('u')} ago", now)
    if point is None:
        return None
    unit = m.group("u").lower().rstrip("s")
    width = {"day": timedelta(days=1), "week": timedelta(days=7), "month": timedelta(days=31),
             "year": timedelta(days=366)}[unit]
    return point - width, point + width


def _yesterday(m: re.Match, now: datetime) -> tuple[datetime, datetime] | None:
    point = _parse(m.group(0), now)
    if point is None:
        return None
    day = point.replace(hour=0, minute=0, second=0, microsecond=0)
    return day, day + timedelta(days=1)


def _year(m: re.Match, now: datetime) -> tuple[datetime, datetime]:
    y = int(m.group("y"))
    return datetime(y, 1, 1, tzinfo=UTC), datetime(y + 1, 1, 1, tzinfo=UTC)


def _month(m: re.Match, now: datetime) -> tuple[datetime, datetime] | None:
    """"in May": the latest May that has begun (dateparser, preferring the past)."""
    point = _parse(m.group("m"), now)
    if point is None:
        return None
    start = _month_start(point.year, point.month)
    return start, _month_start(start.year, start.month + 1)


_RESOLVE = {"month_year": _month_year, "season": _season, "period": _period, "ago": _ago,
            "yesterday": _yesterday, "year": _year, "month": _month, "event": lambda m, now: None}
