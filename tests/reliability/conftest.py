"""Fixtures for the reliability suite: one factory per real backend, look-alike identities.

Every backend is real (in-memory reference, SQLite file, PostgreSQL from the
session server in tests/conftest.py). Faults are injected around the real
service (`FaultyService`) or, for PostgreSQL, by stopping a dedicated server.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from langmem_trpc import InMemoryMemoryService, UserKey
from langmem_trpc.errors import BackendError
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.testing._wrap import DelegatingService
from tests._pg import wipe_postgres

#: A connection string with a password: it must never reach a model, a tool message or a log.
SECRET_DSN = "postgresql://admin:s3cr3t-hunter2@db.internal:5432/memories"
SECRET_WORD = "s3cr3t-hunter2"

#: Look-alike app names and user ids: all distinct users, compared exactly (types.py).
#: After the first lines: separator-bearing ids (U+001F, U+001E, U+2028) that join
#: into one string the same way as a neighbour, look-alikes (Cyrillic "а",
#: fullwidth forms, zero-width joiners) and normalisation variants (NFC "é" vs
#: NFD "e" + U+0301).
APPS = [
    "app",
    "App",
    "app ",
    "a/b",
    "a%",
    "a'b",
    "a:b",
    "*",
    "a\x1fb",
    "a",
    "3\x1fa",
    "3",
    "\u0430pp",
    "\uff41\uff50\uff50",
    "app\u200d",
    "caf\u00e9",
    "cafe\u0301",
]
USER_IDS = [
    "alice",
    "Alice",
    "alice ",
    "alice\u200b",
    "al/ice",
    "al%ice",
    "o'brien",
    "a:b",
    "*",
    "%",
    "_",
    "alice\t",
    "x" * 512,
    "b\x1fc",
    "c",
    "a\x1fb",
    "b",
    "\u0430lice",
    "\uff41\uff4c\uff49\uff43\uff45",
    "al\u200cice",
    "jos\u00e9",
    "jose\u0301",
    "alice\u2028",
    "alice\x1e",
]


def neighbours() -> list[list[tuple[int, int]]]:
    """(app index, user index) lists of users one separator, look-alike character
    or normal form apart: the pairs that would share state under a careless key."""
    a, u = APPS.index, USER_IDS.index
    return [
        [(a("a\x1fb"), u("c")), (a("a"), u("b\x1fc"))],
        [(a("3\x1fa"), u("b")), (a("3"), u("a\x1fb"))],
        [(a("a"), u("b")), (a("a\x1fb"), u("c")), (a("a"), u("b\x1fc"))],
        [(a("app"), u("alice")), (a("\u0430pp"), u("alice")), (a("app"), u("\u0430lice"))],
        [(a("app"), u("alice")), (a("\uff41\uff50\uff50"), u("\uff41\uff4c\uff49\uff43\uff45"))],
        [(a("app"), u("alice")), (a("app\u200d"), u("al\u200cice")), (a("app"), u("alice\u200b"))],
        [(a("caf\u00e9"), u("jos\u00e9")), (a("cafe\u0301"), u("jose\u0301"))],
        [(a("caf\u00e9"), u("jose\u0301")), (a("cafe\u0301"), u("jos\u00e9"))],
        [(a("app"), u("alice")), (a("app"), u("alice\x1e")), (a("app"), u("alice\u2028"))],
    ]


BACKENDS = [
    "memory",
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
]

Factory = Callable[[], MemoryService]


@pytest.fixture(params=BACKENDS)
def make_service(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], MemoryService]]:
    """Build fresh, empty services of one backend (each call: a new store)."""
    kind = request.param
    made: list[MemoryService] = []
    counter = itertools.count()
    url: str | None = None
    if kind == "postgres":
        server = request.getfixturevalue("pg_server")
        url = server.create_database("reliability")

    shared: list[MemoryService] = []

    def build() -> MemoryService:
        n = next(counter)
        svc: MemoryService
        if kind == "postgres" and shared:  # one pool per test; each build empties the tables
            assert url is not None
            wipe_postgres(url)
            return shared[0]
        if kind == "memory":
            svc = InMemoryMemoryService(embeddings=HashingEmbeddings())
        elif kind == "sqlite":
            from langmem_trpc.backends.sqlite import SQLiteMemoryService

            svc = SQLiteMemoryService(str(tmp_path / f"m{n}.db"), embeddings=HashingEmbeddings())
        else:
            from langmem_trpc.backends.postgres import PostgresMemoryService

            assert url is not None
            svc = PostgresMemoryService(url, HashingEmbeddings(), pool_size=2)
            svc.setup()  # type: ignore[attr-defined]
            wipe_postgres(url)
            shared.append(svc)
        made.append(svc)
        return svc

    loop = asyncio.new_event_loop()  # async pools are bound to one loop: share it per test
    build.kind = kind  # type: ignore[attr-defined]
    build.loop = loop  # type: ignore[attr-defined]
    yield build
    for svc in made:
        loop.run_until_complete(svc.aclose())
    loop.close()
    if url is not None:
        request.getfixturevalue("pg_server").drop_database(url)


class Outage(OSError):
    """What a driver raises when the server is gone (carries the DSN, as real drivers do)."""


class FaultyService(DelegatingService):
    """A real service behind a switch: while `down`, every call fails like a dead connection.

    `down_for` limits the outage to some method names; `delay` makes every call slow.
    The raw driver-style error carries a DSN with a password, to prove it never leaks.
    `wrap_errors=True` raises `BackendError` (what the real backends raise) instead.
    """

    def __init__(self, inner: MemoryService, *, wrap_errors: bool = False) -> None:
        super().__init__(inner)
        self.down = False
        self.down_for: set[str] | None = None
        self.wrap_errors = wrap_errors
        self.delay = 0.0
        self.failures = 0
        self.calls = 0
        self._lock = threading.Lock()

    def _fault(self, name: str) -> None:
        if self.down and (self.down_for is None or name in self.down_for):
            with self._lock:
                self.failures += 1
            error = Outage(f"connection to {SECRET_DSN} failed: Connection refused")
            if self.wrap_errors:
                raise BackendError("PostgreSQL operation failed (OperationalError)") from error
            raise error

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.calls += 1
        if self.delay:
            import time

            time.sleep(self.delay)
        self._fault(name)
        return super()._call(name, *args, **kwargs)


def users_of(pairs: list[tuple[int, int]]) -> list[UserKey]:
    """UserKeys from (app index, user index) pairs, de-duplicated in order."""
    seen: dict[tuple[str, str], UserKey] = {}
    for a, u in pairs:
        key = (APPS[a % len(APPS)], USER_IDS[u % len(USER_IDS)])
        seen.setdefault(key, UserKey(*key))
    return list(seen.values())


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the fuzzing totals quoted in docs/reliability.md."""
    import sys

    module = sys.modules.get("tests.reliability.test_isolation_service")
    stats = getattr(module, "STATS", None)
    if stats and stats.get("operations"):
        terminalreporter.write_line(
            "isolation fuzzing: {operations} operations ({odd_id_operations} by users with "
            "separator, look-alike or NFD ids), {foreign_id_probes} probes with another "
            "user's id, {entries_checked} returned entries checked".format(**stats)
        )
    store_module = sys.modules.get("tests.reliability.test_isolation_store")
    counts = getattr(store_module, "COUNTS", None)
    if counts and counts.get("examples"):
        terminalreporter.write_line(
            "MemoryStore isolation fuzzing: {examples} authenticated examples, {reads} app-wide "
            "reads checked, {refused} attacks on other users refused".format(**counts)
        )
