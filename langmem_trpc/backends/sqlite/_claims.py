"""SQLite's claim ops (contract: `langmem_trpc.service.claims`): extraction cursors in `cursors`,
failed attempts in `thread_attempts`, dead letters in `dead_letters`. Claims are not
rows but `_locks.FileClaims` byte-range locks, so taking one costs no write transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar, assert_never, cast

from ...service import claims as c
from ...types import DeadLetter, DeadLetterStatus, ExtractionCursor, ThreadClaim, UserKey
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
    """`run_claim_op` of `SQLiteMemoryService`."""

    _db: Database
    _now: Callable[..., datetime]
    _file_claims: FileClaims

    def run_claim_op(self, op: c.ClaimOp[T]) -> T:
        """Run the op: claims on the claim file, the rest in the database."""
        return cast("T", self._claim_op(op))

    def _claim_op(self, op: c.ClaimOp[Any]) -> object:
        match c.closed(op):
            case c.GetCursor(user=user, thread_id=thread_id):
                key = (user.app_name, user.user_id, thread_id)
                row = self._db.read(lambda conn: conn.execute(SELECT_CURSOR, key).fetchone())
                return None if row is None else row_to_cursor(row)
            case c.SetCursor(user=user, cursor=cursor):
                return self._db.write(lambda conn: self._write_cursor(conn, user, cursor))
            case c.ClaimThread() as claim:
                return self._claim(claim)
            case c.SaveProgress() as progress:
                return self._save(progress)
            case c.RecordFailure() as failure:
                return self._count_failure(failure)
            case c.ReleaseThread(user=user, thread_id=thread_id, owner=owner):
                self._file_claims.release((user.app_name, user.user_id, thread_id), owner)
                return None
            case c.ListDeadLetters() as listing:
                return self._list_letters(listing)
            case c.RetryDeadLetter(letter_id=letter_id):
                return self._db.write(lambda conn: self._retry(conn, letter_id))
            case never:
                assert_never(never)

    def _count_failure(self, op: c.RecordFailure) -> int:
        params = (op.user.app_name, op.user.user_id, op.thread_id, op.batch, op.error)
        return int(self._db.write(lambda conn: conn.execute(RECORD_FAILURE, params).fetchone()[0]))

    def _list_letters(self, op: c.ListDeadLetters) -> list[DeadLetter]:
        state = None if op.status is None else op.status.value
        query = (op.app_name, op.app_name, state, state, op.limit or -1)
        rows = self._db.read(lambda conn: conn.execute(SELECT_LETTERS, query).fetchall())
        return [row_to_letter(r) for r in rows]

    def _write_cursor(
        self, conn: sqlite3.Connection, user: UserKey, cursor: ExtractionCursor
    ) -> None:
        conn.execute(
            UPSERT_CURSOR,
            (
                user.app_name,
                user.user_id,
                cursor.thread_id,
                cursor.last_message_id,
                cursor.last_message_digest,
                cursor.message_count,
                sql.to_us(cursor.last_extracted_at),
                sql.to_us(self._now()),
                cursor.message_keys,
                cursor.retired_keys,
            ),
        )

    def _claim(self, op: c.ClaimThread) -> ThreadClaim | None:
        key = (op.user.app_name, op.user.user_id, op.thread_id)
        if not self._file_claims.take(key, op.owner, op.ttl):
            return None

        def read(conn: sqlite3.Connection) -> ThreadClaim:
            row = conn.execute(SELECT_CURSOR, key).fetchone()
            cursor = None if row is None else row_to_cursor(row)
            attempts = conn.execute(SELECT_ATTEMPTS, key).fetchone()
            retries = []
            if cursor is not None and cursor.pending_retries:
                retries = [row_to_letter(r) for r in conn.execute(SELECT_RETRIES, key)]
            return ThreadClaim(
                cursor=cursor,
                attempts=0 if attempts is None else attempts[1],
                failed_batch=None if attempts is None else attempts[0],
                retries=retries,
            )

        try:
            return self._db.read(read)
        except BaseException:
            self._file_claims.release(key, op.owner)
            raise

    def _save(self, op: c.SaveProgress) -> bool:
        key = (op.user.app_name, op.user.user_id, op.thread_id)
        if not self._file_claims.holds(key, op.owner):
            return False
        letter, cursor = op.dead_letter, op.cursor

        def save(conn: sqlite3.Connection) -> None:
            now = sql.to_us(self._now())
            if letter is not None:
                conn.execute(UPSERT_LETTER, _letter_params(letter, now))
            for letter_id in op.resolved:
                conn.execute(RESOLVE_LETTER, (now, *key, letter_id))
            if cursor is not None:
                self._write_cursor(conn, op.user, cursor)
                conn.execute(CLEAR_ATTEMPTS, key)
            if letter is not None or op.resolved:
                conn.execute(COUNT_PENDING, (*key, *key))

        if cursor is not None or letter is not None or op.resolved:
            self._db.write(save)
        if op.ttl is None:
            self._file_claims.release(key, op.owner)
        else:
            self._file_claims.renew(key, op.owner, op.ttl)
        return True

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
