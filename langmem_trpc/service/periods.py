"""Dates and months in queries and memory texts, per language: the periods a
query names ("in July 2023", "on 3 June") and whether a text says a time. The
search's time and "when" signals (`search.py`) read them."""

from __future__ import annotations

import re
import threading
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import NamedTuple

from .language import ENGLISH, Language

__all__ = [
    "TIME_MENTIONS_MAX",
    "Period",
    "Span",
    "TimeMentions",
    "implied_spans",
    "overlaps",
    "query_periods",
    "says_time",
]

_ORD = r"(\d{1,2})(?:st|nd|rd|th)?"
_Groups = tuple[int | None, int | None, int | None]


@lru_cache(maxsize=16)
def _date_forms(language: Language) -> tuple[tuple[re.Pattern[str], _Groups], ...]:
    """The absolute date shapes a query can name (ISO dates and years, plus the
    language's month names), each with the match groups of its year, month and day
    (None: unsaid). Memoised: a constant per frozen `Language`, holding no user data."""
    forms: list[tuple[re.Pattern[str], _Groups]] = [
        (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), (0, 1, 2))
    ]
    if language.month_names:
        months = "|".join(
            f"{re.escape(m[:3])}(?:{re.escape(m[3:])})?" if len(m) > 3 else re.escape(m)
            for m in language.month_names
        )
        month = rf"({months}|sept)" if language is ENGLISH else rf"({months})"
        forms += [
            (re.compile(rf"\b{_ORD}\s+(?:of\s+)?{month}\.?,?\s+(\d{{4}})\b", re.I), (2, 1, 0)),
            (re.compile(rf"\b{month}\.?\s+{_ORD},?\s+(\d{{4}})\b", re.I), (2, 0, 1)),
            (re.compile(rf"\b{month}\.?,?\s+(?:of\s+)?(\d{{4}})\b", re.I), (1, 0, None)),
        ]
    forms.append((re.compile(r"\b(19\d\d|20\d\d)\b"), (0, None, None)))
    if language.month_names:
        names = "|".join(re.escape(m.capitalize()) for m in language.month_names)
        forms.append((re.compile(rf"\b({names})\b"), (None, 0, None)))
    return tuple(forms)


class Period(NamedTuple):
    """A calendar period a query names: year, month and day, each None when unsaid."""

    year: int | None
    month: int | None
    day: int | None

    def contains(self, when: datetime) -> bool:
        if self.day is not None and self.year is not None and self.month is not None:
            try:
                target = datetime(self.year, self.month, self.day, tzinfo=when.tzinfo)
            except ValueError:
                return False
            return abs((when - target).total_seconds()) <= 36 * 3600
        if self.year is not None and when.year != self.year:
            return False
        return self.month is None or when.month == self.month


def period_span(period: Period) -> tuple[datetime, datetime] | None:
    """The UTC instants `period` covers, first and last (a day: the 36 hours either side
    that `Period.contains` allows); None for a period without a year ("in July")."""
    year, month, day = period
    if year is None:
        return None
    try:
        if day is not None and month is not None:
            at = datetime(year, month, day, tzinfo=timezone.utc)
            return at - timedelta(hours=36), at + timedelta(hours=36)
        if month is None:
            start, end = datetime(year, 1, 1), datetime(year + 1, 1, 1)
        else:
            start = datetime(year, month, 1)
            end = datetime(year + month // 12, month % 12 + 1, 1)
    except (ValueError, OverflowError):  # out of the calendar (day 31 of June, year 9999)
        return None
    utc = timezone.utc
    return start.replace(tzinfo=utc), end.replace(tzinfo=utc) - timedelta(microseconds=1)


def query_periods(query: str, language: Language = ENGLISH) -> list[Period]:
    """Calendar periods a question names ("May 2023", "on 3 June, 2023", "in 2022", "in July").

    Absolute dates only: relative ones ("last year") have no anchor a
    search can trust (the question's time is not the memories' time). A lone
    month must be capitalised, so the verb "may" is not a month. Month names
    come from the language.
    """
    periods: list[Period] = []
    rest = query
    for pattern, (year, month, day) in _date_forms(language):
        for match in pattern.finditer(rest):
            g = match.groups()
            periods.append(
                Period(
                    None if year is None else int(g[year]),
                    None if month is None else _month(g[month], language),
                    None if day is None else int(g[day]),
                )
            )
        rest = pattern.sub(" ", rest)
    return periods


def _month(name: str, language: Language) -> int:
    if name.isdigit():
        return int(name)
    return [month[:3] for month in language.month_names].index(name.lower()[:3]) + 1


_WORD = re.compile(r"[^\W\d_]+")
_YEAR = re.compile(r"(?<!\d)(?:19|20)\d\d(?!\d)")


def says_time(text: str, language: Language = ENGLISH) -> bool:
    """A time word of the language ("yesterday", "last", "May", "Sunday") or a year
    1900-2099 in the text (`TimeMentions` remembers the answers per text)."""
    lowered = text.lower()
    return (
        not language.time_words.isdisjoint(_WORD.findall(lowered))
        or _YEAR.search(lowered) is not None
    )


TIME_MENTIONS_MAX = 8192
"""Texts one `TimeMentions` remembers (oldest first out)."""


class TimeMentions:
    """`says_time` of memory texts under one language, remembered: the same memories come
    back as candidates search after search, and the regexes cost ~5 us a text.

    Each service owns one (bounded by `max_texts`), so no memory text outlives
    the service in a process-wide cache; `clear()` forgets every text.
    """

    def __init__(self, language: Language = ENGLISH, max_texts: int = TIME_MENTIONS_MAX) -> None:
        self.language = language
        self._max = max_texts
        self._items: dict[str, bool] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def __call__(self, text: str) -> bool:
        said = self._items.get(text)
        if said is None:
            said = says_time(text, self.language)
            with self._lock:
                while self._items and len(self._items) >= self._max:
                    del self._items[next(iter(self._items))]
                if self._max > 0:
                    self._items[text] = said
        return said

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_COUNTS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a few": 3,
}
_UNITS = r"(day|week|weekend|month|year)s?"
_AGO = re.compile(
    rf"\b(\d{{1,2}}|{'|'.join(sorted(_COUNTS, key=len, reverse=True))})\s+{_UNITS}\s+ago\b",
    re.I,
)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_LAST = re.compile(
    rf"\b(yesterday|last night|last (?:week|weekend|month|year|{'|'.join(_WEEKDAYS)}))\b", re.I
)
Span = tuple[datetime, datetime]
"""A stretch of time, both ends included."""


def _months_back(when: datetime, months: int) -> Span:
    """The calendar month `months` before the one of `when`, as a span of its days."""
    index = when.year * 12 + when.month - 1 - months
    start = when.replace(year=index // 12, month=index % 12 + 1, day=1)
    following = index + 1
    end = start.replace(year=following // 12, month=following % 12 + 1) - timedelta(days=1)
    return start, end


def _ago(count: int, unit: str, said: datetime) -> Span:
    """The span "`count` `unit`s ago" names, said at `said`."""
    if unit == "day":
        return said - timedelta(days=count + 1), said - timedelta(days=max(count - 1, 0))
    if unit in ("week", "weekend"):
        middle = said - timedelta(days=7 * count)
        return middle - timedelta(days=4), middle + timedelta(days=4)
    if unit == "month":
        return _months_back(said, count)
    year = said.year - count
    return said.replace(year=year, month=1, day=1), said.replace(year=year, month=12, day=31)


def _last(phrase: str, said: datetime) -> Span:
    """The span "yesterday", "last night" or "last <week|weekend|month|year|weekday>" names."""
    word = phrase.split()[-1]
    if word in ("yesterday", "night"):
        return _ago(1, "day", said)
    if word == "month":
        return _months_back(said, 1)
    if word == "year":
        return _ago(1, "year", said)
    days = 9 if word == "weekend" else 14 if word == "week" else 7
    return said - timedelta(days=days), said - timedelta(days=1)


def implied_spans(text: str, said: datetime, language: Language = ENGLISH) -> list[Span]:
    """When what a text tells happened, counted back from when it was said: "yesterday",
    "last week", "two weekends ago", "last month", "a year ago" (English only: the
    relative forms are not yet part of `Language`; other languages get none). A memory's
    event time is when it was said (a turn's session date); the event it tells can be
    earlier, and a question naming a period asks about the event."""
    if language is not ENGLISH or ("ago" not in text and not _LAST.search(text)):
        return []
    spans = [_last(m.group(1).lower(), said) for m in _LAST.finditer(text)]
    for match in _AGO.finditer(text):
        amount = match.group(1).lower()
        count = int(amount) if amount.isdigit() else _COUNTS[amount]
        spans.append(_ago(count, match.group(2).lower(), said))
    return spans


def overlaps(period: Period, span: Span) -> bool:
    """Whether a span of time meets a period (a named day: within 36 hours of it)."""
    start, end = span
    if period.day is not None and period.year is not None and period.month is not None:
        try:
            target = datetime(period.year, period.month, period.day, tzinfo=start.tzinfo)
        except ValueError:
            return False
        window = timedelta(hours=36)
        return start <= target + window and end >= target - window
    index, last = start.year * 12 + start.month - 1, end.year * 12 + end.month - 1
    while index <= last:
        if period.contains(start.replace(year=index // 12, month=index % 12 + 1, day=1)):
            return True
        index += 1
    return False
