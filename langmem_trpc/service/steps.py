"""The abstract storage steps the write plans yield, their results, and the
executor contract: the public kit a backend implements its writes with.

A write operation (add, update, delete, clear, purge, restore, add_many) is a
*plan*: a generator in `service/plans.py` that yields the steps below and
returns the operation's result. It holds every write rule (fingerprint
idempotence, topic merge, revive, keyed upsert, capacity, history) and does no
I/O. A backend is an *executor*: given a step, it performs it on its storage
and returns the step's result, which the driver sends back into the plan.

    result = drive(plan, lambda step: dispatch(executor, step))  # sync backends
    result = await adrive(plan, aexecute)                         # async backends

An executor is a `StepExecutor`: one method per step, each returning that
step's typed result. `dispatch` is the one exhaustive `match` from a step to
its method; a new step that an executor lacks is a type error, not a run-time
surprise. A sans-I/O executor (PostgreSQL's, whose methods yield statements
for its sync and async drivers) keeps the same method names and results and
its own `match`; Python's types cannot say "the same protocol, each result
wrapped in a generator".

The contract every executor keeps:

* `LockUser` starts the user's write section: from it until the plan ends,
  the executor holds what serialises this user's writers (a lock, a write
  transaction, an advisory lock) and every later step runs inside it. Steps
  before it (an update's first read, embedding) run outside, one at a time.
  If the plan raises, nothing it wrote is kept (the write section rolls back).
* Vectors are the executor's own: `Embed` returns them in whatever form its
  storage wants (None for an executor without an embedder) and the plan hands
  them back untouched in `NewRow.vector` / `Rewrite.vector`.
* Timestamps come from `Now`, so an executor can keep them strictly
  increasing; the plan stamps entries and history with them.
* A step's `user` scopes it: no step reads or writes another user's rows.

The step set is small and orthogonal on purpose; an executor may batch or
translate steps however it likes (PostgreSQL turns each into SQL statements)
as long as each step's stated result holds. Steps are slotted dataclasses that
nothing changes once built (frozen ones took four times as long to build, and a
new add builds five steps and a `NewRow`; plans share one `Now`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar, assert_never

from ..types import Entry, HistoryEvent, Memory, UserKey

__all__ = [
    "KEEP",
    "AExecute",
    "CountLive",
    "Embed",
    "EvictOldest",
    "Execute",
    "FindById",
    "FindByFingerprint",
    "FindLiveByFingerprint",
    "FindPredecessor",
    "Gone",
    "Insert",
    "Keep",
    "KnownFingerprints",
    "LockUser",
    "NewRow",
    "Now",
    "Plan",
    "Purge",
    "RecordHistory",
    "Rewrite",
    "SetTopics",
    "SetValidity",
    "SoftDelete",
    "Step",
    "StepExecutor",
    "Stored",
    "adrive",
    "dispatch",
    "drive",
]

T = TypeVar("T")
S = TypeVar("S")

Gone = tuple[str, str]
"""(id, text) of a row a step soft-deleted."""


class Keep:
    """Sentinel vector: leave the stored embedding as it is (`Rewrite.vector`)."""


KEEP = Keep()


@dataclass(slots=True)
class Stored:
    """A memory row as a find step returns it."""

    entry: Entry
    """The row's entry as stored (`expires_at` and validity included)."""
    keyed: bool
    """Added under a caller-chosen id: its fingerprint includes the id."""
    deleted: bool
    """Soft-deleted (a find by fingerprint reports live and deleted rows apart)."""
    handle: object = None
    """Executor-private reference to the row (a rowid, an object); plans pass it back."""


@dataclass(slots=True)
class NewRow:
    """One row for `Insert`: the entry exactly as given (id, timestamps, `expires_at`)."""

    entry: Entry
    fingerprint: str
    keyed: bool
    vector: object
    """The `Embed` result for this row, untouched (the executor's own form)."""


# --- steps -------------------------------------------------------------------


@dataclass(slots=True)
class Now:
    """The time to stamp this write with (UTC). Result: `datetime`."""


@dataclass(slots=True)
class Embed:
    """Embed document texts. Result: one vector per text, in the executor's form
    (a list of None when the executor has no embedder)."""

    texts: tuple[str, ...]


@dataclass(slots=True)
class LockUser:
    """Enter the user's write section (see the module docstring). Result: None."""

    user: UserKey


@dataclass(slots=True)
class FindById:
    """The user's row with this id, live or deleted. Result: `Stored | None`."""

    user: UserKey
    memory_id: str


@dataclass(slots=True)
class FindLiveByFingerprint:
    """The user's live, not superseded row with this fingerprint, other than
    `exclude_id` (a row whose `valid_to` lapsed is still found). Result: `Stored | None`."""

    user: UserKey
    fingerprint: str
    exclude_id: str | None = None


@dataclass(slots=True)
class FindByFingerprint:
    """The user's live row with this fingerprint, else a soft-deleted one (`Stored.deleted`
    tells which; an add needs both answers, so they are one step). Superseded rows
    are ignored, lapsed ones found. Result: `Stored | None`."""

    user: UserKey
    fingerprint: str


@dataclass(slots=True)
class KnownFingerprints:
    """Which of these fingerprints any row of the user (live or deleted, superseded too) has.
    Result: `set[str]` (a subset of `fingerprints`)."""

    user: UserKey
    fingerprints: frozenset[str]


@dataclass(slots=True)
class CountLive:
    """How many live memories the user has, superseded versions included (they take
    storage). Result: `int`."""

    user: UserKey


@dataclass(slots=True)
class Insert:
    """Store new live rows, in order (ids are new to the user). Result: None."""

    user: UserKey
    rows: tuple[NewRow, ...]


@dataclass(slots=True)
class Rewrite:
    """Replace a row's content in place (same id, `created_at` and validity kept),
    reviving it if deleted; `updated_at` becomes `at`; `KEEP` keeps its vector.
    Result: None."""

    user: UserKey
    target: Stored
    memory: Memory
    fingerprint: str
    vector: object
    """An `Embed` result, or `KEEP`."""
    at: datetime
    expires_at: datetime | None | Keep = KEEP
    """The row's new `expires_at` (None clears it), or `KEEP`: a revive clears an
    expiry that has passed, so re-added content is not hidden by its old TTL."""


@dataclass(slots=True)
class SetTopics:
    """Replace a live row's topics only; `updated_at` becomes `at`. Result: None."""

    user: UserKey
    target: Stored
    topics: tuple[str, ...]
    at: datetime


@dataclass(slots=True)
class SetValidity:
    """Set a live row's business-time end and supersede link: close a version
    (`valid_to` = the new version's `valid_from`, `superseded_by` = its id), reopen
    one (both None), or record what was said (`valid_to` ahead, no link). Content,
    fingerprint and vector stay; `updated_at` becomes `at`. Result: None."""

    user: UserKey
    target: Stored
    valid_to: datetime | None
    superseded_by: str | None
    at: datetime


@dataclass(slots=True)
class FindPredecessor:
    """The user's live row that `memory_id` superseded (the row whose
    `superseded_by` is `memory_id`) whose id is not in `exclude`; after restores
    several may name it: the most recently written. The step a version chain is
    walked back with (called again with the ids found so far until None).
    Result: `Stored | None`."""

    user: UserKey
    memory_id: str
    exclude: frozenset[str] = frozenset()


@dataclass(slots=True)
class SoftDelete:
    """Soft-delete these live rows (None: every live row of the user) at `at`.
    Result: `list[Gone]`, (id, text) of each row it deleted (those that were live)."""

    user: UserKey
    memory_ids: tuple[str, ...] | None
    at: datetime


@dataclass(slots=True)
class EvictOldest:
    """Soft-delete the user's live row written least recently (by write order, not
    clock) at `at`. Result: `Gone | None`."""

    user: UserKey
    at: datetime


@dataclass(slots=True)
class RecordHistory:
    """Append history events (each names its memory). Result: None."""

    user: UserKey
    events: tuple[HistoryEvent, ...]


@dataclass(slots=True)
class Purge:
    """Remove for good one row and its history, or (None) everything the user has:
    rows, history, cursors, claims, dead letters, statistics. Result: `int`, rows removed."""

    user: UserKey
    memory_id: str | None


Step = (
    Now
    | Embed
    | LockUser
    | FindById
    | FindLiveByFingerprint
    | FindByFingerprint
    | KnownFingerprints
    | CountLive
    | Insert
    | Rewrite
    | SetTopics
    | SetValidity
    | FindPredecessor
    | SoftDelete
    | EvictOldest
    | RecordHistory
    | Purge
)

Plan = Generator[Step, Any, T]
"""A write plan: yields steps, is sent each step's result (typed by the step: see
`StepExecutor`), returns the operation's result."""

Execute = Callable[[Step], object]
"""A sync executor as the driver sees it: perform one step, return its result."""

AExecute = Callable[[Step], Awaitable[object]]
"""An async executor: the awaitable twin of `Execute`."""


class StepExecutor(Protocol):
    """What a backend implements to run the write plans: one method per step,
    returning that step's result. `dispatch` calls them."""

    def now(self, step: Now) -> datetime: ...

    def embed(self, step: Embed) -> Sequence[object]: ...

    def lock_user(self, step: LockUser) -> None: ...

    def find_by_id(self, step: FindById) -> Stored | None: ...

    def find_live_by_fingerprint(self, step: FindLiveByFingerprint) -> Stored | None: ...

    def find_by_fingerprint(self, step: FindByFingerprint) -> Stored | None: ...

    def known_fingerprints(self, step: KnownFingerprints) -> set[str]: ...

    def count_live(self, step: CountLive) -> int: ...

    def insert(self, step: Insert) -> None: ...

    def rewrite(self, step: Rewrite) -> None: ...

    def set_topics(self, step: SetTopics) -> None: ...

    def set_validity(self, step: SetValidity) -> None: ...

    def find_predecessor(self, step: FindPredecessor) -> Stored | None: ...

    def soft_delete(self, step: SoftDelete) -> list[Gone]: ...

    def evict_oldest(self, step: EvictOldest) -> Gone | None: ...

    def record_history(self, step: RecordHistory) -> None: ...

    def purge(self, step: Purge) -> int: ...


def dispatch(executor: StepExecutor, step: Step) -> object:
    """Perform `step` with the executor's method for it; returns the step's result.
    Cases run in the order an add meets them (a match tests them one by one)."""
    match step:
        case Now():
            return executor.now(step)
        case Embed():
            return executor.embed(step)
        case LockUser():
            executor.lock_user(step)
            return None
        case FindByFingerprint():
            return executor.find_by_fingerprint(step)
        case CountLive():
            return executor.count_live(step)
        case Insert():
            executor.insert(step)
            return None
        case RecordHistory():
            executor.record_history(step)
            return None
        case FindById():
            return executor.find_by_id(step)
        case FindLiveByFingerprint():
            return executor.find_live_by_fingerprint(step)
        case KnownFingerprints():
            return executor.known_fingerprints(step)
        case Rewrite():
            executor.rewrite(step)
            return None
        case SetTopics():
            executor.set_topics(step)
            return None
        case SetValidity():
            executor.set_validity(step)
            return None
        case FindPredecessor():
            return executor.find_predecessor(step)
        case SoftDelete():
            return executor.soft_delete(step)
        case EvictOldest():
            return executor.evict_oldest(step)
        case Purge():
            return executor.purge(step)
        case _:
            assert_never(step)


def drive(plan: Generator[S, Any, T], execute: Callable[[S], object]) -> T:
    """Run `plan` (a write plan, or any plan: the queue's enqueue plan) to its end,
    sending back each step's result from `execute`."""
    reply: object = None
    try:
        while True:
            reply = execute(plan.send(reply))
    except StopIteration as done:
        result: T = done.value
        return result


async def adrive(plan: Generator[S, Any, T], aexecute: Callable[[S], Awaitable[object]]) -> T:
    """`drive` with an async executor."""
    reply: object = None
    try:
        while True:
            reply = await aexecute(plan.send(reply))
    except StopIteration as done:
        result: T = done.value
        return result
