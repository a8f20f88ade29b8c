"""Memory expiry on PostgreSQL (`expires_at`, for MemoryStore's TTL): its own SQL and plans.

`expires_at` is core migration 11's column (NULL: never). Reads hide an
expired row in Python (`service.rules.unexpired`); the sweep finds them by the
partial index `langmem_memories_expiring`. Setting an expiry changes no
content, `updated_at` or history, but it does make a new row version, so
cached entries are rebuilt.
"""

from __future__ import annotations

from datetime import datetime

from ...service.rules import utcnow
from ...types import UserKey
from . import _sql
from ._ops import Plan, Sql

SET_EXPIRY = """
UPDATE langmem_memories SET expires_at = %(at)s
WHERE app_name = %(app)s AND user_id = %(user)s AND id = %(id)s AND deleted_at IS NULL
RETURNING id"""
SELECT_EXPIRED = """
SELECT id FROM langmem_memories
WHERE app_name = %(app)s AND user_id = %(user)s AND deleted_at IS NULL
  AND expires_at IS NOT NULL AND expires_at <= %(now)s
ORDER BY expires_at, id
LIMIT %(limit)s"""


def set_expiry(user: UserKey, memory_id: str, at: datetime | None) -> Plan[bool]:
    rows = yield Sql(SET_EXPIRY, _sql.user_params(user, id=memory_id, at=at))
    return bool(rows)


def expired(user: UserKey, limit: int | None) -> Plan[list[str]]:
    params = _sql.user_params(user, now=utcnow(), limit=limit if limit and limit > 0 else None)
    rows = yield Sql(SELECT_EXPIRED, params)
    return [str(r["id"]) for r in rows]
