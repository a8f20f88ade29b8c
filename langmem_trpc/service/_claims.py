"""Thread claims, failed attempts and dead letters: validation shared by every
backend, and the in-memory table the reference backend keeps them in.

The contract (`MemoryService.claim_thread` and friends):

- `claim_thread(user, thread, owner, ttl)` takes the thread's claim when it
  is free, expired or already `owner`'s, for `ttl` seconds, and returns what
  it read in the same transaction (cursor, failed attempts, queued retries);
  None when another owner holds an unexpired claim.
- `save_progress(...)` writes only while `owner` still holds the claim
  (expired but not taken over counts): the cursor (which clears the failed
  attempts), a dead letter, retries marked done; then renews the claim for
  `ttl` seconds, or releases it when `ttl` is None. False, and nothing
  written, when the claim was lost.
- `record_failure(...)` counts a failed attempt on one batch (a different
  batch restarts the count at 1) and returns the count.
- `dead_letters()` and `retry_dead_letter()` are admin calls across users.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ..errors import InvalidInputError
from ..types import DeadLetter, DeadLetterStatus, ExtractionCursor, ThreadClaim, UserKey
from ._core import check_optional_id, check_thread_id, utcnow

__all__ = [
    "ClaimTable",
    "check_claim",
    "check_dead_letter",
    "check_letter_id",
    "check_limit",
    "check_status",
    "check_ttl",
]

MAX_THREAD_ID = 512
MAX_OWNER = 200


def check_claim(thread_id: object, owner: object) -> tuple[str, str]:
    if not isinstance(thread_id, str) or not thread_id.strip() or len(thread_id) > MAX_THREAD_ID:
        raise InvalidInputError(
            "thread_id", f"must be a non-empty string of at most {MAX_THREAD_ID} characters"
        )
    if not isinstance(owner, str) or not owner.strip() or len(owner) > MAX_OWNER:
        raise InvalidInputError(
            "owner", f"must be a non-empty string of at most {MAX_OWNER} characters"
        )
    check_optional_id("owner", owner)
    return check_thread_id(thread_id), owner


def check_ttl(ttl: object, *, optional: bool = False) -> float | None:
    if ttl is None and optional:
        return None
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
    return limit


def check_letter_id(letter_id: object) -> str:
    if not isinstance(letter_id, str) or not letter_id.strip() or len(letter_id) > MAX_OWNER:
        raise InvalidInputError("letter_id", "must be a non-empty dead-letter id")
    return letter_id


def check_dead_letter(user: UserKey, thread_id: str, letter: object) -> DeadLetter:
    if not isinstance(letter, DeadLetter):
        raise InvalidInputError("dead_letter", "must be a DeadLetter")
    if letter.user != user or letter.thread_id != thread_id:
        raise InvalidInputError("dead_letter", "belongs to another user or thread")
    check_letter_id(letter.id)
    return letter


def check_progress(
    user: UserKey,
    thread_id: str,
    cursor: object,
    dead_letter: object,
    resolved: Sequence[str],
) -> tuple[ExtractionCursor | None, DeadLetter | None, list[str]]:
    """The validated arguments of `save_progress`, the same on every backend."""
    if cursor is not None:
        if not isinstance(cursor, ExtractionCursor):
            raise InvalidInputError("cursor", "must be an ExtractionCursor")
        if cursor.thread_id != thread_id:
            raise InvalidInputError("cursor", "is for another thread")
    letter = None if dead_letter is None else check_dead_letter(user, thread_id, dead_letter)
    if isinstance(resolved, str):
        raise InvalidInputError("resolved", "must be a sequence of dead-letter ids")
    return cursor, letter, [check_letter_id(r) for r in resolved]


@dataclass
class _Claim:
    owner: str | None = None
    expires: float = 0.0
    batch: str | None = None
    attempts: int = 0
    error: str | None = None


@dataclass
class ClaimTable:
    """The reference backend's claims, attempts and dead letters (wall-clock expiry)."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    claims: dict[tuple[UserKey, str], _Claim] = field(default_factory=dict)
    letters: dict[str, DeadLetter] = field(default_factory=dict)

    def claim(
        self, user: UserKey, thread_id: str, owner: str, ttl: float, cursor: ExtractionCursor | None
    ) -> ThreadClaim | None:
        now = time.time()
        with self.lock:
            row = self.claims.setdefault((user, thread_id), _Claim())
            if row.owner not in (None, owner) and row.expires > now:
                return None
            row.owner, row.expires = owner, now + ttl
            return ThreadClaim(
                cursor=cursor,
                attempts=row.attempts,
                failed_batch=row.batch,
                retries=self.retries(user, thread_id),
            )

    def holds(self, user: UserKey, thread_id: str, owner: str) -> bool:
        row = self.claims.get((user, thread_id))
        return row is not None and row.owner == owner

    def progress(
        self,
        user: UserKey,
        thread_id: str,
        owner: str,
        ttl: float | None,
        letter: DeadLetter | None,
        resolved: Sequence[str],
        cursor_written: bool,
    ) -> None:
        """Everything of `save_progress` but the cursor; the caller checked `holds`."""
        now = utcnow()
        row = self.claims[(user, thread_id)]
        if letter is not None:
            self.letters[letter.id] = letter.model_copy(update={"updated_at": now})
        for letter_id in resolved:
            found = self.letters.get(letter_id)
            if found is not None and found.user == user and found.thread_id == thread_id:
                self.letters[letter_id] = found.model_copy(
                    update={"status": DeadLetterStatus.DONE, "updated_at": now}
                )
        if cursor_written:
            row.batch, row.attempts, row.error = None, 0, None
        if ttl is None:
            row.owner, row.expires = None, 0.0
        else:
            row.expires = time.time() + ttl

    def failure(self, user: UserKey, thread_id: str, batch: str, error: str) -> int:
        with self.lock:
            row = self.claims.setdefault((user, thread_id), _Claim())
            row.attempts = row.attempts + 1 if row.batch == batch else 1
            row.batch, row.error = batch, error
            return row.attempts

    def release(self, user: UserKey, thread_id: str, owner: str) -> None:
        with self.lock:
            row = self.claims.get((user, thread_id))
            if row is not None and row.owner == owner:
                row.owner, row.expires = None, 0.0

    def retries(self, user: UserKey, thread_id: str) -> list[DeadLetter]:
        with self.lock:
            return [
                d
                for d in self.letters.values()
                if d.user == user and d.thread_id == thread_id and d.status == "retry"
            ]

    def listing(
        self, app_name: str | None, status: DeadLetterStatus | None, limit: int | None
    ) -> list[DeadLetter]:
        with self.lock:
            found = [
                d
                for d in self.letters.values()
                if (app_name is None or d.app_name == app_name)
                and (status is None or d.status == status)
            ]
        found.sort(key=lambda d: (d.created_at, d.id))
        return found[:limit] if limit is not None else found

    def retry(self, letter_id: str, now: datetime) -> DeadLetter | None:
        with self.lock:
            found = self.letters.get(letter_id)
            if found is None or found.status == DeadLetterStatus.DONE:
                return None
            updated = found.model_copy(update={"status": DeadLetterStatus.RETRY, "updated_at": now})
            self.letters[letter_id] = updated
            return updated

    def purge(self, user: UserKey) -> None:
        with self.lock:
            for key in [k for k in self.claims if k[0] == user]:
                del self.claims[key]
            for letter_id in [i for i, d in self.letters.items() if d.user == user]:
                del self.letters[letter_id]
