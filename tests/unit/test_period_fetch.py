"""`FusionSettings.period_fetch`'s parts: the span of a named period, the search
options limited to it, and the merge of two fetches' legs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from langmem_trpc.service.first_tier import merge_legs, period_options
from langmem_trpc.service.periods import Period, period_span
from langmem_trpc.service.search import Legs
from langmem_trpc.types import Entry, Memory, SearchOptions

UTC = timezone.utc
T0 = datetime(2024, 1, 1, tzinfo=UTC)
LAST = timedelta(microseconds=1)


@pytest.mark.parametrize(
    ("period", "span"),
    [
        (
            Period(2023, 5, None),
            (datetime(2023, 5, 1, tzinfo=UTC), datetime(2023, 6, 1, tzinfo=UTC)),
        ),
        (
            Period(2023, 12, None),
            (datetime(2023, 12, 1, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC)),
        ),
        (
            Period(2022, None, None),
            (datetime(2022, 1, 1, tzinfo=UTC), datetime(2023, 1, 1, tzinfo=UTC)),
        ),
    ],
)
def test_a_month_or_year_spans_its_calendar_instants(period, span) -> None:
    assert period_span(period) == (span[0], span[1] - LAST)


def test_a_day_spans_what_contains_allows_and_unbounded_periods_span_nothing() -> None:
    day = datetime(2023, 6, 3, tzinfo=UTC)
    start, end = period_span(Period(2023, 6, 3))  # type: ignore[misc]
    assert (start, end) == (day - timedelta(hours=36), day + timedelta(hours=36))
    assert Period(2023, 6, 3).contains(start) and Period(2023, 6, 3).contains(end)
    assert period_span(Period(None, 7, None)) is None  # "in July": any year
    assert period_span(Period(2023, 6, 31)) is None  # no such day
    assert period_span(Period(9999, 12, None)) is None  # past the calendar's end


def test_options_are_limited_to_every_period_the_query_names() -> None:
    options = SearchOptions(query="What did Ann do in May 2023 and in July 2023?")
    limited = period_options(options)
    assert limited is not None and limited.query == options.query
    assert limited.time_after == datetime(2023, 5, 1, tzinfo=UTC)
    assert limited.time_before == datetime(2023, 8, 1, tzinfo=UTC) - LAST


def test_the_searchs_own_range_still_holds() -> None:
    inside = SearchOptions(query="in May 2023", time_after=datetime(2023, 5, 10, tzinfo=UTC))
    limited = period_options(inside)
    assert limited is not None and limited.time_after == datetime(2023, 5, 10, tzinfo=UTC)
    outside = SearchOptions(query="in May 2023", time_before=datetime(2023, 1, 1, tzinfo=UTC))
    assert period_options(outside) is None


@pytest.mark.parametrize("query", ["What did Ann paint?", "What did Ann do in July?", ""])
def test_no_options_without_a_dated_period(query: str) -> None:
    assert period_options(SearchOptions(query=query)) is None


def _entry(key: str) -> Entry:
    return Entry(
        id=key, app_name="a", user_id="u", memory=Memory(text=key), created_at=T0, updated_at=T0
    )


def test_merged_legs_hold_each_candidate_once_with_its_best_score() -> None:
    a, b, c = _entry("a"), _entry("b"), _entry("c")
    first = Legs([(a, 0.9), (b, 0.5)], [(a, 0.4)])
    other = Legs([(c, 0.7), (b, 0.6)], [(c, 0.8)])
    merged = merge_legs(first, other)
    assert [(e.id, s) for e, s in merged.vector or []] == [("a", 0.9), ("c", 0.7), ("b", 0.6)]
    assert [(e.id, s) for e, s in merged.keyword] == [("c", 0.8), ("a", 0.4)]
    assert merge_legs(Legs(None, []), Legs(None, [(a, 0.3)])) == Legs(None, [(a, 0.3)])
