"""PostgreSQL: extraction cursors with their covered keys, thread claims,
failed attempts and dead letters: each validated `ClaimOp` as a sans-I/O plan
(contract: `langmem_trpc.service.claims`).

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
from typing import Any, assert_never

from psycopg.types.json import Jsonb

from ...service import claims as c
from ...types import DeadLetter, DeadLetterStatus, ExtractionCursor, ThreadClaim, UserKey
from ._ops import Op, Plan, Sql
from ._sql import Row, user_params

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
HOLD = {True: _HOLD.format(_RELEASE), False: _HOLD.format(_RENEW)}
"""release -> the UPDATE that checks the claim is ours and locks its row, then releases it
or renews it (`ttl`); no row: not ours."""
HOLD_AND_SAVE_CURSOR = {
    release: f"WITH held AS ({_HOLD.format(sets + ', batch = NULL, attempts = 0, last_error = NULL')})"
    f"\n{_UPSERT_CURSOR.format('SELECT', 'FROM held')}\nRETURNING 1 AS held"
    for release, sets in ((True, _RELEASE), (False, _RENEW))
}
"""release -> that UPDATE, clearing the failed attempts, and the cursor upsert in one
statement: the cursor is written only if the claim is ours."""
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


def _params(user: UserKey, thread_id: str, **extra: Any) -> dict[str, Any]:
    return user_params(user, thread=thread_id, **extra)


def op_for(op: c.ClaimOp[Any]) -> Op:
    """The plan that runs `op`, and whether it writes (`write=False` on a plan of one
    statement: atomic by itself, so no BEGIN / COMMIT)."""
    match c.closed(op):
        case c.GetCursor(user=user, thread_id=thread_id):
            return Op(get_cursor(user, thread_id), write=False)
        case c.SetCursor(user=user, cursor=cursor):
            return Op(_one(UPSERT_CURSOR, _cursor_params(user, cursor)), write=False)
        case c.ClaimThread() as claim:
            return Op(claim_thread(claim), write=True)
        case c.SaveProgress() as progress:
            writes = progress.dead_letter is not None or bool(progress.resolved)
            return Op(save_progress(progress), write=writes)
        case c.RecordFailure() as failure:
            return Op(record_failure(failure), write=False)
        case c.ReleaseThread(user=user, thread_id=thread_id, owner=owner):
            return Op(_one(RELEASE, _params(user, thread_id, owner=owner)), write=False)
        case c.ListDeadLetters() as listing:
            return Op(dead_letters(listing), write=False)
        case c.RetryDeadLetter(letter_id=letter_id):
            return Op(retry_dead_letter(letter_id), write=True)
        case never:
            assert_never(never)


def _one(sql: str, params: dict[str, Any]) -> Plan[None]:
    yield Sql(sql, params)


def get_cursor(user: UserKey, thread_id: str) -> Plan[ExtractionCursor | None]:
    rows = yield Sql(SELECT_CURSOR, _params(user, thread_id))
    return cursor_from_row(rows[0]) if rows else None


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


def claim_thread(op: c.ClaimThread) -> Plan[ThreadClaim | None]:
    p = _params(op.user, op.thread_id, owner=op.owner, ttl=op.ttl)
    taken = yield Sql(TAKE_CLAIM, p)
    if not taken:
        return None
    cursor = yield from get_cursor(op.user, op.thread_id)
    retries = []
    if cursor is not None and cursor.pending_retries:
        retries = yield Sql(SELECT_RETRIES, p)
    return ThreadClaim(
        cursor=cursor,
        attempts=taken[0]["attempts"],
        failed_batch=taken[0]["batch"],
        retries=[letter_from_row(r) for r in retries],
    )


def save_progress(op: c.SaveProgress) -> Plan[bool]:
    p = _params(op.user, op.thread_id, owner=op.owner, ttl=op.ttl)
    if op.cursor is None:
        held = yield Sql(HOLD[op.ttl is None], p)
    else:
        p |= _cursor_params(op.user, op.cursor)
        held = yield Sql(HOLD_AND_SAVE_CURSOR[op.ttl is None], p)
    if not held:
        return False
    if op.dead_letter is not None:
        yield Sql(UPSERT_LETTER, _letter_params(op.dead_letter))
    if op.resolved:
        yield Sql(RESOLVE_LETTERS, _params(op.user, op.thread_id, ids=list(op.resolved)))
    if op.dead_letter is not None or op.resolved:
        yield Sql(COUNT_PENDING, p)
    return True


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


def record_failure(op: c.RecordFailure) -> Plan[int]:
    rows = yield Sql(RECORD_FAILURE, _params(op.user, op.thread_id, batch=op.batch, error=op.error))
    return int(rows[0]["attempts"])


def dead_letters(op: c.ListDeadLetters) -> Plan[list[DeadLetter]]:
    status = None if op.status is None else op.status.value
    rows = yield Sql(
        SELECT_LETTERS, {"app_filter": op.app_name, "status": status, "limit": op.limit}
    )
    return [letter_from_row(r) for r in rows]


def retry_dead_letter(letter_id: str) -> Plan[DeadLetter | None]:
    rows = yield Sql(RETRY_LETTER, {"id": letter_id})
    if not rows:
        return None
    letter = letter_from_row(rows[0])
    yield Sql(COUNT_PENDING, _params(letter.user, letter.thread_id))
    return letter
