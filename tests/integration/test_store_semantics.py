"""MemoryStore against LangGraph's store semantics, round 3 (issues #32, #31.10, #31.12):
listing, index paths, TTL refresh, batch reads and refusals, ordering filters,
awaitable TTL helpers, the authenticated-user guard and value bounds. Every
test runs on every backend (in-memory, SQLite, PostgreSQL); sync and async.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from langmem_trpc import MemoryStore, UserKey
from langmem_trpc.errors import InvalidInputError, InvalidMemoryError, NamespaceAccessError

NS = ("demo", "alice")
ALICE = UserKey(*NS)


# -- #32.4: list_namespaces lists only users with items ------------------------------------------


async def test_a_user_without_items_is_not_listed(backend_store: MemoryStore):
    backend_store.put(("demo", "bob"), "k", {"memory": "Bob likes jazz"})
    backend_store.put(NS, "gone", {"memory": "deleted at once"})
    backend_store.delete(NS, "gone")
    for prefix in [NS, ("demo", "nobody")]:
        assert backend_store.list_namespaces(prefix=prefix, max_depth=2) == []
        assert await backend_store.alist_namespaces(prefix=prefix, max_depth=2) == []
        assert backend_store.list_namespaces(prefix=prefix) == []
    assert backend_store.list_namespaces(prefix=("demo", "bob"), max_depth=2) == [("demo", "bob")]
    assert backend_store.list_namespaces(max_depth=2) == [("demo", "bob")]
    reference = InMemoryStore()
    reference.put(("demo", "bob"), "k", {"memory": "Bob likes jazz"})
    assert reference.list_namespaces(prefix=NS, max_depth=2) == []


# -- #32.5: LangGraph's index path syntax ---------------------------------------------------------

VALUE = {
    "title": "Zebra project launch",
    "notes": [{"text": "tea at nine"}, {"text": "coffee at noon"}],
}


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("notes[*].text", "tea at nine\ncoffee at noon"),
        ("notes[0].text", "tea at nine"),
        ("notes[-1].text", "coffee at noon"),
        ("notes[5].text", "{}"),  # matches nothing: nothing else is indexed
        ("missing.field", "{}"),
    ],
)
async def test_index_paths_follow_langgraphs_syntax(
    backend_store: MemoryStore, path: str, text: str
):
    backend_store.put(NS, "sync", VALUE, index=[path])
    await backend_store.aput(NS, "async", VALUE, index=[path])
    for key in ("sync", "async"):
        entry = backend_store.resolve(ALICE, (), key)
        assert entry is not None and entry.text == text
        assert "Zebra" not in entry.text  # a field that was not listed is not searchable
        assert backend_store.get(NS, key).value == VALUE  # the value is kept whole


def test_a_title_left_out_of_the_index_is_not_what_matches(backend_store: MemoryStore):
    backend_store.put(NS, "k", VALUE, index=["notes[*].text"])
    backend_store.put(NS, "z", {"memory": "Zebra project launch on Monday"})
    hits = backend_store.search(NS, query="Zebra project launch", limit=2)
    assert [h.key for h in hits][0] == "z"
    assert hits[1].score is not None and hits[1].score < hits[0].score / 2


# -- #32.7: a refreshing read moves a short TTL once a tenth has passed --------------------------


async def test_a_refreshing_read_moves_a_short_ttl(backend_store: MemoryStore):
    ttl = 1.5 / 60  # 1.5 s
    backend_store.put(NS, "k", {"memory": "refreshed"}, ttl=ttl)
    await backend_store.aput(NS, "a", {"memory": "refreshed async"}, ttl=ttl)
    before = backend_store.resolve(ALICE, (), "k").expires_at
    await asyncio.sleep(0.9)
    assert backend_store.get(NS, "k") is not None
    assert await backend_store.aget(NS, "a") is not None
    assert backend_store.resolve(ALICE, (), "k").expires_at > before
    await asyncio.sleep(0.9)  # 1.8 s after the put: alive only because the reads moved the expiry
    assert backend_store.get(NS, "k", refresh_ttl=False) is not None
    assert await backend_store.aget(NS, "a", refresh_ttl=False) is not None


# -- #32.8-9: a batch reads the state before it and is refused whole -----------------------------


async def test_reads_in_a_batch_see_the_state_before_it(backend_store: MemoryStore):
    reference = InMemoryStore()
    ops = [
        PutOp(NS, "k", {"memory": "new in this batch"}),
        GetOp(NS, "k"),
        SearchOp(NS, None, 10, 0),
        ListNamespacesOp(None, None, 100, 0),
        PutOp(NS, "k", {"memory": "the last put wins"}),
    ]
    theirs = reference.batch(ops)
    ours = backend_store.batch(ops)
    assert ours[1] is theirs[1] is None and ours[2] == theirs[2] == []
    assert ours[3] == []  # (InMemoryStore's get leaves the namespace behind in its listing)
    assert backend_store.get(NS, "k").value == {"memory": "the last put wins"}
    again = await backend_store.abatch([PutOp(NS, "k", None), GetOp(NS, "k")])
    assert again[1] is not None and again[1].value == {"memory": "the last put wins"}
    assert backend_store.get(NS, "k") is None


@pytest.mark.parametrize(
    "bad",
    [
        PutOp(NS, "c", {"memory": float("nan")}),
        PutOp(NS, "c\x00", {"memory": "NUL in the key"}),
        PutOp(NS + ("a\ud800",), "c", {"memory": "lone surrogate in a scope"}),
        PutOp(NS, "c", {"memory": "x" * 2_000_000}),
    ],
)
async def test_a_refused_put_refuses_the_whole_batch(backend_store: MemoryStore, bad: PutOp):
    ops = [PutOp(NS, "a", {"memory": "first"}), PutOp(NS, "b", {"memory": "second"}), bad]
    with pytest.raises(InvalidInputError):
        backend_store.batch(ops)
    with pytest.raises(InvalidInputError):
        await backend_store.abatch(ops)
    assert backend_store.service.count(ALICE) == 0


# -- #32.10: booleans order as 0 and 1, as in InMemoryStore --------------------------------------


async def test_a_boolean_in_an_ordering_filter_is_a_number(backend_store: MemoryStore):
    reference = InMemoryStore()
    for key, n in [("zero", 0), ("one", 1), ("two", 2), ("yes", True), ("no", False)]:
        backend_store.put(NS, key, {"memory": key, "n": n})
        reference.put(NS, key, {"memory": key, "n": n})
    for condition in [{"$gt": True}, {"$gte": True}, {"$lt": True}, {"$lte": False}]:
        flt = {"n": condition}
        expected = sorted(i.key for i in reference.search(NS, filter=flt))
        assert expected, flt
        assert sorted(i.key for i in backend_store.search(NS, filter=flt)) == expected
        assert sorted(i.key for i in await backend_store.asearch(NS, filter=flt)) == expected


# -- #31.12: numbers beyond float range, and bounded values --------------------------------------


async def test_an_integer_beyond_float_range_orders_exactly(backend_store: MemoryStore):
    huge = 10**400
    backend_store.put(NS, "huge", {"memory": "huge", "n": huge})
    backend_store.put(NS, "small", {"memory": "small", "n": 5})
    backend_store.put(NS, "text", {"memory": "text", "n": "9" * 401})
    assert {i.key for i in backend_store.search(NS, filter={"n": {"$gt": 1e308}})} == {
        "huge",
        "text",
    }
    assert [i.key for i in await backend_store.asearch(NS, filter={"n": {"$lt": huge}})] == [
        "small"
    ]
    assert backend_store.get(NS, "huge").value["n"] == huge


def test_values_are_bounded_with_a_clear_error(backend_service: Any):
    store = MemoryStore(backend_service, max_value_bytes=1_000, max_value_keys=50)
    with pytest.raises(InvalidMemoryError, match=r"value.*1,000.*max_value_bytes"):
        store.put(NS, "k", {"memory": "x" * 2_000})
    with pytest.raises(InvalidMemoryError, match=r"value.*52 keys.*max_value_keys"):
        store.put(NS, "k", {"memory": "many keys", "meta": {f"k{i}": i for i in range(50)}})
    store.put(NS, "k", {"memory": "fits", "meta": {f"k{i}": i for i in range(40)}})
    with pytest.raises(InvalidMemoryError, match="max_value_bytes"):
        MemoryStore(backend_service).put(NS, "big", {"memory": "x" * 1_100_000})
    assert [i.key for i in store.search(NS)] == ["k"]
    with pytest.raises(InvalidInputError, match="max_value_keys"):
        MemoryStore(backend_service, max_value_keys=0)


# -- #32.11: the TTL helpers can be awaited, as on LangGraph's async stores ----------------------


async def test_ttl_helpers_are_awaitable(backend_store: MemoryStore):
    store = MemoryStore(backend_store.service, ttl={"sweep_interval_minutes": 1})
    future = await store.start_ttl_sweeper()
    assert not future.done()
    assert await store.stop_ttl_sweeper(timeout=5) is True
    assert future.result(timeout=5) is None
    assert await store.asweep_ttl() == 0
    assert (await MemoryStore(backend_store.service).start_ttl_sweeper()).done()
    assert store.stop_ttl_sweeper()  # still usable without await


# -- #31.10: a present but unusable authenticated id refuses -------------------------------------


@contextmanager
def run_config(auth: Any) -> Iterator[None]:
    config: Any = {"configurable": {"langgraph_auth_user_id": auth, "user_id": "alice"}}
    token = var_child_runnable_config.set(config)
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)


@pytest.mark.parametrize("auth", [123, ["bob"], {"id": "bob"}, "  ", True, 0.5])
async def test_an_unusable_authenticated_id_refuses_everything(
    backend_store: MemoryStore, auth: Any
):
    backend_store.put(NS, "k", {"memory": "Alice's secret"})
    with run_config(auth):
        for call in (
            lambda: backend_store.search(("demo",)),
            lambda: backend_store.get(NS, "k"),
            lambda: backend_store.put(NS, "x", {"memory": "forged"}),
            lambda: backend_store.list_namespaces(),
        ):
            with pytest.raises(NamespaceAccessError, match="langgraph_auth_user_id"):
                call()
        with pytest.raises(NamespaceAccessError):
            await backend_store.asearch(("demo",))
        with pytest.raises(NamespaceAccessError):
            backend_store.for_user(*NS).get(NS, "k")
    assert backend_store.service.count(ALICE) == 1


@pytest.mark.parametrize("auth", [None, ""])
def test_an_absent_authenticated_id_leaves_the_store_open(backend_store: MemoryStore, auth: Any):
    backend_store.put(("demo", "bob"), "k", {"memory": "Bob's note"})
    with run_config(auth):
        assert [i.key for i in backend_store.search(("demo",))] == ["k"]


def test_ttl_refresh_interval_is_a_tenth(backend_store: MemoryStore):
    """The documented rule, checked without sleeping long: a read right after a put
    does not write; one after a tenth of the TTL does."""
    backend_store.put(NS, "k", {"memory": "x"}, ttl=0.5 / 60)
    first = backend_store.resolve(ALICE, (), "k").expires_at
    backend_store.get(NS, "k")
    assert backend_store.resolve(ALICE, (), "k").expires_at == first
    time.sleep(0.1)
    backend_store.get(NS, "k")
    assert backend_store.resolve(ALICE, (), "k").expires_at > first


async def test_gathered_reads_and_writes_keep_the_hybrid_store_consistent(
    backend_store: MemoryStore,
):
    await asyncio.gather(
        *(backend_store.aput(NS, f"k{i}", {"memory": f"n {i}"}) for i in range(20))
    )
    assert len(await backend_store.asearch(NS, limit=50)) == 20
