"""The namespaces of one user's items, cached per store and re-validated by index.

Only the rows know an item's scope, so each user's set is kept with a stamp
of cheap indexed reads (live count, id and `updated_at` of the newest memory)
that every write changes: a listing costs two index lookups per user until
something changes (or an item expires). At most `max_users` sets are kept (LRU).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime

from ...service.protocol import MemoryService
from ...service.rules import utcnow
from ...types import UserKey
from ._values import namespace_of

Stamp = tuple[int, str, str]


@dataclass(frozen=True)
class _Cached:
    stamp: Stamp
    spaces: frozenset[tuple[str, ...]]
    valid_until: datetime | None


class NamespaceCache:
    def __init__(self, max_users: int = 1024) -> None:
        self._max = max_users
        self._lock = threading.Lock()
        self._sets: OrderedDict[UserKey, _Cached] = OrderedDict()

    def spaces(self, service: MemoryService, user: UserKey) -> frozenset[tuple[str, ...]]:
        newest = service.read(user, 1)
        stamp: Stamp = (
            service.count(user),
            newest[0].id if newest else "",
            newest[0].updated_at.isoformat() if newest else "",
        )
        now = utcnow()
        with self._lock:
            cached = self._sets.get(user)
            if (
                cached is not None
                and cached.stamp == stamp
                and (cached.valid_until is None or now < cached.valid_until)
            ):
                self._sets.move_to_end(user)
                return cached.spaces
        entries = service.read(user)  # the service hides expired items
        expiries = [e.expires_at for e in entries if e.expires_at is not None]
        fresh = _Cached(
            stamp, frozenset(namespace_of(e) for e in entries), min(expiries, default=None)
        )
        with self._lock:
            self._sets[user] = fresh
            self._sets.move_to_end(user)
            while len(self._sets) > self._max:
                self._sets.popitem(last=False)
        return fresh.spaces

    def clear(self) -> None:
        with self._lock:
            self._sets.clear()
