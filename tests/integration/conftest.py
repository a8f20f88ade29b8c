"""Shared fixtures for the integration tests: services, a recording worker, a broken backend."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from langmem_trpc import InMemoryMemoryService, MemoryStore, UserKey
from langmem_trpc.service.protocol import MemoryService, SyncMemoryService
from langmem_trpc.service.reads import ReadPlan
from langmem_trpc.testing import HashingEmbeddings
from tests._pg import wipe_postgres

SECRET = "postgresql://admin:hunter2@db.internal:5432/memories"


class RecordingWorker:
    """Stands in for AutoMemoryWorker where a test only counts hand-offs."""

    def __init__(self) -> None:
        self.jobs: list[tuple[UserKey, str, list[BaseMessage]]] = []
        self.async_calls = 0
        self._lock = threading.Lock()

    def enqueue(self, user: UserKey, thread_id: str, messages: list[BaseMessage]) -> None:
        with self._lock:
            self.jobs.append((user, thread_id, list(messages)))

    async def aenqueue(self, user: UserKey, thread_id: str, messages: list[BaseMessage]) -> None:
        self.async_calls += 1
        self.enqueue(user, thread_id, messages)


class ExplodingWorker:
    def enqueue(self, *args: Any) -> None:
        raise RuntimeError("queue on fire")

    async def aenqueue(self, *args: Any) -> None:
        raise RuntimeError("queue on fire")


def _explode(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(f"could not connect to {SECRET}: SELECT * FROM memories WHERE user_id = $1")


class BrokenService(SyncMemoryService):
    """Every call fails with a driver-style error carrying a DSN and SQL."""

    run_plan = run_read = run_claim_op = _explode  # type: ignore[assignment]


class CountingService(InMemoryMemoryService):
    """The reference service, counting reads and searches (for cache tests)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reads = 0
        self.searches = 0

    def run_read(self, plan: ReadPlan) -> Any:
        """Every read, sync or async, runs a plan here; its name says which read it is."""
        if plan.__name__ == "read":
            self.reads += 1
        elif plan.__name__ == "search":
            self.searches += 1
        return super().run_read(plan)


@pytest.fixture
def service() -> CountingService:
    return CountingService(embeddings=HashingEmbeddings())


@pytest.fixture
def broken() -> BrokenService:
    return BrokenService()


@pytest.fixture
def worker() -> RecordingWorker:
    return RecordingWorker()


ALICE = UserKey("demo", "alice")
BOB = UserKey("demo", "bob")


def ids(app: str = "demo", user: str = "alice") -> dict[str, Any]:
    return {"app_name": app, "user_id": user}


# -- one fresh service / MemoryStore per backend (the store tests: test_store*.py) -------------

BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def backend_service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryService]:
    """A fresh, empty service of one backend, with the hashing embedder."""
    svc: MemoryService
    if request.param == "memory":
        svc = InMemoryMemoryService(embeddings=HashingEmbeddings())
    elif request.param == "sqlite":
        from langmem_trpc.backends.sqlite import SQLiteMemoryService

        svc = SQLiteMemoryService(str(tmp_path / "store.db"), embeddings=HashingEmbeddings())
    else:
        from langmem_trpc.backends.postgres import PostgresMemoryService

        url = request.getfixturevalue("pg_module_url")
        svc = PostgresMemoryService(url, HashingEmbeddings(), pool_size=2)
        svc.setup()  # type: ignore[attr-defined]
        wipe_postgres(url)
    yield svc
    svc.close()


@pytest.fixture
def backend_store(backend_service: MemoryService) -> Iterator[MemoryStore]:
    with MemoryStore(backend_service) as store:
        yield store
