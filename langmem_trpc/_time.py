"""Time parsing shared by the model, the tools and the extractor.

Models and users write dates in many shapes ("2023-05-08", "May 2023",
"8 May 2023"). Zone-less inputs are read as UTC; results are always
timezone-aware UTC. Every conversion to UTC goes through `to_utc`, so an
instant outside `datetime`'s years 1-9999 once in UTC ("9999-12-31T23:00-05:00")
is an `InvalidTimeError` naming the field, never a raw `OverflowError`.
"""

from __future__ import annotations

import calendar
import re
from datetime import datetime, timedelta, timezone

from .errors import InvalidTimeError

_LAYOUTS = (
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d",
    "%Y/%m/%d",
    "%d %B %Y",
    "%B %d, %Y",
    "%B %d %Y",
    "%b %d, %Y",
    "%b %d %Y",
    "%d %b %Y",
    "%B %Y",
    "%b %Y",
    "%Y-%m",
    "%Y",
)
_MONTH_LAYOUTS = frozenset({"%B %Y", "%b %Y", "%Y-%m"})
_CLOCK_ON_DATE = re.compile(r"^(\d{1,2}:\d{2}\s*[ap]m)\s+on\s+(.+)$", re.IGNORECASE)


def wall_clock() -> datetime:
    """The wall clock every memory service stamps writes with (`service.rules.utcnow`).

    The one seam for time: a test replaces it (`monkeypatch.setattr`) to make
    the clock jump or step backwards. Orders that must survive such a step
    (capacity eviction) do not read it.
    """
    return datetime.now(timezone.utc)


OUT_OF_RANGE = "is outside the supported dates (years 1-9999 in UTC)"
"""The problem an `InvalidTimeError` states for an instant `datetime` cannot hold in UTC."""


def to_utc(value: datetime, field: str = "time") -> datetime:
    """An aware `value` in UTC; an offset that pushes it past year 9999 or before
    year 1 is an `InvalidTimeError` naming `field` (Python raises `OverflowError`)."""
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise InvalidTimeError(field, f"{value.isoformat()!r} {OUT_OF_RANGE}") from None


def ensure_utc(value: datetime, field: str = "time") -> datetime:
    """Return `value` in UTC; a naive datetime is an error, never a guess."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidTimeError(field, "must be timezone-aware (got a naive datetime)")
    return to_utc(value, field)


def _parse_with_layout(text: str) -> tuple[datetime, str] | None:
    cleaned = text.replace(",", ", ").replace(",  ", ", ").strip()
    for candidate in (text, cleaned):
        for layout in _LAYOUTS:
            try:
                return datetime.strptime(candidate, layout), layout
            except ValueError:
                continue
    return None


def _parse_layouts(text: str) -> datetime | None:
    """`text` in one of `_LAYOUTS`, or a clock time on one ("1:56 pm on 8 May, 2023")."""
    clock = _CLOCK_ON_DATE.match(text)
    if clock is None:
        found = _parse_with_layout(text)
        return None if found is None else found[0]
    day = _parse_with_layout(clock.group(2).replace(",", "").strip())
    try:
        t = datetime.strptime(clock.group(1).replace(" ", "").upper(), "%I:%M%p")
    except ValueError:
        return None
    return None if day is None else day[0].replace(hour=t.hour, minute=t.minute)


def parse_flexible_time(text: str | None, field: str = "time") -> datetime | None:
    """Parse ISO 8601 and common human date layouts; None when unparseable.

    A parsed instant outside years 1-9999 in UTC is an `InvalidTimeError` naming `field`.
    """
    if text is None or not (text := text.strip()):
        return None
    iso = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        parsed: datetime | None = datetime.fromisoformat(iso)
    except ValueError:
        parsed = _parse_layouts(text)
    if parsed is None:
        return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=timezone.utc)
    return to_utc(parsed, field)


def parse_time_or_none(text: str | None) -> datetime | None:
    """`parse_flexible_time`, None also for an instant outside years 1-9999: for hints
    (a message's own timestamp) that are better dropped than fatal to a job."""
    try:
        return parse_flexible_time(text)
    except InvalidTimeError:
        return None


def parse_time_or_raise(value: object, field: str) -> datetime | None:
    """Accept an aware datetime, a parseable string or None; raise naming `field` otherwise."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return ensure_utc(value, field)
    if isinstance(value, str):
        if not value.strip():
            return None
        parsed = parse_flexible_time(value, field)
        if parsed is None:
            raise InvalidTimeError(field, f"cannot parse {value[:64]!r} as a date or time")
        return parsed
    raise InvalidTimeError(field, f"expected a datetime or string, got {type(value).__name__}")


def end_of_period(text: str, field: str = "time") -> datetime | None:
    """The last second of the period `text` names: a year, a month, or a day.

    Used for `time_before`: "2023" means up to Dec 31 2023 23:59:59 inclusive.
    A full datetime is returned unchanged; "9999-12-31" ends at 23:59:59 that day.
    """
    text = text.strip()
    start = parse_flexible_time(text, field)
    if start is None:
        return None
    if re.fullmatch(r"\d{4}", text):
        return start.replace(month=12, day=31, hour=23, minute=59, second=59)
    found = _parse_with_layout(text)
    if found is not None and found[1] in _MONTH_LAYOUTS:
        last = calendar.monthrange(start.year, start.month)[1]
        return start.replace(day=last, hour=23, minute=59, second=59)
    if start.hour == start.minute == start.second == 0 and ":" not in text and "T" not in text:
        return start.replace(hour=23, minute=59, second=59)
    return start


def until_or_raise(value: object, field: str = "valid_until") -> datetime | None:
    """The instant a period given as an end stops: `parse_time_or_raise`, except that a
    bare date, month or year means through its end ("2026-07-24" is midnight after July
    24), as a person saying "until July 24" means. A date-time is taken as it is."""
    at = parse_time_or_raise(value, field)
    if at is None or not isinstance(value, str):
        return at
    end = end_of_period(value, field)
    return at if end is None or end == at else end + timedelta(seconds=1)
