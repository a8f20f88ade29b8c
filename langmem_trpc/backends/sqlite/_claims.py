"""SQLite's claim executor (contract: `langmem_trpc.service.claim_steps`): extraction
cursors in `cursors`, failed attempts in `thread_attempts`, dead letters in `dead_letters`.
Claims are not rows but `_locks.FileClaims` byte-range locks, so taking one costs no
write transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ...service import claims as c
from ...service.claim_steps import (
    CountFailure,
    ListLetters,
    LockThread,
    ReadThread,
    RetryLetter,
    ThreadState,
    UnlockThread,
    WriteThread,
    dispatch,
)
from ...service.steps import drive
from ...types import DeadLetter, DeadLetterStatus, ExtractionCursor, UserKey
from . import _sql as sql
from ._connection import Database
from ._locks import FileClaims

T = TypeVar("T")

_U = "app_name = ? AND user_id = ? AND thread_id = ?"

UPSERT_CURSOR = """INSERT INTO cursors (
    app_name, user_id, thread_id, last_message_id, last_message_digest, message_count,
    last_extracted_at, updated_at, message_keys, retired_keys
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (app_name, user_id, thread_id) DO UPDATE SET
    last_message_id = excluded.last_message_id,
    last_message_digest = excluded.last_message_digest,
    message_count = excluded.message_count,
    last_extracted_at = excluded.last_extracted_at,
    updated_at = excluded.updated_at,
    message_keys = excluded.message_keys,
    retired_keys = excluded.retired_keys"""
SELECT_CURSOR = (
    "SELECT thread_id, last_message_id, last_message_digest, message_count,"
    " last_extracted_at, updated_at, message_keys, pending_retries, retired_keys FROM cursors"
    f" WHERE {_U}"
)
COUNT_PENDING = f"""UPDATE cursors SET pending_retries = (
    SELECT count(*) FROM dead_letters WHERE {_U} AND status = 'retry') WHERE {_U}"""

SELECT_ATTEMPTS = f"SELECT batch, attempts FROM thread_attempts WHERE {_U}"
CLEAR_ATTEMPTS = f"DELETE FROM thread_attempts WHERE {_U}"
RECORD_FAILURE = """INSERT INTO thread_attempts (app_name, user_id, thread_id, batch, attempts, last_error)
VALUES (?, ?, ?, ?, 1, ?)
ON CONFLICT (app_name, user_id, thread_id) DO UPDATE SET
    attempts = CASE WHEN batch IS excluded.batch THEN attempts + 1 ELSE 1 END,
    batch = excluded.batch, last_error = excluded.last_error
RETURNING attempts"""

_LETTER = (
    "id, app_name, user_id, thread_id, status, error, attempts, message_ids, messages,"
    " created_at, updated_at"
)
UPSERT_LETTER = f"""INSERT INTO dead_letters ({_LETTER}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET status = excluded.status, error = excluded.error,
    attempts = excluded.attempts, updated_at = excluded.updated_at"""
RESOLVE_LETTER = f"UPDATE dead_letters SET status = 'done', updated_at = ? WHERE {_U} AND id = ?"
SELECT_RETRIES = (
    f"SELECT {_LETTER} FROM dead_letters WHERE {_U} AND status = 'retry' ORDER BY created_at, id"
)
SELECT_LETTERS = (
    f"SELECT {_LETTER} FROM dead_letters WHERE (? IS NULL OR app_name = ?)"
    " AND (? IS NULL OR status = ?) ORDER BY created_at, id LIMIT ?"
)
SELECT_LETTER = f"SELECT {_LETTER} FROM dead_letters WHERE id = ?"
RETRY_LETTER = "UPDATE dead_letters SET status = 'retry', updated_at = ? WHERE id = ?"
DELETE_USER_ATTEMPTS = "DELETE FROM thread_attempts WHERE app_name = ? AND user_id = ?"
DELETE_USER_LETTERS = "DELETE FROM dead_letters WHERE app_name = ? AND user_id = ?"


def row_to_cursor(row: Sequence[Any]) -> ExtractionCursor:
    return ExtractionCursor(
        thread_id=row[0],
        last_message_id=row[1],
        last_message_digest=row[2],
        message_count=row[3],
        last_extracted_at=sql.from_us(row[4]),
        updated_at=sql.from_us(row[5]),
        message_keys=bytes(row[6] or b""),
        pending_retries=row[7],
        retired_keys=bytes(row[8] or b""),
    )


def row_to_letter(row: Sequence[Any]) -> DeadLetter:
    return DeadLetter(
        id=row[0],
        app_name=row[1],
        user_id=row[2],
        thread_id=row[3],
        status=DeadLetterStatus(row[4]),
        error=row[5],
        attempts=row[6],
        message_ids=json.loads(row[7]),
        messages=json.loads(row[8]),
        created_at=sql.from_us_required(row[9]),
        updated_at=sql.from_us_required(row[10]),
    )


class SQLiteClaims:
    """`run_claim_op` of `SQLiteMemoryService`: drives the op's plan with a
    `SQLiteClaimSteps`."""

    _db: Database
    _now: Callable[..., datetime]
    _file_claims: FileClaims

    def run_claim_op(self, op: c.ClaimOp[T]) -> T:
        """Run the op's plan: the lock step on the claim file, the rest in the database."""
        run = SQLiteClaimSteps(self._db, self._now, self._file_claims)
        try:
            return drive(c.plan(op), lambda step: dispatch(run, step))
        except BaseException:
            if run.taken is not None:
                self._file_claims.release(*run.taken)  # a failed claim is given back
            raise


class SQLiteClaimSteps:
    """SQLite's `ClaimExecutor` for one op: the claim file's byte-range lock executes
    the lock steps, each other step is one read or write transaction."""

    def __init__(self, db: Database, now: Callable[..., datetime], files: FileClaims) -> None:
        self._db, self._now, self._files = db, now, files
        self.taken: tuple[tuple[str, str, str], str] | None = None
        """(thread, owner) of the claim this op's `LockThread` took."""

    def lock_thread(self, step: LockThread) -> bool:
        key = (step.user.app_name, step.user.user_id, step.thread_id)
        if not self._files.take(key, step.owner, step.ttl):
            return False
        self.taken = key, step.owner
        return True

    def unlock_thread(self, step: UnlockThread) -> None:
        self._files.release((step.user.app_name, step.user.user_id, step.thread_id), step.owner)

    def read_thread(self, step: ReadThread) -> ThreadState:
        key = (step.user.app_name, step.user.user_id, step.thread_id)

        def read(conn: sqlite3.Connection) -> ThreadState:
            row = conn.execute(SELECT_CURSOR, key).fetchone()
            cursor = None if row is None else row_to_cursor(row)
            if not step.attempts:
                return ThreadState(cursor)
            attempts = conn.execute(SELECT_ATTEMPTS, key).fetchone()
            retries = []
            if cursor is not None and cursor.pending_retries:
                retries = [row_to_letter(r) for r in conn.execute(SELECT_RETRIES, key)]
            if attempts is None:
                return ThreadState(cursor, retries=retries)
            return ThreadState(cursor, attempts[1], attempts[0], retries)

        return self._db.read(read)

    def write_thread(self, step: WriteThread) -> bool:
        key = (step.user.app_name, step.user.user_id, step.thread_id)
        holder = step.holder
        if holder is not None and not self._files.holds(key, holder.owner):
            return False
        if step.cursor is not None or step.letter is not None or step.resolved:
            self._db.write(lambda conn: self._write(conn, key, step))
        elif step.clear_attempts:
            self._db.write(lambda conn: conn.execute(CLEAR_ATTEMPTS, key))
        if holder is None:
            return True
        if holder.ttl is None:
            self._files.release(key, holder.owner)  # after the writes: the next job sees them
        else:
            self._files.renew(key, holder.owner, holder.ttl)
        return True

    def _write(
        self, conn: sqlite3.Connection, key: tuple[str, str, str], step: WriteThread
    ) -> None:
        now = sql.to_us(self._now())
        if step.letter is not None:
            conn.execute(UPSERT_LETTER, _letter_params(step.letter, now))
        for letter_id in step.resolved:
            conn.execute(RESOLVE_LETTER, (now, *key, letter_id))
        if step.cursor is not None:
            conn.execute(UPSERT_CURSOR, _cursor_params(key, step.cursor, now))
        if step.clear_attempts:
            conn.execute(CLEAR_ATTEMPTS, key)
        if step.letter is not None or step.resolved:
            conn.execute(COUNT_PENDING, (*key, *key))

    def count_failure(self, step: CountFailure) -> int:
        params = (step.user.app_name, step.user.user_id, step.thread_id, step.batch, step.error)
        return int(self._db.write(lambda conn: conn.execute(RECORD_FAILURE, params).fetchone()[0]))

    def list_letters(self, step: ListLetters) -> list[DeadLetter]:
        state = None if step.status is None else step.status.value
        query = (step.app_name, step.app_name, state, state, step.limit or -1)
        rows = self._db.read(lambda conn: conn.execute(SELECT_LETTERS, query).fetchall())
        return [row_to_letter(r) for r in rows]

    def retry_letter(self, step: RetryLetter) -> DeadLetter | None:
        return self._db.write(lambda conn: self._retry(conn, step.letter_id))

    def _retry(self, conn: sqlite3.Connection, letter_id: str) -> DeadLetter | None:
        row = conn.execute(SELECT_LETTER, (letter_id,)).fetchone()
        if row is None or row[4] == DeadLetterStatus.DONE.value:
            return None
        conn.execute(RETRY_LETTER, (sql.to_us(self._now()), letter_id))
        key = (row[1], row[2], row[3])
        conn.execute(COUNT_PENDING, (*key, *key))
        return row_to_letter(conn.execute(SELECT_LETTER, (letter_id,)).fetchone())


def purge_claims(conn: sqlite3.Connection, user: UserKey) -> None:
    """Part of purging a user: its failed attempts and dead letters go too."""
    conn.execute(DELETE_USER_ATTEMPTS, (user.app_name, user.user_id))
    conn.execute(DELETE_USER_LETTERS, (user.app_name, user.user_id))


def _letter_params(letter: DeadLetter, now: int | None) -> tuple[Any, ...]:
    return (
        letter.id,
        letter.app_name,
        letter.user_id,
        letter.thread_id,
        letter.status.value,
        letter.error,
        letter.attempts,
        json.dumps(letter.message_ids),
        json.dumps(letter.messages),
        sql.to_us(letter.created_at),
        now,
    )


def _cursor_params(
    key: tuple[str, str, str], cursor: ExtractionCursor, now: int | None
) -> tuple[Any, ...]:
    return (
        *key,
        cursor.last_message_id,
        cursor.last_message_digest,
        cursor.message_count,
        sql.to_us(cursor.last_extracted_at),
        now,
        cursor.message_keys,
        cursor.retired_keys,
    )
