"""MemoryStore: a BaseStore over the service, checked differentially against InMemoryStore.

Documented deviations (module docstring of langmem_trpc.integration.store):
two-label namespaces, no-query order is newest first, query search keeps the
service's hybrid order then fills `limit` with score 0.0, scores are the
service's 0-1 relevance, created_at survives updates. Behaviour tests run on
every backend (in-memory, SQLite, PostgreSQL) through `backend_store`.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import date, datetime, timezone
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp
from langgraph.store.memory import InMemoryStore

from langmem_trpc import InMemoryMemoryService, MemoryStore, UserKey
from langmem_trpc.errors import CapacityExceededError, InvalidMemoryError, NamespaceAccessError
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.service.rules import Limits
from langmem_trpc.testing import HashingEmbeddings, ScriptedChatModel, tool_call
from langmem_trpc.testing._wrap import DelegatingService
from langmem_trpc.types import Operation, SearchOptions

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
    assert store.supports_ttl


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


# -- every backend -----------------------------------------------------------------------------

CORPUS = [
    "Production runs Go 1.24 on Kubernetes",
    "The staging cluster runs Go 1.23",
    "Alice prefers dark mode in every editor",
    "Alice drinks green tea in the morning",
    "Bob plays chess on Sunday mornings",
    "The team ships the Zebra project in May",
    "Project Yak was cancelled in March",
    "Alice lives in Paris with two cats",
    "The office coffee machine is broken",
    "Deploys happen every Tuesday after standup",
    "The database runs PostgreSQL 16 with pgvector",
    "Alice is allergic to peanuts",
    "Go modules are cached on the build server",
    "Morning standup starts at 9:30",
    "The editor theme is solarized dark",
]
QUERIES = [
    "which Go version runs in production",
    "what does Alice drink in the morning",
    "editor dark mode",
    "when does the Zebra project ship",
    "database version",
    "Alice morning routine",
    "Go build cache",
    "standup time",
]


def test_query_search_keeps_the_services_fused_order(backend_store: MemoryStore):
    for i, text in enumerate(CORPUS):
        backend_store.put(NS, f"k{i}", {"memory": text, "n": i})
    by_id = {backend_store.resolve(ALICE, (), f"k{i}").id: f"k{i}" for i in range(len(CORPUS))}
    for query in QUERIES:
        options = SearchOptions(max_results=10, similarity_threshold=0.0)
        expected = [by_id[e.id] for e in backend_store.service.search(ALICE, query, options)]
        got = [i.key for i in backend_store.search(NS, query=query, limit=len(expected))]
        assert got == expected, query


def test_uuid_keys_address_memories_written_elsewhere(backend_store: MemoryStore):
    svc = backend_store.service
    entry = svc.add(ALICE, "Production runs Go 1.23", topics=["go"])
    spellings = [entry.id, str(uuid.UUID(entry.id)), str(uuid.UUID(entry.id)).upper()]
    for key in spellings:
        item = backend_store.get(NS, key)
        assert item is not None and item.value["memory"] == "Production runs Go 1.23", key
    backend_store.put(NS, spellings[1], {"content": "Production runs Go 1.24"})
    assert svc.count(ALICE) == 1
    assert svc.get(ALICE, entry.id).text == "Production runs Go 1.24"
    assert [i.key for i in backend_store.search(NS)] == [entry.id]
    assert backend_store.get(NS, spellings[2]).value == {"content": "Production runs Go 1.24"}
    backend_store.delete(NS, spellings[2])
    assert svc.get(ALICE, entry.id) is None and backend_store.search(NS) == []


def test_a_uuid_shaped_key_that_is_no_uuid_is_a_plain_key(store: MemoryStore):
    key = "abcd-efgh-ijkl-mnop-qrstuvwxyz012345"  # 36 characters, 4 dashes, not hex
    assert store.get(NS, key) is None
    store.put(NS, key, {"memory": "Prefers tea"})
    assert store.get(NS, key).value == {"memory": "Prefers tea"}


def test_store_keys_match_in_every_uuid_spelling(backend_store: MemoryStore):
    key = uuid.uuid4()
    backend_store.put(NS, str(key), {"content": "Prefers tea"})
    for spelling in (key.hex, str(key).upper(), "{" + str(key) + "}"):
        assert backend_store.get(NS, spelling).value == {"content": "Prefers tea"}
    backend_store.put(NS, key.hex.upper(), {"content": "Prefers coffee"})
    assert [i.value for i in backend_store.search(NS)] == [{"content": "Prefers coffee"}]
    assert backend_store.get(NS, str(key)).key == str(key)  # the first spelling is kept
    backend_store.delete(NS, key.hex)
    assert backend_store.search(NS) == []


def test_langmem_delete_and_update_reach_worker_memories(backend_store: MemoryStore):
    from langmem import create_manage_memory_tool

    entry = backend_store.service.add(ALICE, "Production runs Go 1.23")
    other = backend_store.service.add(ALICE, "Prefers tea over coffee")
    manage = create_manage_memory_tool(("{app_name}", "{user_id}"), store=backend_store)
    config = {"configurable": {"app_name": "demo", "user_id": "alice"}}
    manage.invoke({"action": "delete", "id": str(uuid.UUID(entry.id))}, config)
    manage.invoke(
        {"action": "update", "id": str(uuid.UUID(other.id)), "content": "Prefers coffee"}, config
    )
    svc = backend_store.service
    assert svc.get(ALICE, entry.id) is None
    assert [e.text for e in svc.read(ALICE)] == ["Prefers coffee"]
    assert [i.key for i in backend_store.search(NS, query="coffee")] == [other.id]


def test_query_search_returns_the_limit_best_without_a_floor(backend_store: MemoryStore):
    for i, text in enumerate(CORPUS[:6]):
        backend_store.put(NS, f"k{i}", {"memory": text})
    hits = backend_store.search(NS, query="Noted.", limit=4)
    assert len(hits) == 4 and all(0.0 <= (h.score or 0.0) <= 1.0 for h in hits)
    assert len(backend_store.search(NS, query="Noted.", limit=50)) == 6
    assert backend_store.search(NS, query="Go version in production", limit=1)[0].key == "k0"
    strict = MemoryStore(backend_store.service, min_score=0.5)
    assert strict.search(NS, query="Noted.", limit=4) == []


def test_values_are_json_normalised_the_same_on_every_backend(backend_store: MemoryStore):
    when = datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)
    value = {
        "memory": "Meeting moved",
        "at": when,
        "day": date(2024, 5, 1),
        "id": uuid.UUID(int=7),
        "pair": (1, 2),
        "nested": {"when": [when]},
        2: "int key",
    }
    backend_store.put(NS, "k", value)
    assert backend_store.get(NS, "k").value == {
        "memory": "Meeting moved",
        "at": "2024-05-01T12:30:00+00:00",
        "day": "2024-05-01",
        "id": "00000000-0000-0000-0000-000000000007",
        "pair": [1, 2],
        "nested": {"when": ["2024-05-01T12:30:00+00:00"]},
        "2": "int key",
    }


@pytest.mark.parametrize(
    "value, problem",
    [
        ({"memory": "x", "n": float("nan")}, "JSON"),
        ({"memory": "x", "n": float("inf")}, "JSON"),
        ({"memory": "x\x00y"}, "NUL"),
        ({"memory": "x", "bad": "\ud800"}, "surrogate"),
        ({"memory": "x", "obj": object()}, "JSON"),
        ({"memory": "x", "s": {1, 2}}, "JSON"),
    ],
)
def test_values_that_no_backend_can_keep_are_refused_clearly(
    backend_store: MemoryStore, value: dict[str, Any], problem: str
):
    backend_store.put(NS, "k", {"memory": "kept"})
    with pytest.raises(InvalidMemoryError) as info:
        backend_store.put(NS, "k", value)
    assert info.value.field == "value" and problem in str(info.value)
    assert backend_store.get(NS, "k").value == {"memory": "kept"}


def test_big_values_are_kept_whole_and_searchable(backend_store: MemoryStore):
    long_text = "Quokka migration notes. " + "padding words " * 700 + "final zanzibar remark"
    value = {
        "memory": long_text,
        "topics": [f"t{i}" for i in range(65)],
        "location": "L" * 257,
        "participants": ["p" * 300],
        "event_time": "not a date",
    }
    backend_store.put(NS, "big", value)
    assert backend_store.get(NS, "big").value == value
    assert backend_store.search(NS, query="Quokka migration", limit=1)[0].key == "big"
    limit = backend_store.service.limits.max_text_length
    assert (
        len(backend_store.service.get(ALICE, backend_store.resolve(ALICE, (), "big").id).text)
        <= limit
    )


def test_capacity_is_our_error(backend_service: MemoryService):
    backend_service._limits = Limits(capacity=3)  # type: ignore[attr-defined]
    store = MemoryStore(backend_service)
    for i in range(3):
        store.put(NS, f"k{i}", {"memory": f"note {i}"})
    with pytest.raises(CapacityExceededError):
        store.put(NS, "k3", {"memory": "note 3"})
    store.put(NS, "k0", {"memory": "note 0 changed"})  # replacing stays possible
    assert len(store.search(NS)) == 3


def test_reads_are_bounded_by_user_and_limit(backend_service: MemoryService):
    reads: list[tuple[UserKey, int | None]] = []

    class Counting(DelegatingService):
        def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
            if name == "read":
                reads.append((args[0], args[1] if len(args) > 1 else kwargs.get("limit")))
            return super()._call(name, *args, **kwargs)

    store = MemoryStore(Counting(backend_service))
    for user in ("alice", "bob", "carol"):
        for i in range(5):
            store.put(("demo", user), f"k{i}", {"memory": f"{user} note {i}"})
    store.put(("demo", "alice", "deep"), "d", {"memory": "alice scoped"})
    reads.clear()
    assert [i.key for i in store.search(NS, limit=2)] == ["d", "k4"]
    assert reads and all(u == ALICE and limit is not None and limit < 10 for u, limit in reads)
    reads.clear()
    assert store.list_namespaces(prefix=NS) == [NS, NS + ("deep",)]
    assert {u for u, _ in reads} == {ALICE}
    reads.clear()
    assert store.list_namespaces(max_depth=2) == [("demo", u) for u in ("alice", "bob", "carol")]
    assert reads == []


def test_index_false_is_stored_but_not_searched(backend_store: MemoryStore):
    backend_store.put(NS, "secret", {"memory": "The vault code is zebra", "n": 1}, index=False)
    backend_store.put(NS, "plain", {"memory": "Zebras live in Africa", "n": 2})
    assert backend_store.get(NS, "secret").value["n"] == 1
    assert [i.key for i in backend_store.search(NS, query="vault code zebra", limit=5)] == ["plain"]
    assert [i.key for i in backend_store.search(NS, filter={"n": 1})] == ["secret"]


# -- TTL -----------------------------------------------------------------------------------------


def test_ttl_expires_items_at_once_and_sweep_soft_deletes(backend_store: MemoryStore):
    svc = backend_store.service
    backend_store.put(NS, "short", {"memory": "Expires soon"}, ttl=0.02)  # 1.2 s
    backend_store.put(NS, "long", {"memory": "Stays a while"}, ttl=60)
    backend_store.put(NS, "forever", {"memory": "Never expires"})
    short = backend_store.resolve(ALICE, (), "short")
    assert short is not None and short.expires_at is not None
    assert backend_store.resolve(ALICE, (), "forever").expires_at is None
    time.sleep(1.5)
    assert backend_store.get(NS, "short") is None
    assert {i.key for i in backend_store.search(NS)} == {"long", "forever"}
    assert "short" not in {i.key for i in backend_store.search(NS, query="Expires soon")}
    # hidden by the service itself, so the tools and preload never see it either
    assert svc.get(ALICE, short.id) is None
    assert short.id not in {e.id for e in svc.read(ALICE)}
    assert short.id not in {e.id for e in svc.search(ALICE, "Expires soon")}
    assert svc.expired(ALICE) == [short.id]
    assert backend_store.sweep_ttl() == 1
    last = svc.history(ALICE, short.id)[-1]
    assert last.operation == Operation.DELETE and last.source.actor == "store:ttl"
    assert backend_store.sweep_ttl() == 0 and svc.expired(ALICE) == []
    backend_store.put(NS, "short", {"memory": "Back again"})  # revived without a TTL
    assert backend_store.get(NS, "short").value == {"memory": "Back again"}


def test_a_put_without_ttl_clears_the_expiry(backend_store: MemoryStore):
    backend_store.put(NS, "k", {"memory": "Temporary"}, ttl=0.02)
    backend_store.put(NS, "k", {"memory": "Permanent now"})
    time.sleep(1.5)
    assert backend_store.get(NS, "k").value == {"memory": "Permanent now"}


def test_refresh_moves_the_expiry_without_touching_the_memory(backend_store: MemoryStore):
    backend_store.put(NS, "k", {"memory": "Refreshed"}, ttl=0.05)
    before = backend_store.resolve(ALICE, (), "k")
    time.sleep(1.2)
    item = backend_store.get(NS, "k")  # refresh_ttl defaults to True
    after = backend_store.resolve(ALICE, (), "k")
    assert after.expires_at > before.expires_at
    assert after.updated_at == before.updated_at == item.updated_at
    assert len(backend_store.service.history(ALICE, before.id)) == 1  # the add only


def test_ttl_refresh_on_read(backend_service: MemoryService):
    store = MemoryStore(backend_service, ttl={"default_ttl": 0.05, "refresh_on_read": True})
    store.put(NS, "k", {"memory": "Refreshed by reads"})  # default_ttl: 3 s
    store.put(NS, "quiet", {"memory": "Not refreshed"})
    for _ in range(4):
        time.sleep(1.0)
        assert store.get(NS, "k") is not None  # each read pushes the expiry 3 s ahead
    assert store.get(NS, "quiet", refresh_ttl=False) is None


def test_ttl_sweeper_thread_starts_and_stops(backend_service: MemoryService):
    with MemoryStore(backend_service, ttl={"sweep_interval_minutes": 1}) as store:
        store.put(NS, "k", {"memory": "Expires"}, ttl=0.001)
        future = store.start_ttl_sweeper(sweep_interval_minutes=0.01)  # type: ignore[arg-type]
        assert not future.done()
        deadline = time.time() + 10
        while backend_service.count(ALICE) and time.time() < deadline:
            time.sleep(0.1)
        assert backend_service.count(ALICE) == 0
        assert store.stop_ttl_sweeper(timeout=5)
        assert future.result(timeout=5) is None
    assert MemoryStore(backend_service).start_ttl_sweeper().done()  # no TTLConfig: nothing runs


# -- identity: the authenticated user is enforced (issue #13.1) ---------------------------------

SHOP_ALICE, SHOP_BOB = UserKey("shop", "alice"), UserKey("shop", "bob")


def _attack_agent(store: MemoryStore, namespace: tuple[str, ...]) -> Any:
    from langmem import create_manage_memory_tool, create_search_memory_tool

    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("search_memory", {"query": "bank account"})]),
            AIMessage(
                "",
                tool_calls=[
                    tool_call("manage_memory", {"content": "Bob owes me $500", "action": "create"})
                ],
            ),
            "Done.",
        ]
    )
    tools = [
        create_manage_memory_tool(namespace, store=store),
        create_search_memory_tool(namespace, store=store),
    ]
    return create_agent(model, tools=tools, store=store)


AUTH_CONFIG = {
    "configurable": {"langgraph_auth_user_id": "alice", "user_id": "bob", "app_name": "shop"}
}


def test_langmem_tools_cannot_reach_another_user_in_an_authenticated_run(
    backend_store: MemoryStore,
):
    backend_store.put(("shop", "bob"), "b1", {"content": "Bob's bank account is 12345"})
    agent = _attack_agent(backend_store, ("{app_name}", "{user_id}"))  # the unsafe template
    with pytest.raises(NamespaceAccessError) as info:
        agent.invoke({"messages": [HumanMessage("what is in bob's bank account?")]}, AUTH_CONFIG)
    assert info.value.namespace == ("shop", "bob") and "alice" in str(info.value)
    assert [i.value for i in backend_store.search(("shop", "bob"))] == [
        {"content": "Bob's bank account is 12345"}
    ]
    assert backend_store.service.count(SHOP_ALICE) == 0


def test_the_documented_template_follows_the_authenticated_user(backend_store: MemoryStore):
    backend_store.put(("shop", "bob"), "b1", {"content": "Bob's bank account is 12345"})
    agent = _attack_agent(backend_store, ("{app_name}", "{langgraph_auth_user_id}"))
    out = agent.invoke({"messages": [HumanMessage("remember this")]}, AUTH_CONFIG)
    results = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in results] == ["success", "success"]
    assert "12345" not in results[0].content
    assert [i.value for i in backend_store.search(("shop", "alice"))] == [
        {"content": "Bob owes me $500"}
    ]
    assert backend_store.service.count(SHOP_BOB) == 1


def test_app_wide_prefix_in_an_authenticated_run_sees_only_that_user(backend_store: MemoryStore):
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    backend_store.put(("shop", "alice"), "a", {"content": "Alice likes tea"})
    backend_store.put(("shop", "alice", "prefs"), "p", {"content": "Alice prefers email"})
    backend_store.put(("shop", "bob"), "b", {"content": "Bob likes tea"})
    backend_store.put(("other", "alice"), "o", {"content": "Alice elsewhere"})

    class State(TypedDict):
        keys: list[str]
        spaces: list[tuple[str, ...]]

    def node(state: State) -> dict[str, Any]:
        found = backend_store.search(("shop",), query="tea", limit=10)
        found += backend_store.search((), limit=10)
        return {
            "keys": sorted({f"{i.namespace[0]}:{i.key}" for i in found}),
            "spaces": backend_store.list_namespaces(),
        }

    graph = StateGraph(State)
    graph.add_node("read", node)
    graph.add_edge(START, "read")
    graph.add_edge("read", END)
    out = graph.compile().invoke({"keys": [], "spaces": []}, AUTH_CONFIG)
    assert out["keys"] == ["other:o", "shop:a", "shop:p"]
    assert out["spaces"] == [("other", "alice"), ("shop", "alice"), ("shop", "alice", "prefs")]
    outside = {i.key for i in backend_store.search(("shop",), limit=10)}  # no run: unchanged
    assert outside == {"a", "p", "b"}


async def test_async_ops_enforce_the_authenticated_user(backend_store: MemoryStore):
    from langgraph.config import get_config  # noqa: F401 - the run context is what matters
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        error: str

    async def node(state: State) -> dict[str, Any]:
        try:
            await backend_store.aget(("shop", "bob"), "b")
        except NamespaceAccessError as exc:
            return {"error": type(exc).__name__}
        return {"error": ""}

    graph = StateGraph(State)
    graph.add_node("read", node)
    graph.add_edge(START, "read")
    graph.add_edge("read", END)
    out = await graph.compile().ainvoke({"error": ""}, AUTH_CONFIG)
    assert out["error"] == "NamespaceAccessError"


def test_for_user_view_pins_app_and_user(backend_store: MemoryStore):
    backend_store.put(("shop", "bob"), "b", {"content": "Bob likes tea"})
    view = backend_store.for_user("shop", "alice")
    view.put(("shop", "alice"), "a", {"content": "Alice likes tea"})
    assert [i.key for i in view.search(("shop",), query="tea")] == ["a"]
    assert [i.key for i in view.search(())] == ["a"]
    assert view.list_namespaces() == [("shop", "alice")]
    for namespace in [("shop", "bob"), ("other", "alice"), ("shop", "alice ")]:
        with pytest.raises(NamespaceAccessError):
            view.get(namespace, "b")
        with pytest.raises(NamespaceAccessError):
            view.put(namespace, "x", {"content": "forged"})
    with pytest.raises(NamespaceAccessError):
        view.search(("other",))
    with pytest.raises(NamespaceAccessError):  # a batch is refused before any op runs
        view.batch([PutOp(("shop", "alice"), "z", {"content": "z"}), GetOp(("shop", "bob"), "b")])
    assert view.get(("shop", "alice"), "z") is None
    assert backend_store.service.count(SHOP_BOB) == 1


# -- reconcile through the store ------------------------------------------------------------------


@pytest.mark.parametrize("reconcile, expected", [(True, 1), (False, 2)])
def test_reconcile_merges_a_restatement_made_through_langmem(
    backend_service: MemoryService, reconcile: bool, expected: int
):
    from langmem import create_manage_memory_tool

    store = MemoryStore(backend_service, reconcile=reconcile)
    manage = create_manage_memory_tool(("{app_name}", "{user_id}"), store=store)
    config = {"configurable": {"app_name": "demo", "user_id": "alice"}}
    manage.invoke({"action": "create", "content": "User prefers dark mode in the editor"}, config)
    first = store.search(NS)[0]
    manage.invoke({"action": "create", "content": "user prefers dark mode in the editor."}, config)
    items = store.search(NS)
    assert len(items) == expected and backend_service.count(ALICE) == expected
    if reconcile:
        assert items[0].key == first.key
        entry = store.resolve(ALICE, (), first.key)
        assert {h.source.actor for h in backend_service.history(ALICE, entry.id)} == {"store"}


def test_reconcile_updates_the_surviving_memory_under_its_key(backend_service: MemoryService):
    store = MemoryStore(backend_service, reconcile=True)
    store.put(NS, "old", {"memory": "Production runs Go 1.23 on Kubernetes"})
    store.put(NS, "new", {"memory": "Production runs Go 1.24 on Kubernetes"})
    assert store.get(NS, "new") is None
    assert store.get(NS, "old").value == {"memory": "Production runs Go 1.24 on Kubernetes"}
    store.put(NS, "other", {"memory": "Alice drinks green tea"})
    assert sorted(i.key for i in store.search(NS)) == ["old", "other"]
    store.put(NS + ("scoped",), "s", {"memory": "Production runs Go 1.24 on Kubernetes"})
    assert store.get(NS + ("scoped",), "s") is not None  # never merged across namespaces
    plain = MemoryStore(backend_service)
    plain.put(NS, "new", {"memory": "Production runs Go 1.24 on Kubernetes"})
    assert plain.get(NS, "new") is not None  # reconcile=False: plain key/value


def test_reconcile_records_its_decision_in_history(backend_service: MemoryService):
    store = MemoryStore(backend_service, reconcile=True)
    store.put(NS, "old", {"memory": "Production runs Go 1.23"})
    store.put(NS, "new", {"memory": "Production runs Go 1.23 in Frankfurt"})  # an enrichment
    entry = store.resolve(ALICE, (), "old")
    added, updated = backend_service.history(ALICE, entry.id)
    assert added.source is not None and updated.source is not None
    assert added.source.actor == updated.source.actor == "store"
    assert added.source.decision == "add"
    assert re.fullmatch(
        r"update tier=update score=\d\.\d\d jaccard=\d\.\d\d", updated.source.decision
    )
    plain = MemoryStore(backend_service)
    plain.put(NS, "plain", {"memory": "Alice keeps three beehives"})
    (event,) = backend_service.history(ALICE, plain.resolve(ALICE, (), "plain").id)
    assert event.source is not None and event.source.decision is None  # no policy ran


def test_reconcile_supersedes_a_changed_fact_and_the_key_reads_the_current_version(
    backend_service: MemoryService,
):
    store = MemoryStore(backend_service, reconcile=True)
    store.put(NS, "old", {"memory": "Production runs Go 1.23 on Kubernetes"})
    first = store.resolve(ALICE, (), "old")
    store.put(NS, "new", {"memory": "Production runs Go 1.24 on Kubernetes"})
    current = store.resolve(ALICE, (), "old")
    assert current.id != first.id and current.text == "Production runs Go 1.24 on Kubernetes"
    old, new = backend_service.versions(ALICE, current.id)  # both stored
    assert old.id == first.id and old.superseded_by == new.id == current.id
    closed = backend_service.history(ALICE, old.id)[-1]
    assert closed.operation == Operation.SUPERSEDE and closed.source.actor == "store"
    assert re.fullmatch(
        r"supersede tier=update score=\d\.\d\d jaccard=\d\.\d\d change=number",
        closed.source.decision,
    )
    assert [i.value["memory"] for i in store.search(NS)] == [current.text]  # current only
    assert [i.key for i in store.search(NS, query="Go on Kubernetes")] == ["old"]
    assert backend_service.count(ALICE) == 1
    store.put(NS, "old", {"memory": "Production runs Go 1.25 on Kubernetes"})  # the key: in place
    assert store.resolve(ALICE, (), "old").id == current.id
    store.delete(NS, "old")
    assert store.get(NS, "old") is None and store.search(NS) == []


# -- langmem's memory manager end to end (issue #14, defect 3) ---------------------------------


def test_langmem_memory_store_manager_updates_what_it_stored(backend_store: MemoryStore):
    from langmem import create_memory_store_manager

    seen: list[str] = []

    def patch(messages: list[Any]) -> AIMessage:
        seen.append("\n".join(str(m.content) for m in messages))
        assert "User loves green tea" in seen[-1]  # the manager was shown what it stored
        args = {
            "json_doc_id": re.search(r"<instance id=(\S+)", seen[-1]).group(1),
            "planned_edits": "replace the drink",
            "patches": [{"op": "replace", "path": "/content", "value": "User drinks coffee now"}],
        }
        return AIMessage("", tool_calls=[tool_call("PatchDoc", args)])

    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("Memory", {"content": "User loves green tea"})]),
            patch,
        ]
    )
    manager = create_memory_store_manager(
        model, namespace=("{app_name}", "{user_id}"), store=backend_store
    )
    config = {"configurable": {"app_name": "demo", "user_id": "alice"}}
    first = [HumanMessage("I love green tea"), AIMessage("Noted.")]
    manager.invoke({"messages": first}, config)
    (item,) = backend_store.search(NS)
    assert item.value == {"kind": "Memory", "content": {"content": "User loves green tea"}}
    second = [*first, HumanMessage("I switched to coffee"), AIMessage("Noted.")]
    manager.invoke({"messages": second}, config)
    (updated,) = backend_store.search(NS)
    assert updated.key == item.key and seen
    assert updated.value == {"kind": "Memory", "content": {"content": "User drinks coffee now"}}
    assert backend_store.service.count(ALICE) == 1


def test_index_fields_choose_the_searchable_text(backend_store: MemoryStore):
    value = {"memory": "unrelated words", "title": "Zanzibar ferry", "body": {"text": "quokka"}}
    backend_store.put(NS, "doc", value, index=["title", "body.text"])
    backend_store.put(NS, "other", {"memory": "Zanzibar is an island"})
    assert backend_store.search(NS, query="quokka", limit=1)[0].key == "doc"
    assert backend_store.get(NS, "doc").value == value


def test_query_search_with_filters_and_pagination_returns_every_match(backend_store: MemoryStore):
    docs = [
        ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
        ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
        ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
        ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
        ("doc5", {"text": "yellow bus", "color": "yellow", "score": 1.0}),
    ]
    for key, value in docs:
        backend_store.put(NS, key, value)
    red = backend_store.search(NS, query="apple", filter={"color": "red"})
    assert [i.key for i in red][:1] == ["doc1"] and len(red) == 2
    assert len(backend_store.search(NS, query="bbbbluuu", filter={"score": {"$gt": 3.2}})) == 3
    assert [i.key for i in backend_store.search(NS, query="apple", filter={"color": "green"})] == [
        "doc3"
    ]
    for query in ("", "test!@#$%^&*()", "test " * 100):
        assert len(backend_store.search(NS, query=query)) == 5, query
    first = backend_store.search(NS, query="car", limit=2)
    second = backend_store.search(NS, query="car", limit=2, offset=2)
    assert len(first) == len(second) == 2
    assert not {i.key for i in first} & {i.key for i in second}
    assert len(backend_store.search(NS, query="car", limit=10)) == 5


def test_deep_listing_reads_rows_only_after_a_change(backend_service: MemoryService):
    reads: list[int | None] = []

    class Counting(DelegatingService):
        def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
            if name == "read":
                reads.append(args[1] if len(args) > 1 else kwargs.get("limit"))
            return super()._call(name, *args, **kwargs)

    store = MemoryStore(Counting(backend_service))
    for i in range(20):
        store.put(NS + (f"s{i % 4}",), f"k{i}", {"memory": f"note {i}"})
    assert len(store.list_namespaces(prefix=NS)) == 4
    reads.clear()
    assert len(store.list_namespaces(prefix=NS)) == 4
    assert reads == [1]  # the stamp only
    other = MemoryStore(backend_service)  # another writer (another process, say)
    other.put(NS + ("new",), "k", {"memory": "new scope"})
    assert NS + ("new",) in store.list_namespaces(prefix=NS)
    other.delete(NS + ("new",), "k")
    assert NS + ("new",) not in store.list_namespaces(prefix=NS)
    store.put(NS + ("brief",), "k", {"memory": "short lived"}, ttl=0.02)
    assert NS + ("brief",) in store.list_namespaces(prefix=NS)
    time.sleep(1.5)
    assert NS + ("brief",) not in store.list_namespaces(prefix=NS)


def test_scoped_query_search_ranks_past_other_scopes_hits(backend_store: MemoryStore):
    scope = NS + ("trips",)
    backend_store.put(scope, "a", {"memory": "Saw one zebra on the safari"})
    backend_store.put(scope, "b", {"memory": "Bought new hiking boots"})  # newer, unrelated
    for i in range(30):
        backend_store.put(NS, f"z{i}", {"memory": f"Zebra herds migrate north, herd {i}"})
    assert [i.key for i in backend_store.search(scope, query="zebra herds", limit=1)] == ["a"]
    assert backend_store.search(scope, query="zebra herds", limit=2)[1].key == "b"
