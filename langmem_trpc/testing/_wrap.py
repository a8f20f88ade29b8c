"""A service that forwards every call to another one, for fault-injection doubles."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from ..service._claims import ClaimOp
from ..service._steps import Plan
from ..service.capabilities import Capability
from ..service.protocol import MemoryService, SyncMemoryService
from ..types import Entry, HistoryEvent, Memory, SearchOptions, Source, UserKey

__all__ = ["DelegatingService"]

T = TypeVar("T")


class DelegatingService(SyncMemoryService):
    """Forwards each method through `_call(name, *args, **kwargs)` to `inner`.

    Override `_call` to fail, delay, count or crash calls by name; the async
    twins come from `SyncMemoryService`, so they go through `_call` too. A
    cursor, claim or dead-letter call reaches `_call` under its public name
    (`"save_progress"`), with its validated arguments as keywords.
    """

    def __init__(self, inner: MemoryService) -> None:
        self.inner = inner
        self.language = inner.language
        self._limits = inner.limits

    @property
    def capabilities(self) -> frozenset[Capability]:
        """The inner service's."""
        return self.inner.capabilities

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)

    def run_plan(self, plan: Plan[T]) -> T:
        return self._call("run_plan", plan)  # type: ignore[no-any-return]

    def add(self, user: UserKey, text: str, **kwargs: Any) -> Entry:  # type: ignore[override]
        return self._call("add", user, text, **kwargs)  # type: ignore[no-any-return]

    def add_many(self, user: UserKey, items: Sequence[str | Memory], **kwargs: Any) -> list[Entry]:  # type: ignore[override]
        return self._call("add_many", user, items, **kwargs)  # type: ignore[no-any-return]

    def update(self, user: UserKey, memory_id: str, text: str, **kwargs: Any) -> Entry:  # type: ignore[override]
        return self._call("update", user, memory_id, text, **kwargs)  # type: ignore[no-any-return]

    def delete(self, user: UserKey, memory_id: str, *, source: Source | None = None) -> bool:
        return self._call("delete", user, memory_id, source=source)  # type: ignore[no-any-return]

    def clear(self, user: UserKey, *, source: Source | None = None) -> int:
        return self._call("clear", user, source=source)  # type: ignore[no-any-return]

    def purge(self, user: UserKey, memory_id: str | None = None) -> int:
        return self._call("purge", user, memory_id)  # type: ignore[no-any-return]

    def set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | None) -> bool:
        return self._call("set_expiry", user, memory_id, expires_at)  # type: ignore[no-any-return]

    def expired(self, user: UserKey, limit: int | None = None) -> list[str]:
        return self._call("expired", user, limit)  # type: ignore[no-any-return]

    def get(self, user: UserKey, memory_id: str) -> Entry | None:
        return self._call("get", user, memory_id)  # type: ignore[no-any-return]

    def read(self, user: UserKey, limit: int | None = None) -> list[Entry]:
        return self._call("read", user, limit)  # type: ignore[no-any-return]

    def search(
        self, user: UserKey, query: str | None = None, options: SearchOptions | None = None
    ) -> list[Entry]:
        return self._call("search", user, query, options)  # type: ignore[no-any-return]

    def history(self, user: UserKey, memory_id: str) -> list[HistoryEvent]:
        return self._call("history", user, memory_id)  # type: ignore[no-any-return]

    def count(self, user: UserKey) -> int:
        return self._call("count", user)  # type: ignore[no-any-return]

    def users(self, app_name: str | None = None) -> list[UserKey]:
        return self._call("users", app_name)  # type: ignore[no-any-return]

    def run_claim_op(self, op: ClaimOp[T]) -> T:
        """The op's public method on `inner` (`_call(op.name, ...)`, by its name)."""
        return self._call(op.name, **vars(op))  # type: ignore[no-any-return]

    def restore(self, user: UserKey, entry: Entry, history: Sequence[HistoryEvent] = ()) -> Entry:
        return self._call("restore", user, entry, history)  # type: ignore[no-any-return]

    def setup(self) -> None:
        self._call("setup")

    def close(self) -> None:
        self.inner.close()
