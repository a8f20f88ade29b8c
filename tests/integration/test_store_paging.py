"""Paging a query search through `MemoryStore.search(query, offset=...)`: every page is a
slice of one stable order, on every backend, sync and async (issue 32, item 3: on
PostgreSQL pages of 10 over 250 items repeated and skipped items, because the candidate
pool grew with offset + limit and a larger pool reordered the top)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from langgraph.store.base import PutOp

from langmem_trpc import InMemoryMemoryService, MemoryStore
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.testing import HashingEmbeddings

NS = ("paging", "alice")
WORDS = ["garden", "river", "market", "music", "train", "coffee", "book", "storm", "tea"]
QUERY = "garden river music on the train"


def _text(i: int) -> str:
    w = WORDS
    return f"Note {i}: {w[i % 9]} {w[(i * 4) % 9]} and {w[(i * 7) % 8]}" + " garden" * (i % 3)


BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "lancedb"]


@pytest.fixture(params=BACKENDS)
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryService]:
    svc: MemoryService
    if request.param == "memory":
        svc = InMemoryMemoryService(embeddings=HashingEmbeddings())
    elif request.param == "sqlite":
        from langmem_trpc.backends.sqlite import SQLiteMemoryService

        svc = SQLiteMemoryService(str(tmp_path / "paging.db"), embeddings=HashingEmbeddings())
    elif request.param == "lancedb":
        pytest.importorskip("lancedb", reason="the [lancedb] extra is not installed")
        from langmem_trpc.backends.lancedb import LanceDBMemoryService

        svc = LanceDBMemoryService(tmp_path / "lance", HashingEmbeddings())
    else:
        from langmem_trpc.backends.postgres import PostgresMemoryService

        svc = PostgresMemoryService(request.getfixturevalue("pg_url"), HashingEmbeddings())
        svc.setup()  # type: ignore[attr-defined]
    yield svc
    svc.close()


@pytest.fixture
def store(service: MemoryService) -> Iterator[MemoryStore]:
    with MemoryStore(service) as store:
        store.batch([PutOp(NS, f"k{i}", {"memory": _text(i)}) for i in range(250)])
        yield store


def _pages(store: MemoryStore) -> list[list[str]]:
    return [
        [item.key for item in store.search(NS, query=QUERY, limit=10, offset=offset)]
        for offset in range(0, 250, 10)
    ]


async def _apages(store: MemoryStore) -> list[list[str]]:
    return [
        [item.key for item in await store.asearch(NS, query=QUERY, limit=10, offset=offset)]
        for offset in range(0, 250, 10)
    ]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_query_pages_are_slices_of_one_order(store: MemoryStore, mode: str) -> None:
    pages = _pages(store) if mode == "sync" else asyncio.run(_apages(store))
    paged = [key for page in pages for key in page]
    assert len(paged) == len(set(paged)) == 250, "an item repeated or skipped"
    whole = [item.key for item in store.search(NS, query=QUERY, limit=250)]
    assert paged == whole
