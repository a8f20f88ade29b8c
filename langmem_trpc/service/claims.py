"""Extraction cursors, thread claims, failed attempts and dead letters: the validated
operations (`ClaimOp`), the plan each runs as (`plan`), and the table the in-memory
backends keep. Part of the public backend kit: a backend runs an op by driving its
plan over the thread-level steps of `claim_steps` with its `ClaimExecutor`, so the
claim rules are written here once.

Each public method of this family (`MemoryService.claim_thread`, ...) validates its
arguments once (the `check_*` functions) into one op that the backend's `run_claim_op`
runs; the methods' docstrings state the contract. Beyond them: `ClaimThread` returns
what it read in the same transaction, and `SaveProgress` counts a claim that expired
but was not taken over as still held. An op's fields are named like its method's
parameters (`name`), so `getattr(service, op.name)(**vars(op))` repeats the call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, assert_never, cast

from ..errors import InvalidInputError
from ..types import (
    DeadLetter,
    DeadLetterStatus,
    ExtractionCursor,
    ThreadClaim,
    UserKey,
    check_optional_id,
    text_problem,
)
from .claim_steps import (
    ClaimPlan,
    CountFailure,
    Holder,
    ListLetters,
    LockThread,
    ReadThread,
    RetryLetter,
    ThreadState,
    UnlockThread,
    WriteThread,
    dispatch,
)
from .rules import MAX_LIMIT, check_cursor, check_thread_id, check_user, utcnow
from .steps import drive

__all__ = [
    "MAX_ERROR",
    "Claim",
    "ClaimCall",
    "ClaimOp",
    "ClaimTable",
    "ClaimThread",
    "GetCursor",
    "ListDeadLetters",
    "OnThread",
    "Owned",
    "RecordFailure",
    "ReleaseThread",
    "RetryDeadLetter",
    "SaveProgress",
    "SetCursor",
    "check_claim",
    "check_letter_id",
    "check_limit",
    "check_progress",
    "check_status",
    "check_ttl",
    "closed",
    "plan",
]

T = TypeVar("T")
MAX_THREAD_ID = 512
MAX_OWNER = 200
MAX_ERROR = 2000
"""Characters of a failed attempt's error that are stored."""


class ClaimOp(Generic[T]):
    """One validated call of the claim family; `T` is what running it returns."""

    name: ClassVar[str]
    """The public `MemoryService` method this op is a call of."""


@dataclass(frozen=True)
class OnThread(ClaimOp[T]):
    """An op on one user's thread (`SetCursor` is one too, its thread the cursor's)."""

    user: UserKey
    thread_id: str


@dataclass(frozen=True)
class GetCursor(OnThread[ExtractionCursor | None]):
    name = "get_cursor"


@dataclass(frozen=True)
class SetCursor(ClaimOp[None]):
    name = "set_cursor"
    user: UserKey
    cursor: ExtractionCursor


@dataclass(frozen=True)
class Owned(OnThread[T]):
    """An op by the job `owner` on the thread."""

    owner: str


@dataclass(frozen=True)
class ClaimThread(Owned[ThreadClaim | None]):
    name = "claim_thread"
    ttl: float


@dataclass(frozen=True)
class SaveProgress(Owned[bool]):
    name = "save_progress"
    cursor: ExtractionCursor | None
    ttl: float | None
    dead_letter: DeadLetter | None
    resolved: list[str]


@dataclass(frozen=True)
class RecordFailure(Owned[int]):
    name = "record_failure"
    batch: str
    error: str
    """At most `MAX_ERROR` characters."""


@dataclass(frozen=True)
class ReleaseThread(Owned[None]):
    name = "release_thread"


@dataclass(frozen=True)
class ListDeadLetters(ClaimOp[list[DeadLetter]]):
    name = "dead_letters"
    app_name: str | None
    status: DeadLetterStatus | None
    limit: int | None


@dataclass(frozen=True)
class RetryDeadLetter(ClaimOp[DeadLetter | None]):
    name = "retry_dead_letter"
    letter_id: str


ClaimCall = (
    GetCursor
    | SetCursor
    | ClaimThread
    | SaveProgress
    | RecordFailure
    | ReleaseThread
    | ListDeadLetters
    | RetryDeadLetter
)
"""Every op a backend runs; `MemoryService` builds no other (a test holds it)."""


def closed(op: ClaimOp[Any]) -> ClaimCall:
    """`op` as the union of the ops, so a backend's `match` over it is exhaustive."""
    return cast(ClaimCall, op)


def check_claim(user: object, thread_id: object, owner: object) -> tuple[UserKey, str, str]:
    """The validated user, thread and owner of a claim."""
    user = check_user(user)
    if not isinstance(thread_id, str) or not thread_id.strip() or len(thread_id) > MAX_THREAD_ID:
        raise InvalidInputError(
            "thread_id", f"must be a non-empty string of at most {MAX_THREAD_ID} characters"
        )
    if not isinstance(owner, str) or not owner.strip() or len(owner) > MAX_OWNER:
        raise InvalidInputError(
            "owner", f"must be a non-empty string of at most {MAX_OWNER} characters"
        )
    check_optional_id("owner", owner)
    return user, check_thread_id(thread_id), owner


def check_ttl(ttl: object) -> float:
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl <= 86_400:
        raise InvalidInputError("ttl", "must be a number of seconds in (0, 86400]")
    return float(ttl)


def check_status(status: object) -> DeadLetterStatus | None:
    if status is None:
        return None
    try:
        return DeadLetterStatus(status)
    except ValueError:
        raise InvalidInputError("status", "must be one of dead, retry, done") from None


def check_limit(limit: object) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInputError("limit", "must be a positive integer or None")
    return limit if limit < MAX_LIMIT else None  # SQL cannot bind past 2**63 - 1


def check_letter_id(letter_id: object) -> str:
    if not isinstance(letter_id, str) or not letter_id.strip() or len(letter_id) > MAX_OWNER:
        raise InvalidInputError("letter_id", "must be a non-empty dead-letter id")
    problem = text_problem(letter_id)  # a NUL or a lone surrogate: no backend can look it up
    if problem is not None:
        raise InvalidInputError("letter_id", problem)
    return letter_id


def check_progress(
    user: UserKey, thread_id: str, cursor: object, dead_letter: object, resolved: Sequence[str]
) -> tuple[ExtractionCursor | None, DeadLetter | None, list[str]]:
    """The validated cursor, dead letter and resolved ids of `save_progress`."""
    checked = None if cursor is None else check_cursor(cursor)
    if checked is not None and checked.thread_id != thread_id:
        raise InvalidInputError("cursor", "is for another thread")
    if dead_letter is not None:
        if not isinstance(dead_letter, DeadLetter):
            raise InvalidInputError("dead_letter", "must be a DeadLetter")
        if dead_letter.user != user or dead_letter.thread_id != thread_id:
            raise InvalidInputError("dead_letter", "belongs to another user or thread")
        check_letter_id(dead_letter.id)
    if isinstance(resolved, str):
        raise InvalidInputError("resolved", "must be a sequence of dead-letter ids")
    return checked, dead_letter, [check_letter_id(r) for r in resolved]


# --- the plans: each op's rules, once for every backend ----------------------


def plan(op: ClaimOp[T]) -> ClaimPlan[T]:
    """The plan that runs `op` over the steps of `claim_steps`."""
    return cast("ClaimPlan[T]", _plan(closed(op)))


def _plan(op: ClaimCall) -> ClaimPlan[object]:
    match op:
        case GetCursor():
            return _get_cursor(op)
        case SetCursor(user=user, cursor=cursor):
            return _write(WriteThread(user, cursor.thread_id, None, cursor))
        case ClaimThread():
            return _claim_thread(op)
        case SaveProgress():
            return _write(
                WriteThread(
                    op.user,
                    op.thread_id,
                    Holder(op.owner, op.ttl),
                    op.cursor,
                    clear_attempts=op.cursor is not None,  # progress: the failures are behind
                    letter=op.dead_letter,
                    resolved=tuple(op.resolved),
                )
            )
        case RecordFailure():
            return _count_failure(op)
        case ReleaseThread(user=user, thread_id=thread_id, owner=owner):
            return _unlock(UnlockThread(user, thread_id, owner))
        case ListDeadLetters(app_name=app_name, status=status, limit=limit):
            return _list_letters(ListLetters(app_name, status, limit))
        case RetryDeadLetter(letter_id=letter_id):
            return _retry_letter(RetryLetter(letter_id))
        case never:
            assert_never(never)


def _get_cursor(op: GetCursor) -> ClaimPlan[ExtractionCursor | None]:
    state: ThreadState = yield ReadThread(op.user, op.thread_id, attempts=False)
    return state.cursor


def _claim_thread(op: ClaimThread) -> ClaimPlan[ThreadClaim | None]:
    """Lock, then read under the lock: the job starts from what it was given."""
    taken: bool = yield LockThread(op.user, op.thread_id, op.owner, op.ttl)
    if not taken:
        return None
    state: ThreadState = yield ReadThread(op.user, op.thread_id, attempts=True)
    return ThreadClaim(
        cursor=state.cursor,
        attempts=state.attempts,
        failed_batch=state.failed_batch,
        retries=state.retries,
    )


def _write(step: WriteThread) -> ClaimPlan[bool]:
    written: bool = yield step
    return written


def _count_failure(op: RecordFailure) -> ClaimPlan[int]:
    attempts: int = yield CountFailure(op.user, op.thread_id, op.batch, op.error)
    return attempts


def _unlock(step: UnlockThread) -> ClaimPlan[None]:
    yield step


def _list_letters(step: ListLetters) -> ClaimPlan[list[DeadLetter]]:
    letters: list[DeadLetter] = yield step
    return letters


def _retry_letter(step: RetryLetter) -> ClaimPlan[DeadLetter | None]:
    letter: DeadLetter | None = yield step
    return letter


# --- the in-memory executor --------------------------------------------------


@dataclass
class Claim:
    """One thread's claim and failed attempts, as `ClaimTable` keeps them."""

    owner: str | None = None
    expires: float = 0.0
    batch: str | None = None
    attempts: int = 0
    error: str | None = None


@dataclass
class ClaimTable:
    """Cursors, claims, attempts and dead letters in dicts (wall-clock expiry): the
    `ClaimExecutor` of the in-memory backends. The in-memory backend keeps one for the
    process; LanceDB too, loaded from its table and written through.
    `apply` runs every `ClaimOp` under `lock`, so each step is atomic.
    """

    lock: threading.RLock = field(default_factory=threading.RLock)
    cursors: dict[tuple[UserKey, str], ExtractionCursor] = field(default_factory=dict)
    claims: dict[tuple[UserKey, str], Claim] = field(default_factory=dict)
    letters: dict[str, DeadLetter] = field(default_factory=dict)

    def apply(self, op: ClaimOp[T]) -> T:
        """Run `op`'s plan on the table; returns what its public method returns."""
        with self.lock:
            return drive(plan(op), lambda step: dispatch(self, step))

    def lock_thread(self, step: LockThread) -> bool:
        now = time.time()
        row = self.claims.setdefault((step.user, step.thread_id), Claim())
        if row.owner not in (None, step.owner) and row.expires > now:
            return False
        row.owner, row.expires = step.owner, now + step.ttl
        return True

    def unlock_thread(self, step: UnlockThread) -> None:
        held = self.claims.get((step.user, step.thread_id))
        if held is not None and held.owner == step.owner:
            held.owner, held.expires = None, 0.0

    def read_thread(self, step: ReadThread) -> ThreadState:
        cursor = self.cursor(step.user, step.thread_id)
        if not step.attempts:
            return ThreadState(cursor)
        row = self.claims.get((step.user, step.thread_id))
        retries = self.retries(step.user, step.thread_id)
        if row is None:
            return ThreadState(cursor, retries=retries)
        return ThreadState(cursor, row.attempts, row.batch, retries)

    def write_thread(self, step: WriteThread) -> bool:
        user, thread_id, holder = step.user, step.thread_id, step.holder
        row = self.claims.get((user, thread_id))
        if holder is not None and (row is None or row.owner != holder.owner):
            return False
        now = utcnow()
        if step.letter is not None:
            self.letters[step.letter.id] = step.letter.model_copy(update={"updated_at": now})
        for letter_id in step.resolved:
            found = self.letters.get(letter_id)
            if found is not None and found.user == user and found.thread_id == thread_id:
                done = {"status": DeadLetterStatus.DONE, "updated_at": now}
                self.letters[letter_id] = found.model_copy(update=done)
        if step.cursor is not None:
            self.set_cursor(user, step.cursor)
        if row is not None and step.clear_attempts:
            row.batch, row.attempts, row.error = None, 0, None
        if row is not None and holder is not None:
            if holder.ttl is None:
                row.owner, row.expires = None, 0.0
            else:
                row.expires = time.time() + holder.ttl
        return True

    def count_failure(self, step: CountFailure) -> int:
        row = self.claims.setdefault((step.user, step.thread_id), Claim())
        row.attempts = row.attempts + 1 if row.batch == step.batch else 1
        row.batch, row.error = step.batch, step.error
        return row.attempts

    def list_letters(self, step: ListLetters) -> list[DeadLetter]:
        found = [
            d
            for d in self.letters.values()
            if (step.app_name is None or d.app_name == step.app_name)
            and (step.status is None or d.status == step.status)
        ]
        found.sort(key=lambda d: (d.created_at, d.id))
        return found[: step.limit] if step.limit is not None else found

    def retry_letter(self, step: RetryLetter) -> DeadLetter | None:
        found = self.letters.get(step.letter_id)
        if found is None or found.status == DeadLetterStatus.DONE:
            return None
        update = {"status": DeadLetterStatus.RETRY, "updated_at": utcnow()}
        self.letters[step.letter_id] = updated = found.model_copy(update=update)
        return updated

    def cursor(self, user: UserKey, thread_id: str) -> ExtractionCursor | None:
        cursor = self.cursors.get((user, thread_id))
        pending = len(self.retries(user, thread_id))
        if cursor is None or cursor.pending_retries == pending:
            return cursor
        return cursor.model_copy(update={"pending_retries": pending})

    def set_cursor(self, user: UserKey, cursor: ExtractionCursor) -> None:
        stamped = cursor.model_copy(update={"updated_at": utcnow()})
        self.cursors[(user, cursor.thread_id)] = stamped

    def retries(self, user: UserKey, thread_id: str) -> list[DeadLetter]:
        return [
            d
            for d in self.letters.values()
            if d.user == user and d.thread_id == thread_id and d.status == "retry"
        ]

    def purge(self, user: UserKey) -> Callable[[], None]:
        """Drop the user's cursors, claims and dead letters; returns what puts them back."""
        with self.lock:
            cursors = {k: self.cursors.pop(k) for k in list(self.cursors) if k[0] == user}
            claims = {k: self.claims.pop(k) for k in list(self.claims) if k[0] == user}
            mine = [i for i, d in self.letters.items() if d.user == user]
            letters = {i: self.letters.pop(i) for i in mine}

        def restore() -> None:
            with self.lock:
                self.cursors.update(cursors)
                self.claims.update(claims)
                self.letters.update(letters)

        return restore
