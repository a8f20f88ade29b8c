"""Write an integration's logic once, run it sync or async: plans over a `MemoryService`.

A plan is a generator that yields `Call`s, is sent each result (or has the
call's exception thrown in at its `yield`) and returns the operation's result;
`drive` runs it on `service.<method>`, `adrive` on `service.a<method>`, so the
sync and async twins of a tool, a retriever or the preload cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """One service call: `service.<method>(*args, **kwargs)` (or its `a` twin)."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


Plan = Generator[Call, Any, T]


def each(calls: Iterable[Call]) -> Plan[list[Any]]:
    """Make `calls` one after another; their results, in order."""
    results = []
    for call in calls:
        results.append((yield call))
    return results


def drive(service: Any, plan: Plan[T]) -> T:
    """Run `plan` to its end with the service's sync methods."""
    result, error = None, None
    try:
        while True:
            call = plan.send(result) if error is None else plan.throw(error)
            try:
                result, error = getattr(service, call.method)(*call.args, **call.kwargs), None
            except Exception as exc:
                result, error = None, exc
    except StopIteration as done:
        value: T = done.value
        return value


async def adrive(service: Any, plan: Plan[T]) -> T:
    """`drive` with the service's async twins (`a` + method): no thread, no blocking."""
    result, error = None, None
    try:
        while True:
            call = plan.send(result) if error is None else plan.throw(error)
            try:
                method = getattr(service, "a" + call.method)
                result, error = await method(*call.args, **call.kwargs), None
            except Exception as exc:
                result, error = None, exc
    except StopIteration as done:
        value: T = done.value
        return value
