"""The thread-level steps the claim plans yield, their results, and the claim
executor contract: the public kit a backend runs its claims with.

Each claim op (`claims.ClaimCall`) is a *plan*: a generator in `claims.py`
(`claims.plan`) that yields the steps below and returns the op's result. The
plans hold the rules that are the same everywhere (a claim returns the state
it read under the lock, progress clears the failed attempts, progress needs
the claim); a backend is a `ClaimExecutor` that performs each step atomically
on its storage:

    result = drive(claims.plan(op), lambda step: dispatch(executor, step))

The contract every executor keeps:

* `LockThread` takes a thread's claim when it is free, expired or the
  owner's own; its expiry is measured by one clock per backend (a server's
  or this process's, never two clients').
* If an op fails after its `LockThread` took a claim, the claim is given back
  (PostgreSQL's transaction rolls back, SQLite releases its lock).
* `WriteThread` with a `holder` writes nothing unless that owner holds the
  claim (one that expired but was not taken over counts), and renews or
  releases it only after its writes are stored.
* A thread's `ExtractionCursor.pending_retries` counts its dead letters in
  `retry` whenever it is read.
* A step's `user` scopes it: no step reads or writes another user's threads.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, assert_never

from ..types import DeadLetter, DeadLetterStatus, ExtractionCursor, UserKey

__all__ = [
    "ClaimExecutor",
    "ClaimPlan",
    "ClaimStep",
    "CountFailure",
    "Holder",
    "ListLetters",
    "LockThread",
    "ReadThread",
    "RetryLetter",
    "ThreadState",
    "UnlockThread",
    "WriteThread",
    "dispatch",
]

T = TypeVar("T")


@dataclass(slots=True)
class ThreadState:
    """One thread as `ReadThread` returns it."""

    cursor: ExtractionCursor | None
    attempts: int = 0
    """Failed attempts at `failed_batch` (0 when `ReadThread.attempts` is False)."""
    failed_batch: str | None = None
    retries: list[DeadLetter] = field(default_factory=list)
    """The thread's dead letters in `retry`, oldest first (read with the attempts)."""


@dataclass(slots=True)
class Holder:
    """The claim a `WriteThread` writes under: `owner` must hold it; afterwards it is
    renewed for `ttl` seconds, or released (None)."""

    owner: str
    ttl: float | None


# --- steps -------------------------------------------------------------------


@dataclass(slots=True)
class LockThread:
    """Take the thread's claim for `owner` for `ttl` seconds if it is free, expired or
    already `owner`'s. Result: `bool`, taken."""

    user: UserKey
    thread_id: str
    owner: str
    ttl: float


@dataclass(slots=True)
class UnlockThread:
    """Release the thread's claim if `owner` holds it (else nothing). Result: None."""

    user: UserKey
    thread_id: str
    owner: str


@dataclass(slots=True)
class ReadThread:
    """The thread's cursor and, with `attempts`, its failed attempts and the dead
    letters waiting for retry. Result: `ThreadState`."""

    user: UserKey
    thread_id: str
    attempts: bool


@dataclass(slots=True)
class WriteThread:
    """Write one thread's state, all or nothing: the cursor (upserted, `updated_at`
    stamped now), a dead letter (upserted, `updated_at` now), the thread's letters
    `resolved` (set to done), and with `clear_attempts` its failed attempts forgotten.
    With a `holder`, only under that claim (see the module docstring). Result: `bool`,
    False when the holder did not hold the claim (nothing written)."""

    user: UserKey
    thread_id: str
    holder: Holder | None
    cursor: ExtractionCursor | None
    clear_attempts: bool = False
    letter: DeadLetter | None = None
    resolved: tuple[str, ...] = ()


@dataclass(slots=True)
class CountFailure:
    """Record a failed attempt at `batch`: one more if the last failure was at the same
    batch, else the first; `error` kept. Result: `int`, the attempts now."""

    user: UserKey
    thread_id: str
    batch: str
    error: str


@dataclass(slots=True)
class ListLetters:
    """Dead letters of every user, oldest first (`created_at`, then id), filtered by app
    and status, at most `limit`. Result: `list[DeadLetter]`."""

    app_name: str | None
    status: DeadLetterStatus | None
    limit: int | None


@dataclass(slots=True)
class RetryLetter:
    """Set a dead letter to `retry` (`updated_at` now) unless it is missing or done.
    Result: `DeadLetter | None`, the letter as updated."""

    letter_id: str


ClaimStep = (
    LockThread | UnlockThread | ReadThread | WriteThread | CountFailure | ListLetters | RetryLetter
)

ClaimPlan = Generator[ClaimStep, Any, T]
"""A claim plan: yields steps, is sent each step's result (typed by the step: see
`ClaimExecutor`), returns the op's result."""


class ClaimExecutor(Protocol):
    """What a backend implements to run the claim plans: one method per step,
    returning that step's result. `dispatch` calls them."""

    def lock_thread(self, step: LockThread) -> bool: ...

    def unlock_thread(self, step: UnlockThread) -> None: ...

    def read_thread(self, step: ReadThread) -> ThreadState: ...

    def write_thread(self, step: WriteThread) -> bool: ...

    def count_failure(self, step: CountFailure) -> int: ...

    def list_letters(self, step: ListLetters) -> list[DeadLetter]: ...

    def retry_letter(self, step: RetryLetter) -> DeadLetter | None: ...


def dispatch(executor: ClaimExecutor, step: ClaimStep) -> object:
    """Perform `step` with the executor's method for it; returns the step's result."""
    match step:
        case LockThread():
            return executor.lock_thread(step)
        case ReadThread():
            return executor.read_thread(step)
        case WriteThread():
            return executor.write_thread(step)
        case CountFailure():
            return executor.count_failure(step)
        case UnlockThread():
            executor.unlock_thread(step)
            return None
        case ListLetters():
            return executor.list_letters(step)
        case RetryLetter():
            return executor.retry_letter(step)
        case _:
            assert_never(step)
