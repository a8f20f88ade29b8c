"""Filters and namespace conditions of `MemoryStore` (InMemoryStore's semantics)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import InvalidInputError

__all__ = ["matches", "matches_condition"]

_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op not in _OPERATORS:
        raise InvalidInputError(
            "filter", f"unsupported operator {op!r}; use one of {list(_OPERATORS)}"
        )
    left, right = _number(value), _number(operand)
    if left is None or right is None:  # compare numbers as numbers, text as text, never mixed
        if not (isinstance(value, str) and isinstance(operand, str)):
            return False
        left_s, right_s = value, operand
        return {
            "$gt": left_s > right_s,
            "$gte": left_s >= right_s,
            "$lt": left_s < right_s,
            "$lte": left_s <= right_s,
        }[op]
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right, "$lte": left <= right}[
        op
    ]


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
