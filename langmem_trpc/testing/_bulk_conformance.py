"""Conformance for `add_many` (mixed into `MemoryServiceConformance`): every item
behaves as `add` would, in order, and the batch is all or nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ..errors import CapacityExceededError, InvalidMemoryError, InvalidUserKeyError
from ..service.rules import Limits
from ..types import Memory, Operation, UserKey
from ._kit import ALICE, Client

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..service.protocol import MemoryService


MODES = ("sync", "async")


class BulkConformance:
    """Mixed into `MemoryServiceConformance`; `client` and `make_service` come from it."""

    async def test_add_many_returns_entries_in_input_order_as_add_would(
        self, client: Client
    ) -> None:
        entries = await client.add_many(
            ALICE, ["Likes tea", Memory(text="Lives in Lyon", topics=["home"]), "likes  TEA"]
        )
        assert [e.text for e in entries] == ["Likes tea", "Lives in Lyon", "Likes tea"]
        assert entries[0].id == entries[2].id  # the repeat is the same memory
        assert entries[1].memory.topics == ["home"]
        assert await client.count(ALICE) == 2
        assert await client.get(ALICE, entries[1].id) == entries[1]
        assert [h.operation for h in await client.history(ALICE, entries[0].id)] == [Operation.ADD]
        assert await client.add_many(ALICE, []) == []

    async def test_add_many_merges_topics_into_a_live_duplicate(self, client: Client) -> None:
        first = await client.add(ALICE, "Prefers dark mode", topics=["ui"])
        (again,) = await client.add_many(ALICE, [Memory(text="Prefers dark mode", topics=["x"])])
        assert again.id == first.id
        assert again.memory.topics == ["ui", "x"]
        assert (await client.get(ALICE, first.id)).memory.topics == ["ui", "x"]
        assert await client.count(ALICE) == 1

    async def test_add_many_revives_a_deleted_memory_under_its_old_id(self, client: Client) -> None:
        gone = await client.add(ALICE, "Owns a bicycle")
        assert await client.delete(ALICE, gone.id)
        back, new = await client.add_many(ALICE, ["Owns a bicycle", "Owns a kayak"])
        assert back.id == gone.id and new.id != gone.id
        assert await client.count(ALICE) == 2
        ops = [h.operation for h in await client.history(ALICE, gone.id)]
        assert ops == [Operation.ADD, Operation.DELETE, Operation.ADD]

    async def test_add_many_keeps_a_keyed_memory_apart_as_add_does(self, client: Client) -> None:
        keyed = await client.add(ALICE, "Speaks French", memory_id="lang-1")
        (plain,) = await client.add_many(ALICE, ["Speaks French"])
        assert plain.id != keyed.id
        assert plain.id == (await client.add(ALICE, "Speaks French")).id
        assert await client.count(ALICE) == 2
        updated = await client.add(ALICE, "Speaks German", memory_id="lang-1")  # keyed upsert
        assert updated.id == "lang-1" and await client.count(ALICE) == 2

    async def test_add_many_with_a_bad_item_stores_nothing(self, client: Client) -> None:
        await client.add(ALICE, "Already here")
        with pytest.raises(InvalidMemoryError) as bad_text:
            await client.add_many(ALICE, ["A good one", "   "])
        assert bad_text.value.field == "text"
        with pytest.raises(InvalidMemoryError) as bad_topics:
            await client.add_many(ALICE, ["Good", Memory(text="ok", topics=["t" * 10_000])])
        assert bad_topics.value.field.startswith("topics")
        with pytest.raises(InvalidUserKeyError):
            await client.add_many(UserKey("app", ""), ["A good one"])
        assert [e.text for e in await client.read(ALICE)] == ["Already here"]

    async def test_add_many_evicts_like_add(
        self, make_service: Callable[[Limits], MemoryService]
    ) -> None:
        for mode in MODES:
            svc = make_service(Limits(capacity=3, on_capacity="evict"))
            old = svc.add(ALICE, "one")
            svc.add(ALICE, "two")
            entries = await Client(svc, mode).add_many(ALICE, ["three", "four", "five"])
            assert {e.text for e in svc.read(ALICE)} == {"three", "four", "five"}
            assert len(entries) == 3 and svc.count(ALICE) == 3
            (evicted,) = [h for h in svc.history(ALICE, old.id) if h.operation == Operation.DELETE]
            assert evicted.source is not None and evicted.source.actor == "capacity"
            svc.purge(ALICE)
            svc.close()

    async def test_add_many_over_capacity_raises_and_stores_nothing(
        self, make_service: Callable[[Limits], MemoryService]
    ) -> None:
        for mode in MODES:
            svc = make_service(Limits(capacity=2, on_capacity="error"))
            svc.add(ALICE, "one")
            with pytest.raises(CapacityExceededError):
                await Client(svc, mode).add_many(ALICE, ["two", "one", "three"])
            assert [e.text for e in svc.read(ALICE)] == ["one"]
            assert len(await Client(svc, mode).add_many(ALICE, ["one", "two"])) == 2
            svc.purge(ALICE)
            svc.close()
