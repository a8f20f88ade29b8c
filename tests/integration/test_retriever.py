"""`create_retriever` and `MemoryVectorStore`: one user's memories, hybrid search, sync and async."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore

from langmem_trpc import InMemoryMemoryService, UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.errors import InvalidInputError
from langmem_trpc.integration.retriever import MemoryVectorStore, create_retriever
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.types import SearchOptions

ALICE = UserKey("app", "alice")
BOB = UserKey("app", "bob")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def svc(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryService]:
    service: MemoryService
    if request.param == "memory":
        service = InMemoryMemoryService(embeddings=HashingEmbeddings())
    elif request.param == "sqlite":
        service = SQLiteMemoryService(str(tmp_path / "m.db"), embeddings=HashingEmbeddings())
    else:
        from langmem_trpc.backends.postgres import PostgresMemoryService

        url = request.getfixturevalue("pg_url")
        service = PostgresMemoryService(url, embeddings=HashingEmbeddings())
        service.setup()  # type: ignore[attr-defined]
    service.add(ALICE, "Alice went hiking in the Alps", kind="episode", event_time="2024-05-01")
    service.add(ALICE, "Alice prefers green tea over coffee", topics=["drinks"])
    service.add(BOB, "Bob went hiking in the Andes", kind="episode", event_time="2024-05-02")
    yield service
    service.close()


def test_create_retriever_returns_the_services_hybrid_ranking_for_one_user(
    svc: MemoryService,
) -> None:
    retriever = create_retriever(svc, ALICE, k=5)
    assert isinstance(retriever, BaseRetriever)
    docs = retriever.invoke("hiking trip")
    expected = svc.search(ALICE, "hiking trip", SearchOptions(max_results=5, hybrid=True))
    assert [d.id for d in docs] == [e.id for e in expected]
    assert docs[0].page_content == "Alice went hiking in the Alps"
    assert {d.metadata["user_id"] for d in docs} == {"alice"}
    assert docs[0].metadata["kind"] == "episode"
    assert docs[0].metadata["event_time"].startswith("2024-05-01")


async def test_async_retriever_matches_sync(svc: MemoryService) -> None:
    retriever = create_retriever(svc, ALICE, k=5)
    sync_ids = [d.id for d in retriever.invoke("tea")]
    try:
        async_ids = [d.id for d in await retriever.ainvoke("tea")]
    finally:
        # PostgreSQL's async pool closes on the loop that opened it: left to the loop's
        # shutdown, psycopg_pool's cancelled workers can hang it for the test's timeout
        await svc.aclose()
    assert async_ids == sync_ids
    assert async_ids


def test_retriever_kind_and_time_filters(svc: MemoryService) -> None:
    facts = create_retriever(svc, ALICE, k=5, kind="fact").invoke("Alice")
    assert [d.metadata["kind"] for d in facts] == ["fact"]
    later = create_retriever(svc, ALICE, k=5, time_after="2024-06-01").invoke("hiking")
    assert later == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"user_id": "bob"},
        {"app_name": "other"},
        {"filter": {"user_id": "bob"}},
        {"namespace": ("app", "bob")},
    ],
)
def test_retriever_scope_cannot_be_overridden(svc: MemoryService, kwargs: dict) -> None:
    with pytest.raises(InvalidInputError, match="cannot be overridden"):
        create_retriever(svc, ALICE, **kwargs)


def test_retriever_bad_options_name_the_field(svc: MemoryService) -> None:
    with pytest.raises(InvalidInputError) as info:
        create_retriever(svc, ALICE, k=0)
    assert info.value.field == "k"
    with pytest.raises(InvalidInputError) as info:
        create_retriever(svc, ALICE, kind="bogus")
    assert info.value.field == "kind"
    with pytest.raises(InvalidInputError) as info:
        create_retriever(svc, ALICE, colour="red")
    assert info.value.field == "colour"


def test_vector_store_adds_and_searches_only_its_user(svc: MemoryService) -> None:
    store = MemoryVectorStore(svc, ALICE)
    assert isinstance(store, VectorStore)
    ids = store.add_texts(["Alice's cat is called Miso"], [{"topics": ["pets"], "source": "chat"}])
    entry = svc.get(ALICE, ids[0])
    assert entry is not None and entry.memory.topics == ["pets"]
    assert entry.memory.metadata == {"source": "chat"}
    docs = store.similarity_search("hiking", k=5)
    assert docs and all(d.metadata["user_id"] == "alice" for d in docs)
    assert "Bob went hiking in the Andes" not in [d.page_content for d in docs]
    scored = store.similarity_search_with_relevance_scores("cat Miso", k=1)
    assert scored[0][0].id == ids[0] and 0.0 < scored[0][1] <= 1.0
    assert [d.id for d in store.get_by_ids(ids)] == ids
    assert store.delete(ids) is True
    assert svc.get(ALICE, ids[0]) is None


async def test_vector_store_async_twins(svc: MemoryService) -> None:
    store = MemoryVectorStore(svc, ALICE)
    ids = await store.aadd_texts(["Alice plays the cello"])
    docs = await store.asimilarity_search("cello", k=1)
    assert [d.id for d in docs] == ids
    assert [d.id for d in await store.aget_by_ids(ids)] == ids
    assert await store.adelete(ids) is True
    assert await svc.aget(ALICE, ids[0]) is None


def test_vector_store_refuses_scope_changes_and_writes_nothing(svc: MemoryService) -> None:
    store = MemoryVectorStore(svc, ALICE)
    before = svc.count(BOB), svc.count(ALICE)
    with pytest.raises(InvalidInputError, match="cannot be overridden"):
        store.add_texts(["sneaky"], [{"user_id": "bob"}])
    with pytest.raises(InvalidInputError, match="cannot be overridden"):
        store.similarity_search("hiking", filter={"user_id": "bob"})
    with pytest.raises(InvalidInputError, match="cannot be overridden"):
        store.as_retriever(search_kwargs={"app_name": "other"}).invoke("hiking")
    assert (svc.count(BOB), svc.count(ALICE)) == before


def test_vector_store_as_retriever_keeps_the_scope(svc: MemoryService) -> None:
    retriever = MemoryVectorStore(svc, ALICE).as_retriever(search_kwargs={"k": 5})
    docs = retriever.invoke("hiking")
    assert docs and {d.metadata["user_id"] for d in docs} == {"alice"}


def test_from_texts_needs_service_and_user() -> None:
    from langmem_trpc.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="service= and user="):
        MemoryVectorStore.from_texts(["x"], HashingEmbeddings())
    service = InMemoryMemoryService(embeddings=HashingEmbeddings())
    store = MemoryVectorStore.from_texts(
        ["Alice likes tea"], HashingEmbeddings(), service=service, user=ALICE
    )
    assert [d.page_content for d in store.similarity_search("tea")] == ["Alice likes tea"]


async def test_retrievers_see_current_memories_unless_asked_as_of(svc: MemoryService) -> None:
    old = svc.add(ALICE, "Production runs Go 1.23", valid_from="2026-01-05")
    new = svc.update(
        ALICE, old.id, "Production runs Go 1.24", supersede=True, valid_from="2026-07-20"
    )
    current = create_retriever(svc, ALICE, k=5).invoke("production Go")
    assert new.id in [d.id for d in current] and old.id not in [d.id for d in current]
    head = next(d for d in current if d.id == new.id)
    assert head.metadata["valid_from"].startswith("2026-07-20") and "valid_to" not in head.metadata
    july = create_retriever(svc, ALICE, k=5, as_of="2026-07-01")
    (past,) = [d for d in await july.ainvoke("production Go") if "Go" in d.page_content]
    assert past.id == old.id and past.metadata["superseded_by"] == new.id
    assert past.metadata["valid_to"].startswith("2026-07-20")
    store = MemoryVectorStore(svc, ALICE)
    assert [d.id for d in store.similarity_search("production Go", k=5, as_of="2026-07-01")][
        :1
    ] == [old.id]
    with pytest.raises(InvalidInputError, match="as_of"):
        create_retriever(svc, ALICE, as_of="someday")
