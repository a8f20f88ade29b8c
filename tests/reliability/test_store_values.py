"""MemoryStore values, fuzzed on every backend (issue #31.12).

Hypothesis builds values with the inputs that found the defects: integers far
beyond float range (either sign), numeric strings of hundreds of digits,
booleans, floats at the edge of their range, wide dicts near and past the key
bound, strings near and past the byte bound. The properties: a put either
stores the value exactly or raises `InvalidMemoryError` naming `value` and
leaves the user's items untouched; ordering filters on any field never raise
and agree with an exact-arithmetic model of LangGraph's semantics.
"""

from __future__ import annotations

import operator
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langmem_trpc import MemoryStore, UserKey
from langmem_trpc.errors import InvalidMemoryError
from langmem_trpc.integration.store._values import normalize_value

from .conftest import Factory

NS = ("fuzz", "user")
MAX_BYTES, MAX_KEYS = 4_000, 60

numbers = st.one_of(
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),
    st.integers(min_value=-(10**400), max_value=-(10**300)),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.integers(min_value=10**308, max_value=10**310).map(str),
    st.sampled_from(["1e400", "-1e400", "12", "3.5", "abc", ""]),
)
values = st.fixed_dictionaries(
    {"memory": st.text(min_size=1, max_size=20).filter(str.strip), "n": numbers},
    optional={
        "wide": st.dictionaries(st.text(max_size=4), st.integers(), max_size=MAX_KEYS + 10),
        "pad": st.integers(0, MAX_BYTES + 200).map(lambda n: "p" * n),
    },
)
operators = st.sampled_from(["$gt", "$gte", "$lt", "$lte"])
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_ORDER = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}


def _exact(value: Any) -> Fraction | str | None:
    """The model: numbers (booleans as 0/1, numeric text) compared exactly, text as text."""
    if isinstance(value, bool):
        return Fraction(int(value))
    if isinstance(value, (int, float)):
        return Fraction(value)
    if isinstance(value, str):
        try:
            return Fraction(int(value))
        except ValueError:
            pass
        try:
            as_float = float(value)
        except ValueError:
            return value
        if as_float in (float("inf"), float("-inf")):
            return None  # infinite: compared by the store, not by this model
        return Fraction(as_float)
    return None


def _expected(stored: Any, op: str, operand: Any) -> bool | None:
    left, right = _exact(stored), _exact(operand)
    if isinstance(stored, str) and isinstance(operand, str):
        if isinstance(left, str) or isinstance(right, str):
            return bool(_ORDER[op](stored, operand))  # text that is not a number: as text
    if left is None or right is None:
        return None
    if isinstance(left, Fraction) != isinstance(right, Fraction):
        return False  # numbers and text never compare
    return bool(_ORDER[op](left, right))


@FUZZ
@given(items=st.lists(values, min_size=1, max_size=4), op=operators, operand=numbers)
def test_values_store_exactly_or_refuse_and_filters_never_raise(
    make_service: Factory, items: list[dict[str, Any]], op: str, operand: Any
) -> None:
    store = MemoryStore(make_service(), max_value_bytes=MAX_BYTES, max_value_keys=MAX_KEYS)
    kept: dict[str, dict[str, Any]] = {}
    for index, value in enumerate(items):
        key = f"k{index}"
        try:
            store.put(NS, key, value)
        except InvalidMemoryError as exc:
            assert exc.field == "value"  # a bound, NUL, lone surrogate: said, nothing stored
            assert store.get(NS, key) is None
            continue
        kept[key] = value = normalize_value(value)  # floats of 1e16+ as PostgreSQL keeps them
        assert store.get(NS, key).value == value
    assert store.service.count(UserKey(*NS)) == len(kept)
    found = {i.key for i in store.search(NS, filter={"n": {op: operand}}, limit=10)}
    for key, value in kept.items():
        expected = _expected(value["n"], op, operand)
        if expected is not None:
            assert (key in found) == expected, (value["n"], op, operand)


@pytest.mark.parametrize("size", [MAX_BYTES + 1, 30_000_000])
def test_oversized_values_are_refused_before_any_work(make_service: Factory, size: int) -> None:
    store = MemoryStore(make_service(), max_value_bytes=MAX_BYTES)
    with pytest.raises(InvalidMemoryError, match="max_value_bytes"):
        store.put(NS, "k", {"memory": "x" * size})
    with pytest.raises(InvalidMemoryError, match="max_value_keys"):
        MemoryStore(store.service).put(
            NS, "k", {"memory": "m", "meta": dict.fromkeys(map(str, range(20_000)), 0)}
        )
    assert store.search(NS) == []


def test_a_text_field_that_shows_nothing_is_not_the_memory_text(
    make_service: Factory,
) -> None:
    """A value whose text field holds only invisible characters (a soft hyphen, found by
    the fuzz test above) is stored: its searchable text is the value's JSON, as for a
    value without a text field, instead of a refusal naming the service's `text`."""
    store = MemoryStore(make_service(), max_value_bytes=MAX_BYTES, max_value_keys=MAX_KEYS)
    for key, value in {"a": {"memory": "\xad", "n": 0}, "b": {"memory": "\u200b\u2060"}}.items():
        store.put(NS, key, value)
        assert store.get(NS, key).value == value
    store.put(NS, "c", {"text": "\xad"}, index=["text"])
    assert store.get(NS, "c").value == {"text": "\xad"}
