"""The re-embed conformance rule (`ReembedConformance`) on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.testing import HashingEmbeddings, ReembedConformance


class TestSQLiteReembed(ReembedConformance):
    @pytest.fixture
    def service(self, tmp_path: Path) -> SQLiteMemoryService:
        return SQLiteMemoryService(tmp_path / "m.db", HashingEmbeddings())

    @pytest.fixture
    def service_url(self, tmp_path: Path) -> str:
        return f"sqlite://{tmp_path / 'm.db'}"


@pytest.fixture
async def opened(pg_url: str) -> AsyncIterator[Callable[[], object]]:
    """Services on a fresh database per test (a re-embed changes the column's dimension),
    closed inside the test's event loop (an async pool must close before its loop)."""
    from langmem_trpc.backends.postgres import PostgresMemoryService

    made: list[PostgresMemoryService] = []

    def make() -> PostgresMemoryService:
        service = PostgresMemoryService(pg_url, HashingEmbeddings())
        service.setup()
        made.append(service)
        return service

    yield make
    for service in made:
        await service.aclose()


@pytest.mark.postgres
class TestPostgresReembed(ReembedConformance):
    @pytest.fixture
    def service(self, opened: Callable[[], object]) -> object:
        return opened()

    @pytest.fixture
    def service_url(self, pg_url: str) -> str:
        return pg_url
