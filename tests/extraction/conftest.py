"""Fixtures for the write path: real backends (in-memory reference, SQLite when built) and failure injection."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langmem_trpc import InMemoryMemoryService, SQLiteMemoryService, UserKey
from langmem_trpc.service.protocol import MemoryService, SyncMemoryService

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


class FlakyService(SyncMemoryService):
    """Delegates to a real service; `fail[method]` raises that error, `crash_on_write` dies at write N."""

    def __init__(self, inner: MemoryService) -> None:
        self.inner = inner
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
        return getattr(self.inner, name)(*args, **kwargs)

    def add(self, user, text, **kw):  # type: ignore[override]
        return self._call("add", user, text, **kw)

    def update(self, user, memory_id, text, **kw):  # type: ignore[override]
        return self._call("update", user, memory_id, text, **kw)

    def delete(self, user, memory_id, *, source=None):  # type: ignore[override]
        return self._call("delete", user, memory_id, source=source)

    def clear(self, user, *, source=None):  # type: ignore[override]
        return self._call("clear", user, source=source)

    def purge(self, user, memory_id=None):  # type: ignore[override]
        return self._call("purge", user, memory_id)

    def get(self, user, memory_id):  # type: ignore[override]
        return self._call("get", user, memory_id)

    def read(self, user, limit=None):  # type: ignore[override]
        return self._call("read", user, limit)

    def search(self, user, query=None, options=None):  # type: ignore[override]
        return self._call("search", user, query, options)

    def history(self, user, memory_id):  # type: ignore[override]
        return self._call("history", user, memory_id)

    def count(self, user):  # type: ignore[override]
        return self._call("count", user)

    def users(self, app_name=None):  # type: ignore[override]
        return self._call("users", app_name)

    def get_cursor(self, user, thread_id):  # type: ignore[override]
        return self._call("get_cursor", user, thread_id)

    def set_cursor(self, user, cursor):  # type: ignore[override]
        return self._call("set_cursor", user, cursor)
