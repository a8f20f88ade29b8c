"""Memory expiry on SQLite (`expires_at`, for MemoryStore's TTL): its own SQL and methods.

`expires_at` is integer microseconds (UTC) like every other time, NULL for never.
Reads hide an expired row in Python (`service.rules.unexpired`); the sweep's query
uses migration 7's partial index.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import TYPE_CHECKING

from ...service.rules import (
    check_expiry,
    check_memory_id,
    check_read_limit,
    check_user,
    utcnow,
)
from ...types import Entry, UserKey
from ._sql import LIVE, to_us

if TYPE_CHECKING:
    from ._connection import Database


SET_EXPIRY = f"UPDATE memories SET expires_at = ? WHERE {LIVE} AND id = ?"
SELECT_EXPIRED = (
    f"SELECT id FROM memories WHERE {LIVE} AND expires_at IS NOT NULL AND expires_at <= ?"
    " ORDER BY expires_at, id"
)


def set_row_expiry(conn: sqlite3.Connection, rid: int, expires_at: datetime | None) -> None:
    """Inside a rewrite's transaction: the row's new expiry (a revive clears a passed one)."""
    conn.execute("UPDATE memories SET expires_at = ? WHERE rid = ?", (to_us(expires_at), rid))


def restore_expiry(conn: sqlite3.Connection, user: tuple[str, str], entry: Entry) -> None:
    """Inside a restore's transaction: write back the restored memory's expiry."""
    if entry.expires_at is not None:
        conn.execute(SET_EXPIRY, (to_us(entry.expires_at), *user, entry.id))


class ExpiryMixin:
    """`set_expiry` / `expired` for `SQLiteMemoryService` (its `_db` is the Database)."""

    _db: Database

    def set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | str | None) -> bool:
        user = check_user(user)
        check_memory_id(memory_id)
        checked = check_expiry(expires_at)
        at = None if checked is None else to_us(checked)
        params = (at, user.app_name, user.user_id, memory_id)
        return bool(self._db.write(lambda conn: conn.execute(SET_EXPIRY, params).rowcount))

    def expired(self, user: UserKey, limit: int | None = None) -> list[str]:
        user, limit = check_user(user), check_read_limit(limit)
        query = SELECT_EXPIRED
        params: tuple[object, ...] = (user.app_name, user.user_id, to_us(utcnow()))
        if limit is not None:
            query, params = query + " LIMIT ?", (*params, limit)
        rows = self._db.read(lambda conn: conn.execute(query, params).fetchall())
        return [str(r[0]) for r in rows]
