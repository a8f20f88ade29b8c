"""When to extract: small predicates over the pending delta. A checker that says no is a
normal no-op (no extractor call, no write, the cursor stays: the messages accumulate).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from langchain_core.messages import BaseMessage

from ..errors import ConfigurationError
from ..types import UserKey

__all__ = [
    "Checker",
    "ExtractionContext",
    "check_message_threshold",
    "check_time_interval",
    "checks_all",
    "checks_any",
]


@dataclass(frozen=True)
class ExtractionContext:
    """What a checker sees: the user, the filtered delta and the last extraction time."""

    user: UserKey
    messages: Sequence[BaseMessage]
    last_extracted_at: datetime | None = None
    """When this thread was last extracted (UTC); None if never."""


Checker = Callable[[ExtractionContext], bool]


def check_message_threshold(n: int) -> Checker:
    """Extract once strictly more than `n` new messages are pending."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ConfigurationError(f"check_message_threshold needs an int >= 0, got {n!r}")
    return lambda context: len(context.messages) > n


def check_time_interval(
    interval: timedelta | float, *, clock: Callable[[], datetime] | None = None
) -> Checker:
    """Extract when the thread was never extracted, or more than `interval` (a timedelta or
    seconds) ago; `clock` returns the current UTC time (tests pass a fixed one)."""
    if not isinstance(interval, timedelta):
        interval = timedelta(seconds=float(interval))
    if interval < timedelta(0):
        raise ConfigurationError("check_time_interval needs a non-negative interval")
    now = clock or (lambda: datetime.now(timezone.utc))
    return lambda c: c.last_extracted_at is None or now() - c.last_extracted_at > interval


def checks_all(*checkers: Checker) -> Checker:
    """True when every checker is (no checkers: True)."""
    return lambda context: all(check(context) for check in checkers)


def checks_any(*checkers: Checker) -> Checker:
    """True when at least one checker is (no checkers: False)."""
    return lambda context: any(check(context) for check in checkers)
