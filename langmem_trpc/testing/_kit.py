"""What the conformance mixins share: the `Client` that runs one test body sync and
async, the users and time the tests write with, and the field-named refusal check."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

import pytest

from ..errors import InvalidInputError
from ..service.protocol import MemoryService
from ..types import UserKey

ALICE = UserKey("app", "alice")
BOB = UserKey("app", "bob")
ALICE_OTHER_APP = UserKey("other-app", "alice")
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


class Client:
    """Calls the sync method or its `a*` twin, always awaitable, so one body tests both."""

    def __init__(self, service: MemoryService, mode: str) -> None:
        self.service = service
        self.mode = mode

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if self.mode == "async":
            twin: Callable[..., Awaitable[Any]] = getattr(self.service, "a" + name)
            return twin
        method = getattr(self.service, name)

        async def call_sync(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        return call_sync


async def refused(error: type[InvalidInputError], field: str, call: Awaitable[Any]) -> None:
    """`call` raises `error` naming `field`."""
    with pytest.raises(error) as info:
        await call
    assert info.value.field == field
