"""Fuzzed API argument types: every backend gives the same answer, and only ours (#31.13).

Hypothesis draws the arguments the review found answered differently per backend or
with a raw error: `limit` of every type (bool, float, str, lists, big and negative
ints), `add_many` items (a str, bytes, a mapping, texts of invisible characters),
`set_expiry` values, `retry_dead_letter` ids with NUL and lone surrogates, and unknown
or ill-typed `SearchOptions` fields. The in-memory reference and SQLite must agree on
the outcome (the result, or the error's class and field), and any error must be an
`InvalidInputError` naming a field.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langmem_trpc import InMemoryMemoryService, UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.errors import InvalidInputError
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.types import SearchOptions

ALICE = UserKey("app", "alice")
_INVISIBLE = st.sampled_from(
    ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", " ", "\t", "\u3164"]
)
_ODD = st.sampled_from(["\x00", "\ud800", "\udfff", "\u2028", "x"])
_LIMITS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**31, 2**62, 2**63 - 1, 2**63, 2**64, 2**70, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.lists(st.integers(0, 3), max_size=2),
)
_TEXTS = st.one_of(
    st.text(_INVISIBLE, min_size=1, max_size=6),
    st.text(min_size=1, max_size=12),
    st.lists(st.one_of(_INVISIBLE, st.just("a")), min_size=1, max_size=6).map("".join),
)
_ITEMS = st.one_of(
    st.text(max_size=5),
    st.binary(max_size=5),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.integers(),
    st.lists(_TEXTS, max_size=3),
)
_EXPIRY = st.one_of(
    st.none(),
    st.sampled_from(["", " ", "2030-01-01", "2030-01-01T00:00:00+01:00", "9999-12-31T23:00-05:00"]),
    st.text(max_size=8),
    st.integers(),
    st.booleans(),
)
_OPTION_NAMES = st.sampled_from(
    ["as_of", "max_result", "limit", "k", "filter", "query", "max_results", "time_after", "kind"]
)
_OPTION_VALUES = st.one_of(st.none(), st.integers(-2, 2000), st.text(max_size=6), st.booleans())


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        result = call()
    except InvalidInputError as exc:
        assert exc.field, exc
        return (type(exc).__name__, exc.field)
    if isinstance(result, list):
        return [getattr(e, "text", e) for e in result]
    return getattr(result, "text", result)


def _calls(svc: MemoryService, args: dict[str, Any]) -> list[Any]:
    kept = svc.add(ALICE, "Lives in Oslo")
    svc.add(ALICE, "Likes tea")
    return [
        _outcome(lambda: len(svc.read(ALICE, args["limit"]))),
        _outcome(lambda: svc.expired(ALICE, args["limit"])),
        _outcome(lambda: svc.add(ALICE, args["text"])),
        _outcome(lambda: svc.add_many(ALICE, args["items"])),
        _outcome(lambda: svc.set_expiry(ALICE, kept.id, args["expiry"]) and "set"),
        _outcome(lambda: svc.retry_dead_letter(args["letter"])),
        _outcome(lambda: svc.dead_letters("app", limit=args["limit"])),
        _outcome(lambda: sorted(e.text for e in svc.read(ALICE))),
    ]


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    limit=_LIMITS,
    text=_TEXTS,
    items=_ITEMS,
    expiry=_EXPIRY,
    letter=st.lists(_ODD, min_size=1, max_size=4).map("".join),
)
def test_fuzzed_argument_types_get_one_answer_on_every_backend(
    tmp_path: Path, limit: Any, text: str, items: Any, expiry: Any, letter: str
) -> None:
    args = {"limit": limit, "text": text, "items": items, "expiry": expiry, "letter": letter}
    memory = InMemoryMemoryService()
    sqlite = SQLiteMemoryService(str(tmp_path / f"{uuid.uuid4().hex}.db"))
    try:
        assert _calls(memory, args) == _calls(sqlite, args)
    finally:
        sqlite.close()


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_OPTION_NAMES, _OPTION_VALUES, max_size=3))
def test_fuzzed_search_options_raise_only_our_field_errors(fields: dict[str, Any]) -> None:
    try:
        options = SearchOptions(**fields)
    except InvalidInputError as exc:
        assert exc.field.split(".")[0] in fields, exc
        return
    assert set(fields) <= set(SearchOptions.model_fields)
    assert 1 <= options.max_results <= 1000
