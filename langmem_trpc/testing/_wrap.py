"""A service that forwards every call to another one, for fault-injection doubles."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from ..service.capabilities import Capability
from ..service.claims import ClaimOp
from ..service.protocol import MemoryService, SyncMemoryService
from ..service.reads import ReadPlan
from ..service.steps import Plan

T = TypeVar("T")


class DelegatingService(SyncMemoryService):
    """Forwards each method through `_call(name, *args, **kwargs)` to `inner`, with
    its arguments as given.

    Override `_call` to fail, delay, count or crash calls by name; the async
    twins go through `_call` too: a read's runs its sync method here in a worker
    thread, a write's builds its plan and runs `run_plan`. A
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
        result: T = self._call("run_plan", plan)
        return result

    def run_read(self, plan: ReadPlan) -> Any:
        """`inner`'s (the public reads below forward by name before they get here)."""
        return self._call("run_read", plan)

    def run_claim_op(self, op: ClaimOp[T]) -> T:
        """The op's public method on `inner` (`_call(op.name, ...)`, by its name)."""
        return self._call(op.name, **vars(op))  # type: ignore[no-any-return]

    # -- writes ------------------------------------------------------------------

    def add(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("add", *args, **kwargs)

    def add_many(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("add_many", *args, **kwargs)

    def update(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("update", *args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("delete", *args, **kwargs)

    def clear(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("clear", *args, **kwargs)

    def purge(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("purge", *args, **kwargs)

    def restore(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("restore", *args, **kwargs)

    def restore_version(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("restore_version", *args, **kwargs)

    def versions(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("versions", *args, **kwargs)

    def set_expiry(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("set_expiry", *args, **kwargs)

    def setup(self, *args: Any, **kwargs: Any) -> Any:
        self._call("setup", *args, **kwargs)

    def close(self) -> None:
        self.inner.close()

    # -- reads -------------------------------------------------------------------

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get", *args, **kwargs)

    def read(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("read", *args, **kwargs)

    def deleted(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("deleted", *args, **kwargs)

    def search(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("search", *args, **kwargs)

    def history(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("history", *args, **kwargs)

    def count(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("count", *args, **kwargs)

    def users(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("users", *args, **kwargs)

    def expired(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("expired", *args, **kwargs)

    # -- async reads: the sync method above in a worker thread, so `_call` sees the name

    async def aget(self, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.get, *args, **kwargs)

    async def aread(self, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.read, *args, **kwargs)

    async def adeleted(self, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.deleted, *args, **kwargs)

    async def asearch(self, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.search, *args, **kwargs)

    async def ahistory(self, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.history, *args, **kwargs)

    async def acount(self, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.count, *args, **kwargs)

    async def ausers(self, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.users, *args, **kwargs)
