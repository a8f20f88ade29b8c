"""Memory expiry on PostgreSQL (`expires_at`, for MemoryStore's TTL): its own SQL and plans.

`expires_at` is a timestamptz column (core migration 8 in `_sql.MIGRATIONS`);
NULL means never. Reads hide an expired row in Python
(`service._core.unexpired`), the TTL sweep finds expired rows through the
partial index `langmem_memories_expiring`. Setting an expiry changes no
content, `updated_at` or history; it does change the row version, so cached
entries are rebuilt.
"""

from __future__ import annotations

from datetime import datetime

from ..._time import ensure_utc
from ...service._core import check_memory_id, check_user, utcnow
from ...types import UserKey
from . import _sql
from ._plans import Op, Plan, Sql

__all__ = ["ExpiryOps", "expired", "set_expiry"]

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


class ExpiryOps:
    """The expiry ops of the PostgreSQL service (sync and async drivers run them)."""

    def _op_set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | None) -> Op:
        at = ensure_utc(expires_at, "expires_at") if expires_at is not None else None
        plan = set_expiry(check_user(user), check_memory_id(memory_id), at)
        return Op(plan, write=True)

    def _op_expired(self, user: UserKey, limit: int | None) -> Op:
        return Op(expired(check_user(user), limit), write=False)
