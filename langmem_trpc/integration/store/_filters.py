"""Filters and namespace conditions of `MemoryStore` (InMemoryStore's semantics)."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from ...errors import InvalidInputError

_ORDER = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}
_OPERATORS = ("$eq", "$ne", *_ORDER)


def _number(value: Any) -> int | float | None:
    """A number to order by: ints stay exact (one beyond float range still compares),
    booleans are 0 and 1 as in `InMemoryStore`, numeric text is read as a number."""
    if isinstance(value, (int, float)):
        return int(value) if isinstance(value, bool) else value
    if not isinstance(value, str):
        return None
    try:
        return int(value)
    except ValueError:  # not an integer (or too many digits to read as one)
        pass
    try:
        return float(value)
    except ValueError:  # text that is not a number
        return None


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op not in _ORDER:
        raise InvalidInputError(
            "filter", f"unsupported operator {op!r}; use one of {list(_OPERATORS)}"
        )
    left, right = _number(value), _number(operand)
    if left is not None and right is not None:
        return bool(_ORDER[op](left, right))
    # compare numbers as numbers, text as text, never mixed
    return isinstance(value, str) and isinstance(operand, str) and bool(_ORDER[op](value, operand))


def _compare(value: Any, condition: Any) -> bool:
    if isinstance(condition, Mapping):
        if any(str(k).startswith("$") for k in condition):
            return all(_operator(value, op, operand) for op, operand in condition.items())
        return isinstance(value, Mapping) and all(
            _compare(value.get(k), v) for k, v in condition.items()
        )
    if isinstance(condition, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(condition)
            and all(_compare(v, c) for v, c in zip(value, condition, strict=False))
        )
    return bool(value == condition)


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """InMemoryStore's filter semantics, except that ordering operators compare
    numbers numerically and strings lexically and never raise on mixed types."""
    return not filter or all(_compare(value.get(k), c) for k, c in filter.items())


def matches_condition(condition: Any, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = (
        zip(namespace, path, strict=False)
        if condition.match_type == "prefix"
        else zip(reversed(namespace), reversed(path), strict=False)
    )
    return all(p == "*" or n == p for n, p in pairs)
