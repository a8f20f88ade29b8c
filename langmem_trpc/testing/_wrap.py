"""A service that forwards every call to another one, for fault-injection doubles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..service.capabilities import Capability
from ..service.claims import ClaimOp
from ..service.protocol import MemoryService, SyncMemoryService, _named

T = TypeVar("T")
P = ParamSpec("P")


def _forward(
    method: Callable[Concatenate[MemoryService, P], T],
) -> Callable[Concatenate[DelegatingService, P], T]:
    """`method` as `self._call(name, *args, **kwargs)`, with its arguments as given."""
    name = method.__name__

    def forward(self: DelegatingService, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = self._call(name, *args, **kwargs)
        return result

    return _named(forward, method, name)


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

    run_plan = _forward(MemoryService.run_plan)
    add = _forward(MemoryService.add)
    add_many = _forward(MemoryService.add_many)
    update = _forward(MemoryService.update)
    delete = _forward(MemoryService.delete)
    clear = _forward(MemoryService.clear)
    purge = _forward(MemoryService.purge)
    restore = _forward(MemoryService.restore)
    set_expiry = _forward(MemoryService.set_expiry)
    expired = _forward(MemoryService.expired)
    get = _forward(MemoryService.get)
    read = _forward(MemoryService.read)
    deleted = _forward(MemoryService.deleted)
    search = _forward(MemoryService.search)
    history = _forward(MemoryService.history)
    count = _forward(MemoryService.count)
    users = _forward(MemoryService.users)
    setup = _forward(MemoryService.setup)

    def run_claim_op(self, op: ClaimOp[T]) -> T:
        """The op's public method on `inner` (`_call(op.name, ...)`, by its name)."""
        return self._call(op.name, **vars(op))  # type: ignore[no-any-return]

    def close(self) -> None:
        self.inner.close()
