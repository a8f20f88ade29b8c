"""One service's cache of search candidates' `Entry` objects, keyed by row version.

Building an `Entry` from a row costs more than scoring it (a typical search
reads ~140 candidates), so the search statement returns each candidate's row
version (`xmin`, `updated_at`) and only ids not held at that version are
fetched in full. A write makes a new row version: no stale entry is served,
and nothing needs invalidating.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from ...types import Entry, UserKey

Version = tuple[str, datetime]
"""(xmin as text, updated_at) of one row version."""

MAX_ENTRIES = 20_000
"""Default bound (`entry_cache_size`): about 2 KB an entry with a short text, so ~40 MB."""


class EntryCache:
    """Bounded (oldest first out) map of (user, memory id) -> (version, Entry)."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._max = max_entries
        self._items: dict[tuple[UserKey, str], tuple[Version, Entry]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        self._items.clear()

    def put(self, user: UserKey, entry: Entry, version: Version) -> None:
        if self._max <= 0:
            return
        key = (user, entry.id)
        if key not in self._items and len(self._items) >= self._max:
            del self._items[next(iter(self._items))]
        self._items[key] = (version, entry)

    def split(
        self, user: UserKey, rows: Iterable[tuple[str, Version]]
    ) -> tuple[dict[str, Entry], list[str]]:
        """Entries held at the given versions, and the ids to fetch."""
        found: dict[str, Entry] = {}
        missing: list[str] = []
        for memory_id, version in rows:
            held = self._items.get((user, memory_id))
            if held is not None and held[0] == version:
                found[memory_id] = held[1]
            else:
                missing.append(memory_id)
        return found, missing
