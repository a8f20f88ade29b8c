"""The rows of the `records` table: their kinds, keys and filter-safe user scopes.

Memories, history events and threads (cursor, claim, dead letters) are rows of
one table, JSON in `body`; filters splice only hex digests and fixed words,
never a caller's id or text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ...types import UserKey

TABLE = "records"
MEMORY, HISTORY, THREAD = "m", "h", "t"


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:32]


def scope_of(user: UserKey) -> str:
    """The user as a filter-safe digest; the length prefix keeps ('a:b','c') != ('a','b:c')."""
    return digest(f"{len(user.app_name)}:{user.app_name}{user.user_id}")


def memories_of(users: Sequence[UserKey] | None) -> str:
    """The filter on the memory rows of `users` (every user's when None or empty)."""
    where = f"rec = '{MEMORY}'"
    if users:
        where += " AND scope IN (" + ", ".join(f"'{scope_of(u)}'" for u in users) + ")"
    return where


def record(rec: str, user: UserKey, ref: str, body: str, **more: Any) -> dict[str, Any]:
    """A row of `records`, `ref` (a memory or thread id) as its digest; an event's key is its seq."""
    scope, refh = scope_of(user), digest(ref)
    key = f"{rec}:{scope}:" + (f"{more['seq']:020d}" if rec == HISTORY else refh)
    row = {"key": key, "rec": rec, "scope": scope, "app": user.app_name, "user": user.user_id}
    return row | {"refh": refh, "body": body, **more}
