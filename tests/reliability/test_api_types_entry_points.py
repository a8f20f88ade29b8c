"""Bad dates, limits, ids and texts get the same field error on every backend (#31.7, #31.13).

Each case once raised a raw `OverflowError`, `TypeError`, `AttributeError`, a pydantic
`ValidationError`, a `BackendError` on PostgreSQL only, or was silently accepted.
Every backend is real; each call is made sync and async, and nothing is written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from langmem_trpc import InMemoryMemoryService, UserKey
from langmem_trpc.errors import InvalidInputError, InvalidMemoryError, InvalidTimeError
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.types import FusionSettings, SearchOptions

ALICE = UserKey("app", "alice")
#: Instants `datetime` cannot hold once in UTC: an offset pushes them past 9999 or before 1.
OUT_OF_RANGE = [
    "9999-12-31T23:00:00-05:00",
    "9999-12-31T23:59:59-00:01",
    "0001-01-01T00:30:00+01:00",
    datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))),
    datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=3))),
]
#: Zero-width and other invisible characters only: no text at all.
INVISIBLE = ["\u200b", "\u200b\u200c\u200d\u2060\ufeff", " \u200b\t\u00ad ", "\u3164", "\ufe0f"]


BACKENDS = ["memory", "sqlite", "lancedb", pytest.param("postgres", marks=pytest.mark.postgres)]
LOOP = asyncio.new_event_loop()
"""One loop for every async call: PostgreSQL's async pool is bound to the loop that opened it."""


def run(result: Any) -> Any:
    return LOOP.run_until_complete(result) if asyncio.iscoroutine(result) else result


@pytest.fixture(params=BACKENDS)
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryService]:
    svc: MemoryService
    if request.param == "memory":
        svc = InMemoryMemoryService(embeddings=HashingEmbeddings())
    elif request.param == "sqlite":
        from langmem_trpc.backends.sqlite import SQLiteMemoryService

        svc = SQLiteMemoryService(str(tmp_path / "m.db"), embeddings=HashingEmbeddings())
    elif request.param == "lancedb":
        pytest.importorskip("lancedb")
        from langmem_trpc.backends.lancedb import LanceDBMemoryService

        svc = LanceDBMemoryService(tmp_path / "lance", HashingEmbeddings())
    else:
        from langmem_trpc.backends.postgres import PostgresMemoryService

        svc = PostgresMemoryService(request.getfixturevalue("pg_url"), HashingEmbeddings())
        svc.setup()
    yield svc
    run(svc.aclose())


def both(service: MemoryService, name: str, *args: Any, **kwargs: Any) -> list[BaseException]:
    """The errors of the sync and the async twin of `name` (each must raise)."""
    errors: list[BaseException] = []
    for method in (getattr(service, name), getattr(service, "a" + name)):
        try:
            run(method(*args, **kwargs))
        except Exception as exc:
            errors.append(exc)
        else:
            pytest.fail(f"{name}{args!r} {kwargs!r} was accepted")
    return errors


def assert_field_error(errors: list[BaseException], kind: type[Exception], field: str) -> None:
    for exc in errors:
        assert type(exc) is kind, repr(exc)
        assert isinstance(exc, InvalidInputError) and exc.field == field, repr(exc)


def live(service: MemoryService) -> list[str]:
    return [e.text for e in service.read(ALICE)]


# -- item 7: out-of-range dates ---------------------------------------------------


@pytest.mark.parametrize("when", OUT_OF_RANGE, ids=str)
def test_an_out_of_range_date_is_a_field_error_at_every_entry_point(
    service: MemoryService, when: object
) -> None:
    kept = service.add(ALICE, "Lives in Oslo")
    assert_field_error(
        both(service, "add", ALICE, "Party", kind="episode", event_time=when),
        InvalidTimeError,
        "event_time",
    )
    assert_field_error(
        both(service, "update", ALICE, kept.id, "Lives in Bergen", event_time=when),
        InvalidTimeError,
        "event_time",
    )
    assert_field_error(
        both(service, "set_expiry", ALICE, kept.id, when), InvalidTimeError, "expires_at"
    )
    for field in ("time_after", "time_before"):
        with pytest.raises(InvalidTimeError) as info:
            SearchOptions(**{field: when})
        assert info.value.field == field and "years 1-9999" in info.value.problem
    assert live(service) == ["Lives in Oslo"]
    assert service.get(ALICE, kept.id).expires_at is None  # type: ignore[union-attr]


def test_the_last_day_of_the_calendar_is_still_a_date(service: MemoryService) -> None:
    entry = service.add(ALICE, "Party", kind="episode", event_time="9999-12-31T23:59:59Z")
    assert entry.memory.event_time == datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
    found = service.search(ALICE, "party", SearchOptions(time_after="9999-12-31"))
    assert [e.id for e in found] == [entry.id]


# -- item 13: limits, set_expiry strings, add_many items, invisible texts ------------


@pytest.mark.parametrize("limit", [True, False, "5", 1.5, 2.0, [1], object()], ids=repr)
@pytest.mark.parametrize("method", ["read", "expired"])
def test_a_limit_that_is_not_an_integer_is_refused_on_every_backend(
    service: MemoryService, method: str, limit: object
) -> None:
    service.add(ALICE, "Lives in Oslo")
    assert_field_error(both(service, method, ALICE, limit), InvalidInputError, "limit")


@pytest.mark.parametrize("method", ["read", "aread"])
def test_integer_limits_keep_their_meaning(service: MemoryService, method: str) -> None:
    for text in ("one", "two", "three"):
        service.add(ALICE, text)

    def call(limit: object) -> int:
        return len(run(getattr(service, method)(ALICE, limit)))

    assert [call(n) for n in (None, 0, -1, 1, 2, 5)] == [3, 3, 3, 1, 2, 3]
    assert [call(n) for n in (2**63 - 1, 2**64, -(2**64))] == [3, 3, 3]  # SQL binds no more
    assert service.dead_letters("app", limit=2**64) == []


def test_set_expiry_takes_a_date_string_like_every_other_date(service: MemoryService) -> None:
    entry = service.add(ALICE, "Lives in Oslo")
    assert service.set_expiry(ALICE, entry.id, "2030-01-01")
    assert run(service.aset_expiry(ALICE, entry.id, "2030-01-02T00:00:00+01:00"))
    got = service.get(ALICE, entry.id)
    assert got is not None and got.expires_at == datetime(2030, 1, 1, 23, tzinfo=timezone.utc)
    for bad, problem in (("", "blank"), ("next tuesdayish", "cannot parse"), (3, "expected")):
        errors = both(service, "set_expiry", ALICE, entry.id, bad)
        assert_field_error(errors, InvalidTimeError, "expires_at")
        assert problem in str(errors[0])
    naive = both(service, "set_expiry", ALICE, entry.id, datetime(2030, 1, 1))
    assert_field_error(naive, InvalidTimeError, "expires_at")
    assert service.get(ALICE, entry.id).expires_at == got.expires_at  # type: ignore[union-attr]


@pytest.mark.parametrize("items", ["abc", b"abc", {"a": 1}, 42], ids=repr)
def test_add_many_refuses_what_is_not_a_list_of_memories(
    service: MemoryService, items: object
) -> None:
    assert_field_error(both(service, "add_many", ALICE, items), InvalidMemoryError, "items")
    assert live(service) == []


def test_add_many_still_takes_any_iterable_of_texts(service: MemoryService) -> None:
    entries = service.add_many(ALICE, (text for text in ("one", "two")))
    assert [e.text for e in entries] == ["one", "two"]


@pytest.mark.parametrize("text", INVISIBLE, ids=repr)
def test_a_text_of_only_invisible_characters_is_empty(service: MemoryService, text: str) -> None:
    kept = service.add(ALICE, "Lives in Oslo")
    assert_field_error(both(service, "add", ALICE, text), InvalidMemoryError, "text")
    assert_field_error(both(service, "add_many", ALICE, [text]), InvalidMemoryError, "text")
    assert_field_error(both(service, "update", ALICE, kept.id, text), InvalidMemoryError, "text")
    assert live(service) == ["Lives in Oslo"]


def test_a_text_with_a_zero_width_joiner_in_it_is_kept(service: MemoryService) -> None:
    assert service.add(ALICE, "\U0001f469\u200d\U0001f52c chemist").text.startswith("\U0001f469")


@pytest.mark.parametrize("letter_id", ["a\x00b", "\ud800", "x\udfff"], ids=repr)
def test_retry_dead_letter_refuses_an_id_no_backend_can_hold(
    service: MemoryService, letter_id: str
) -> None:
    assert_field_error(
        both(service, "retry_dead_letter", letter_id), InvalidInputError, "letter_id"
    )


# -- options models: our errors, unknown fields refused --------------------------


@pytest.mark.parametrize(
    ("fields", "field", "kind"),
    [
        ({"time_after": datetime(2024, 1, 1)}, "time_after", InvalidTimeError),
        ({"time_before": "not a date"}, "time_before", InvalidTimeError),
        ({"as_of": "not a date"}, "as_of", InvalidTimeError),
        ({"max_result": 3}, "max_result", InvalidInputError),
        ({"max_results": 0}, "max_results", InvalidInputError),
        ({"fusion": {"bogus": 1.0}}, "fusion.bogus", InvalidInputError),
        ({"fusion": {"min_pool": 0}}, "fusion.min_pool", InvalidInputError),
    ],
)
def test_search_options_raise_our_field_errors(
    fields: dict[str, Any], field: str, kind: type[Exception]
) -> None:
    with pytest.raises(kind) as info:
        SearchOptions(**fields)
    assert type(info.value) is kind and info.value.field == field  # type: ignore[attr-defined]


def test_fusion_settings_refuse_unknown_fields() -> None:
    with pytest.raises(InvalidInputError) as info:
        FusionSettings(context_weigth=0.5)
    assert info.value.field == "context_weigth" and "not an option" in info.value.problem
