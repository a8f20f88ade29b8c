"""A service that forwards every call to another one, for fault-injection doubles."""

from __future__ import annotations

from typing import Any, TypeVar

from ..service.capabilities import Capability
from ..service.claims import ClaimOp
from ..service.protocol import MemoryService, SyncMemoryService
from ..service.steps import Plan

T = TypeVar("T")


class DelegatingService(SyncMemoryService):
    """Forwards each method through `_call(name, *args, **kwargs)` to `inner`, with
    its arguments as given.

    Override `_call` to fail, delay, count or crash calls by name; the async
    twins come from `SyncMemoryService` (a read's runs its sync method, a write's
    builds its plan and runs `run_plan`), so they go through `_call` too. A
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
