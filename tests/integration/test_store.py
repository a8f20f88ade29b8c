"""MemoryStore: a BaseStore over the service, checked differentially against InMemoryStore.

Documented deviations (module docstring of langmem_trpc.integration.store):
no-query order is newest first, query search returns relevant hits only,
scores are the service's 0-1 relevance, created_at survives updates.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.store.base import InvalidNamespaceError
from langgraph.store.memory import InMemoryStore

from langmem_trpc import InMemoryMemoryService, MemoryStore, UserKey
from langmem_trpc.testing import HashingEmbeddings, ScriptedChatModel, tool_call

from .conftest import ALICE

NS = ("demo", "alice")


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(InMemoryMemoryService(embeddings=HashingEmbeddings()))


@pytest.fixture
def reference() -> InMemoryStore:
    return InMemoryStore(index={"dims": 384, "embed": HashingEmbeddings()})


VALUES: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (NS, "k1", {"memory": "Production runs Go 1.23", "n": 9, "tags": ["go", "prod"]}),
    (
        NS,
        "k2",
        {"content": "Prefers tea over coffee", "n": 10, "meta": {"source": "chat", "level": 2}},
    ),
    (NS + ("projects",), "k1", {"text": "Project Zebra ships in May", "n": 100}),
    (
        NS + ("projects", "old"),
        "k3",
        {"kind": "Memory", "content": {"content": "Project Yak was cancelled"}, "n": 1},
    ),
    (("demo", "bob"), "k1", {"memory": "Bob likes jazz", "n": 5}),
    (("other", "alice"), "k9", {"no_text_field": True, "n": 7.5}),
]


def _fill(target: Any) -> None:
    for namespace, key, value in VALUES:
        target.put(namespace, key, value)


def test_values_round_trip_unchanged_and_keys_are_stable(store: MemoryStore):
    _fill(store)
    for namespace, key, value in VALUES:
        item = store.get(namespace, key)
        assert (
            item is not None
            and item.value == value
            and item.key == key
            and item.namespace == namespace
        )
    assert (
        store.get(NS, "k1").value != store.get(NS + ("projects",), "k1").value
    )  # same key, two scopes


def test_update_keeps_key_and_created_at(store: MemoryStore):
    store.put(NS, "k", {"memory": "Go 1.23"})
    first = store.get(NS, "k")
    time.sleep(0.01)
    store.put(NS, "k", {"memory": "Go 1.24", "extra": [1, 2]})
    second = store.get(NS, "k")
    assert second.value == {"memory": "Go 1.24", "extra": [1, 2]}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    assert len(store.search(NS)) == 1


def test_differential_get_filter_list_delete(store: MemoryStore, reference: InMemoryStore):
    _fill(store)
    _fill(reference)
    for namespace, key, _ in VALUES + [(NS, "missing", {})]:
        ours, theirs = store.get(namespace, key), reference.get(namespace, key)
        assert (ours is None) == (theirs is None)
        if ours is not None:
            assert (ours.namespace, ours.key, ours.value) == (
                theirs.namespace,
                theirs.key,
                theirs.value,
            )
    filters: list[dict[str, Any]] = [
        {},
        {"n": {"$gt": 5}},
        {"n": {"$gte": 9, "$lt": 100}},
        {"n": {"$ne": 10}},
        {"tags": ["go", "prod"]},
        {"meta": {"source": "chat"}},
        {"n": 9},
        {"n": {"$lte": 7.5}},
    ]
    for prefix in [NS, ("demo",), (), NS + ("projects",)]:
        for f in filters:
            ours = {(i.namespace, i.key) for i in store.search(prefix, filter=f, limit=50)}
            theirs = {(i.namespace, i.key) for i in reference.search(prefix, filter=f, limit=50)}
            assert ours == theirs, (prefix, f)
    for kwargs in [
        {},
        {"prefix": ("demo",)},
        {"suffix": ("projects",)},
        {"max_depth": 2},
        {"prefix": ("demo", "*", "projects")},
        {"limit": 2, "offset": 1},
    ]:
        assert store.list_namespaces(**kwargs) == reference.list_namespaces(**kwargs), kwargs
    store.delete(NS, "k1")
    reference.delete(NS, "k1")
    assert store.get(NS, "k1") is None and reference.get(NS, "k1") is None
    assert store.list_namespaces() == reference.list_namespaces()


def test_numbers_compare_as_numbers(store: MemoryStore):
    for key, n in [("a", 9), ("b", 10), ("c", 100), ("d", "text")]:
        store.put(NS, key, {"memory": f"value {key}", "n": n})
    assert {i.key for i in store.search(NS, filter={"n": {"$gt": 5}})} == {"a", "b", "c"}
    assert {i.key for i in store.search(NS, filter={"n": {"$lt": 50}})} == {"a", "b"}


def test_query_search_is_relevance_ranked(store: MemoryStore, reference: InMemoryStore):
    _fill(store)
    _fill(reference)
    for query, prefix in [
        ("Go version in production", NS),
        ("tea or coffee", NS),
        ("Zebra ship date", ("demo",)),
    ]:
        ours = store.search(prefix, query=query, limit=3)
        theirs = reference.search(prefix, query=query, limit=3)
        assert (ours[0].namespace, ours[0].key) == (theirs[0].namespace, theirs[0].key), query
        assert all(0.0 <= (i.score or 0.0) <= 1.0 for i in ours)


def test_no_query_lists_newest_first_with_offset(store: MemoryStore):
    for i in range(5):
        store.put(NS, f"k{i}", {"memory": f"note {i}"})
        time.sleep(0.002)
    assert [i.key for i in store.search(NS)] == ["k4", "k3", "k2", "k1", "k0"]
    assert [i.key for i in store.search(NS, limit=2, offset=1)] == ["k3", "k2"]


def test_namespace_rules(store: MemoryStore):
    with pytest.raises(InvalidNamespaceError):
        store.put(("only-app",), "k", {"memory": "x"})
    with pytest.raises(InvalidNamespaceError):
        store.get(("a.b", "u"), "k")
    with pytest.raises(NotImplementedError):
        store.put(NS, "k", {"memory": "x"}, ttl=5)


def test_memories_written_elsewhere_are_visible(store: MemoryStore):
    entry = store.service.add(ALICE, "Production runs Go 1.24", topics=["go"])
    item = store.get(NS, entry.id)
    assert (
        item is not None
        and item.value["memory"] == "Production runs Go 1.24"
        and item.value["kind"] == "fact"
    )
    assert [i.key for i in store.search(NS, query="Go")] == [entry.id]
    store.delete(NS, entry.id)
    assert store.service.get(ALICE, entry.id) is None


async def test_async_twins(store: MemoryStore):
    await store.aput(NS, "k", {"memory": "Go 1.24"})
    assert (await store.aget(NS, "k")).value == {"memory": "Go 1.24"}
    assert [i.key for i in await store.asearch(NS, query="Go")] == ["k"]
    assert await store.alist_namespaces() == [NS]
    await store.adelete(NS, "k")
    assert await store.aget(NS, "k") is None


def test_langmem_tools_on_top(store: MemoryStore):
    from langmem import create_manage_memory_tool, create_search_memory_tool

    namespace = ("{app_name}", "{user_id}")
    manage = create_manage_memory_tool(namespace, store=store)
    search = create_search_memory_tool(namespace, store=store)
    model = ScriptedChatModel(
        replies=[
            AIMessage(
                "",
                tool_calls=[
                    tool_call(
                        "manage_memory", {"content": "Production runs Go 1.23", "action": "create"}
                    )
                ],
            ),
            AIMessage("", tool_calls=[tool_call("search_memory", {"query": "Go version"})]),
            lambda messages: AIMessage(
                "",
                tool_calls=[
                    tool_call(
                        "manage_memory",
                        {
                            "content": "Production runs Go 1.24",
                            "action": "update",
                            "id": json.loads(messages[-1].content)[0]["key"],
                        },
                    )
                ],
            ),
            "Updated.",
        ]
    )
    agent = create_agent(model, tools=[manage, search], store=store)
    out = agent.invoke(
        {"messages": [HumanMessage("we moved to Go 1.24")]},
        {"configurable": {"app_name": "demo", "user_id": "alice"}},
    )
    statuses = [m.status for m in out["messages"] if isinstance(m, ToolMessage)]
    assert statuses == ["success", "success", "success"]
    items = store.search(NS)
    assert [i.value for i in items] == [{"content": "Production runs Go 1.24"}]
    assert store.service.count(UserKey("demo", "alice")) == 1
