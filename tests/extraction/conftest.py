"""Fixtures for the write path: real backends (in-memory reference, SQLite when built) and failure injection."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langmem_trpc import InMemoryMemoryService, SQLiteMemoryService, UserKey
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.testing._wrap import DelegatingService

BACKENDS = ["memory", "sqlite"]


def make_service(kind: str, tmp_path: Path) -> MemoryService:
    if kind == "sqlite":
        return SQLiteMemoryService(str(tmp_path / "memories.db"))
    return InMemoryMemoryService()


@pytest.fixture(params=BACKENDS)
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryService]:
    svc = make_service(request.param, tmp_path)
    yield svc
    svc.close()


@pytest.fixture
def user() -> UserKey:
    return UserKey("app", "alice")


class Crash(BaseException):
    """Stands in for the process dying: nothing in the library catches it."""


class FlakyService(DelegatingService):
    """Delegates to a real service; `fail[method]` raises that error, `crash_on_write` dies at write N."""

    def __init__(self, inner: MemoryService) -> None:
        super().__init__(inner)
        self.fail: dict[str, BaseException] = {}
        self.crash_on_write: int | None = None
        self.writes = 0

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name in self.fail:
            raise self.fail[name]
        if name in {"add", "update", "delete", "clear"}:
            self.writes += 1
            if self.crash_on_write is not None and self.writes == self.crash_on_write:
                self.crash_on_write = None
                raise Crash(f"crash at write {self.writes}")
        return super()._call(name, *args, **kwargs)
