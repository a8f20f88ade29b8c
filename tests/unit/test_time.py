from datetime import datetime, timezone

import pytest

from langmem_trpc._time import end_of_period, parse_flexible_time, parse_time_or_raise
from langmem_trpc.errors import InvalidTimeError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2023-05-08", datetime(2023, 5, 8, tzinfo=timezone.utc)),
        ("2023-05-08T10:30:00Z", datetime(2023, 5, 8, 10, 30, tzinfo=timezone.utc)),
        ("2023-05-08T10:30:00+02:00", datetime(2023, 5, 8, 8, 30, tzinfo=timezone.utc)),
        ("8 May 2023", datetime(2023, 5, 8, tzinfo=timezone.utc)),
        ("May 8, 2023", datetime(2023, 5, 8, tzinfo=timezone.utc)),
        ("May 2023", datetime(2023, 5, 1, tzinfo=timezone.utc)),
        ("2023", datetime(2023, 1, 1, tzinfo=timezone.utc)),
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)),
    ],
)
def test_parse_flexible_time(text, expected):
    assert parse_flexible_time(text) == expected


def test_unparseable_is_none():
    assert parse_flexible_time("next tuesday-ish") is None
    assert parse_flexible_time("") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2023", datetime(2023, 12, 31, 23, 59, 59, tzinfo=timezone.utc)),
        ("2024-02", datetime(2024, 2, 29, 23, 59, 59, tzinfo=timezone.utc)),
        ("May 2023", datetime(2023, 5, 31, 23, 59, 59, tzinfo=timezone.utc)),
        ("2023-05-08", datetime(2023, 5, 8, 23, 59, 59, tzinfo=timezone.utc)),
        ("2023-05-08T10:00:00Z", datetime(2023, 5, 8, 10, tzinfo=timezone.utc)),
    ],
)
def test_end_of_period(text, expected):
    assert end_of_period(text) == expected


def test_naive_datetime_is_rejected_with_the_field_name():
    with pytest.raises(InvalidTimeError) as info:
        parse_time_or_raise(datetime(2024, 1, 1), "event_time")
    assert info.value.field == "event_time"
