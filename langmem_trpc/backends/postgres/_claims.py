"""PostgreSQL: extraction cursors with their covered keys, thread claims,
failed attempts and dead letters: the claim executor, sans-I/O, that runs each
op's shared plan as statements (contract: `langmem_trpc.service.claim_steps`).

A claim is taken by one `INSERT ... ON CONFLICT DO UPDATE ... WHERE` on
`langmem_thread_claims`: the row lock serialises competing processes and the
WHERE (free, expired or ours) is re-checked on the latest row version, so
exactly one wins. Expiry uses the server's clock, never a client's. Claim
and release transactions commit asynchronously (no WAL flush wait); the
cursor writes under the claim are ordinary durable commits, a batch's in one
statement that also checks, renews or releases the claim.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import timezone
from typing import Any, TypeVar, assert_never

from psycopg.types.json import Jsonb

from ...service import claims as c
from ...service.claim_steps import (
    ClaimPlan,
    ClaimStep,
    CountFailure,
    ListLetters,
    LockThread,
    ReadThread,
    RetryLetter,
    ThreadState,
    UnlockThread,
    WriteThread,
)
from ...types import DeadLetter, DeadLetterStatus, ExtractionCursor, UserKey
from ._ops import Op, Plan, Sql
from ._sql import Row, user_params

T = TypeVar("T")

ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true) = 'off'"
"""A condition that makes this transaction commit without waiting for the WAL flush: a
claim lost to a server crash only lets another job take the thread, whose cursor writes
stay durable."""

_T = "app_name = %(app)s AND user_id = %(user)s AND thread_id = %(thread)s"

_UPSERT_CURSOR = """
INSERT INTO langmem_cursors (app_name, user_id, thread_id, last_message_id, last_message_digest,
    message_count, last_extracted_at, updated_at, message_keys, retired_keys)
{} %(app)s, %(user)s, %(thread)s, %(last_id)s, %(digest)s, %(count)s, %(extracted)s, now(),
    %(keys)s, %(retired)s {}
ON CONFLICT (app_name, user_id, thread_id) DO UPDATE SET
    last_message_id = excluded.last_message_id, last_message_digest = excluded.last_message_digest,
    message_count = excluded.message_count, last_extracted_at = excluded.last_extracted_at,
    updated_at = excluded.updated_at, message_keys = excluded.message_keys,
    retired_keys = excluded.retired_keys"""
UPSERT_CURSOR = _UPSERT_CURSOR.format("VALUES (", ")")
SELECT_CURSOR = f"""
SELECT thread_id, last_message_id, last_message_digest, message_count, last_extracted_at,
    updated_at, message_keys, pending_retries, retired_keys FROM langmem_cursors WHERE {_T}"""
COUNT_PENDING = f"""
UPDATE langmem_cursors SET pending_retries = (
    SELECT count(*) FROM langmem_dead_letters WHERE {_T} AND status = 'retry') WHERE {_T}"""

TAKE_CLAIM = f"""
INSERT INTO langmem_thread_claims AS c (app_name, user_id, thread_id, owner, expires_at)
SELECT %(app)s, %(user)s, %(thread)s, %(owner)s, now() + make_interval(secs => %(ttl)s)
WHERE {ASYNC_COMMIT}
ON CONFLICT (app_name, user_id, thread_id) DO UPDATE SET
    owner = excluded.owner, expires_at = excluded.expires_at
WHERE c.owner IS NULL OR c.owner = excluded.owner OR c.expires_at <= now()
RETURNING attempts, batch"""
_HOLD = f"""
UPDATE langmem_thread_claims SET {{}} WHERE {_T} AND owner = %(owner)s RETURNING 1 AS held"""
_RELEASE = "owner = NULL, expires_at = NULL"
_RENEW = "expires_at = now() + make_interval(secs => %(ttl)s)"
_CLEAR = "batch = NULL, attempts = 0, last_error = NULL"


def _hold(release: bool, clear: bool, cursor: bool) -> str:
    sets = _RELEASE if release else _RENEW
    update = _HOLD.format(f"{sets}, {_CLEAR}" if clear else sets)
    if not cursor:
        return update
    upsert = _UPSERT_CURSOR.format("SELECT", "FROM held")
    return f"WITH held AS ({update})\n{upsert}\nRETURNING 1 AS held"


HOLD = {
    (release, clear, cursor): _hold(release, clear, cursor)
    for release in (True, False)
    for clear in (True, False)
    for cursor in (True, False)
}
"""(release, clear attempts, cursor) -> the UPDATE that checks the claim is ours and locks
its row, then releases it or renews it (`ttl`), with the cursor upsert in the same
statement: the cursor is written only if the claim is ours. No row: not ours."""
CLEAR_ATTEMPTS = f"UPDATE langmem_thread_claims SET {_CLEAR} WHERE {_T}"
SELECT_ATTEMPTS = f"SELECT attempts, batch FROM langmem_thread_claims WHERE {_T}"
RELEASE = f"""
UPDATE langmem_thread_claims SET {_RELEASE} WHERE {_T} AND owner = %(owner)s AND {ASYNC_COMMIT}"""
RECORD_FAILURE = """
INSERT INTO langmem_thread_claims AS c (app_name, user_id, thread_id, batch, attempts, last_error)
VALUES (%(app)s, %(user)s, %(thread)s, %(batch)s, 1, %(error)s)
ON CONFLICT (app_name, user_id, thread_id) DO UPDATE SET
    attempts = CASE WHEN c.batch IS NOT DISTINCT FROM excluded.batch THEN c.attempts + 1 ELSE 1 END,
    batch = excluded.batch, last_error = excluded.last_error
RETURNING attempts"""

_LETTER = (
    "id, app_name, user_id, thread_id, status, error, attempts, message_ids, messages,"
    " created_at, updated_at"
)
UPSERT_LETTER = f"""
INSERT INTO langmem_dead_letters ({_LETTER})
VALUES (%(id)s, %(app)s, %(user)s, %(thread)s, %(status)s, %(error)s, %(attempts)s, %(ids)s,
    %(messages)s, %(created)s, now())
ON CONFLICT (id) DO UPDATE SET status = excluded.status, error = excluded.error,
    attempts = excluded.attempts, updated_at = excluded.updated_at"""
RESOLVE_LETTERS = f"""
UPDATE langmem_dead_letters SET status = 'done', updated_at = now()
WHERE {_T} AND id = ANY(%(ids)s)"""
SELECT_RETRIES = f"""
SELECT {_LETTER} FROM langmem_dead_letters WHERE {_T} AND status = 'retry'
ORDER BY created_at, id"""
SELECT_LETTERS = f"""
SELECT {_LETTER} FROM langmem_dead_letters
WHERE (%(app_filter)s::text IS NULL OR app_name = %(app_filter)s)
    AND (%(status)s::text IS NULL OR status = %(status)s)
ORDER BY created_at, id LIMIT %(limit)s"""
RETRY_LETTER = f"""
UPDATE langmem_dead_letters SET status = 'retry', updated_at = now()
WHERE id = %(id)s AND status <> 'done' RETURNING {_LETTER}"""


def cursor_from_row(row: Row) -> ExtractionCursor:
    return ExtractionCursor(
        thread_id=row["thread_id"],
        last_message_id=row["last_message_id"],
        last_message_digest=row["last_message_digest"],
        message_count=row["message_count"],
        last_extracted_at=row["last_extracted_at"],
        updated_at=row["updated_at"],
        message_keys=bytes(row["message_keys"] or b""),
        pending_retries=row["pending_retries"],
        retired_keys=bytes(row["retired_keys"] or b""),
    )


def letter_from_row(row: Row) -> DeadLetter:
    return DeadLetter(
        id=row["id"],
        app_name=row["app_name"],
        user_id=row["user_id"],
        thread_id=row["thread_id"],
        status=DeadLetterStatus(row["status"]),
        error=row["error"],
        attempts=row["attempts"],
        message_ids=list(row["message_ids"]),
        messages=list(row["messages"]),
        created_at=row["created_at"].astimezone(timezone.utc),
        updated_at=row["updated_at"].astimezone(timezone.utc),
    )


def read_cursor(
    user: UserKey, thread_id: str
) -> Generator[tuple[str, dict[str, Any]], Row | None, ExtractionCursor | None]:
    """Read a thread's extraction cursor, sans-I/O for a caller with its own connection
    (the queue's enqueue, in its transaction): yields (statement, parameters), is sent
    the first row (a dict, or None) and returns the cursor, or None."""
    row = yield SELECT_CURSOR, _params(user, thread_id)
    return None if row is None else cursor_from_row(row)


def op_for(op: c.ClaimOp[Any]) -> Op:
    """The op's plan as SQL, and whether it runs in one transaction (`write=False` when
    each of its statements is atomic by itself and they need no BEGIN / COMMIT)."""
    return Op(claim_sql(c.plan(op)), write=_atomic(c.closed(op)))


def _atomic(op: c.ClaimCall) -> bool:
    match op:
        case c.ClaimThread() | c.RetryDeadLetter():
            return True
        case c.SaveProgress(dead_letter=letter, resolved=resolved):
            return letter is not None or bool(resolved)
        case _:
            return False


def claim_sql(plan: ClaimPlan[T]) -> Plan[T]:
    """Run a claim plan (`service/claims.py`) as SQL: each step becomes the statements
    of its `ClaimSql` method."""
    run = ClaimSql()
    reply: object = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as done:
            result: T = done.value
            return result
        reply = yield from run.dispatch(step)


class ClaimSql:
    """PostgreSQL's claim executor, sans-I/O: the methods of `ClaimExecutor`, each a plan
    that yields the step's statements and returns its result, for the sync and async
    drivers. A save's claim check, renewal and cursor are one statement."""

    def __init__(self) -> None:
        self._taken: Row | None = None
        """The claim row `LockThread` took (its attempts and batch: no second read)."""

    def dispatch(self, step: ClaimStep) -> Plan[object]:
        """The statements of `step`'s method; the one exhaustive match over the steps."""
        match step:
            case LockThread():
                return (yield from self.lock_thread(step))
            case ReadThread():
                return (yield from self.read_thread(step))
            case WriteThread():
                return (yield from self.write_thread(step))
            case CountFailure():
                return (yield from self.count_failure(step))
            case UnlockThread():
                yield from self.unlock_thread(step)
                return None
            case ListLetters():
                return (yield from self.list_letters(step))
            case RetryLetter():
                return (yield from self.retry_letter(step))
            case _:
                assert_never(step)

    def lock_thread(self, step: LockThread) -> Plan[bool]:
        p = _params(step.user, step.thread_id, owner=step.owner, ttl=step.ttl)
        taken = yield Sql(TAKE_CLAIM, p)
        self._taken = taken[0] if taken else None
        return bool(taken)

    def unlock_thread(self, step: UnlockThread) -> Plan[None]:
        yield Sql(RELEASE, _params(step.user, step.thread_id, owner=step.owner))

    def read_thread(self, step: ReadThread) -> Plan[ThreadState]:
        p = _params(step.user, step.thread_id)
        rows = yield Sql(SELECT_CURSOR, p)
        cursor = cursor_from_row(rows[0]) if rows else None
        if not step.attempts:
            return ThreadState(cursor)
        claim = self._taken
        if claim is None:
            found = yield Sql(SELECT_ATTEMPTS, p)
            claim = found[0] if found else {"attempts": 0, "batch": None}
        retries = []
        if cursor is not None and cursor.pending_retries:
            retries = yield Sql(SELECT_RETRIES, p)
        letters = [letter_from_row(r) for r in retries]
        return ThreadState(cursor, claim["attempts"], claim["batch"], letters)

    def write_thread(self, step: WriteThread) -> Plan[bool]:
        p = _params(step.user, step.thread_id)
        if step.cursor is not None:
            p |= _cursor_params(step.user, step.cursor)
        holder = step.holder
        if holder is not None:
            p |= {"owner": holder.owner, "ttl": holder.ttl}
            release = holder.ttl is None
            held = yield Sql(HOLD[release, step.clear_attempts, step.cursor is not None], p)
            if not held:
                return False
        else:
            if step.cursor is not None:
                yield Sql(UPSERT_CURSOR, p)
            if step.clear_attempts:
                yield Sql(CLEAR_ATTEMPTS, p)
        if step.letter is not None:
            yield Sql(UPSERT_LETTER, _letter_params(step.letter))
        if step.resolved:
            yield Sql(RESOLVE_LETTERS, p | {"ids": list(step.resolved)})
        if step.letter is not None or step.resolved:
            yield Sql(COUNT_PENDING, p)
        return True

    def count_failure(self, step: CountFailure) -> Plan[int]:
        p = _params(step.user, step.thread_id, batch=step.batch, error=step.error)
        rows = yield Sql(RECORD_FAILURE, p)
        return int(rows[0]["attempts"])

    def list_letters(self, step: ListLetters) -> Plan[list[DeadLetter]]:
        status = None if step.status is None else step.status.value
        p = {"app_filter": step.app_name, "status": status, "limit": step.limit}
        rows = yield Sql(SELECT_LETTERS, p)
        return [letter_from_row(r) for r in rows]

    def retry_letter(self, step: RetryLetter) -> Plan[DeadLetter | None]:
        rows = yield Sql(RETRY_LETTER, {"id": step.letter_id})
        if not rows:
            return None
        letter = letter_from_row(rows[0])
        yield Sql(COUNT_PENDING, _params(letter.user, letter.thread_id))
        return letter


def _params(user: UserKey, thread_id: str, **extra: Any) -> dict[str, Any]:
    return user_params(user, thread=thread_id, **extra)


def _cursor_params(user: UserKey, cursor: ExtractionCursor) -> dict[str, Any]:
    return _params(
        user,
        cursor.thread_id,
        last_id=cursor.last_message_id,
        digest=cursor.last_message_digest,
        count=cursor.message_count,
        extracted=cursor.last_extracted_at,
        keys=cursor.message_keys,
        retired=cursor.retired_keys,
    )


def _letter_params(letter: DeadLetter) -> dict[str, Any]:
    return _params(
        letter.user,
        letter.thread_id,
        id=letter.id,
        status=letter.status.value,
        error=letter.error,
        attempts=letter.attempts,
        ids=list(letter.message_ids),
        messages=Jsonb(letter.messages),
        created=letter.created_at,
    )
