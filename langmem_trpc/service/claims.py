"""Extraction cursors, thread claims, failed attempts and dead letters: the validated
operations every backend runs (`ClaimOp`), and the table the in-memory backends keep.
Part of the public backend kit: a backend runs each op of `ClaimCall` (`closed` gives
an op as that union, for an exhaustive `match`).

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
from ._core import MAX_LIMIT, check_cursor, check_thread_id, check_user, utcnow

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
    """Cursors, claims, attempts and dead letters in dicts (wall-clock expiry).

    The in-memory backend keeps one for the process; LanceDB too, loaded
    from its table and written through.
    `apply` runs every `ClaimOp` under `lock`.
    """

    lock: threading.RLock = field(default_factory=threading.RLock)
    cursors: dict[tuple[UserKey, str], ExtractionCursor] = field(default_factory=dict)
    claims: dict[tuple[UserKey, str], Claim] = field(default_factory=dict)
    letters: dict[str, DeadLetter] = field(default_factory=dict)

    def apply(self, op: ClaimOp[Any]) -> Any:
        """Run `op` on the table; returns what its public method returns."""
        with self.lock:
            match closed(op):
                case GetCursor(user=user, thread_id=thread_id):
                    return self.cursor(user, thread_id)
                case SetCursor(user=user, cursor=cursor):
                    return self.set_cursor(user, cursor)
                case ClaimThread() as claim:
                    return self.claim(claim)
                case SaveProgress() as progress:
                    return self.progress(progress)
                case RecordFailure() as failure:
                    return self.failure(failure)
                case ReleaseThread() as release:
                    return self.release(release)
                case ListDeadLetters() as listing:
                    return self.listing(listing)
                case RetryDeadLetter(letter_id=letter_id):
                    return self.retry(letter_id)
                case never:
                    assert_never(never)

    def cursor(self, user: UserKey, thread_id: str) -> ExtractionCursor | None:
        cursor = self.cursors.get((user, thread_id))
        pending = len(self.retries(user, thread_id))
        if cursor is None or cursor.pending_retries == pending:
            return cursor
        return cursor.model_copy(update={"pending_retries": pending})

    def set_cursor(self, user: UserKey, cursor: ExtractionCursor) -> None:
        stamped = cursor.model_copy(update={"updated_at": utcnow()})
        self.cursors[(user, cursor.thread_id)] = stamped

    def claim(self, op: ClaimThread) -> ThreadClaim | None:
        now = time.time()
        row = self.claims.setdefault((op.user, op.thread_id), Claim())
        if row.owner not in (None, op.owner) and row.expires > now:
            return None
        row.owner, row.expires = op.owner, now + op.ttl
        return ThreadClaim(
            cursor=self.cursor(op.user, op.thread_id),
            attempts=row.attempts,
            failed_batch=row.batch,
            retries=self.retries(op.user, op.thread_id),
        )

    def progress(self, op: SaveProgress) -> bool:
        user, thread_id = op.user, op.thread_id
        row = self.claims.get((user, thread_id))
        if row is None or row.owner != op.owner:
            return False
        now = utcnow()
        if op.dead_letter is not None:
            self.letters[op.dead_letter.id] = op.dead_letter.model_copy(update={"updated_at": now})
        for letter_id in op.resolved:
            found = self.letters.get(letter_id)
            if found is not None and found.user == user and found.thread_id == thread_id:
                self.letters[letter_id] = found.model_copy(
                    update={"status": DeadLetterStatus.DONE, "updated_at": now}
                )
        if op.cursor is not None:
            self.set_cursor(user, op.cursor)
            row.batch, row.attempts, row.error = None, 0, None
        if op.ttl is None:
            row.owner, row.expires = None, 0.0
        else:
            row.expires = time.time() + op.ttl
        return True

    def failure(self, op: RecordFailure) -> int:
        row = self.claims.setdefault((op.user, op.thread_id), Claim())
        row.attempts = row.attempts + 1 if row.batch == op.batch else 1
        row.batch, row.error = op.batch, op.error
        return row.attempts

    def release(self, op: ReleaseThread) -> None:
        held = self.claims.get((op.user, op.thread_id))
        if held is not None and held.owner == op.owner:
            held.owner, held.expires = None, 0.0

    def retries(self, user: UserKey, thread_id: str) -> list[DeadLetter]:
        return [
            d
            for d in self.letters.values()
            if d.user == user and d.thread_id == thread_id and d.status == "retry"
        ]

    def listing(self, op: ListDeadLetters) -> list[DeadLetter]:
        found = [
            d
            for d in self.letters.values()
            if (op.app_name is None or d.app_name == op.app_name)
            and (op.status is None or d.status == op.status)
        ]
        found.sort(key=lambda d: (d.created_at, d.id))
        return found[: op.limit] if op.limit is not None else found

    def retry(self, letter_id: str) -> DeadLetter | None:
        found = self.letters.get(letter_id)
        if found is None or found.status == DeadLetterStatus.DONE:
            return None
        update = {"status": DeadLetterStatus.RETRY, "updated_at": utcnow()}
        self.letters[letter_id] = updated = found.model_copy(update=update)
        return updated

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
