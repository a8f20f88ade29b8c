"""One conformance suite for every `MemoryService`, run sync and async.

Subclass `MemoryServiceConformance` in a test module and provide the fixtures
`service` (a fresh, empty service), `make_service` (limits -> a service, for the
capacity tests) and, for a backend that declares `Capability.DURABLE` or
`Capability.CROSS_PROCESS`, `service_url` (the URL `langmem_trpc.open()` opens the
same store with). Every test body runs through the sync methods and through their
`a*` twins, and every capability the service declares is tested. Example:
docs/backends.md, "The conformance suite".
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from ..errors import (
    CapacityExceededError,
    InvalidInputError,
    InvalidMemoryError,
    InvalidTimeError,
    InvalidUserKeyError,
    MemoryConflictError,
    MemoryNotFoundError,
)
from ..service.capabilities import Capability
from ..service.protocol import MemoryService
from ..service.rules import Limits
from ..types import ExtractionCursor, Kind, Memory, Operation, SearchOptions, Source, UserKey
from ._bulk_conformance import BulkConformance
from ._claims_conformance import ClaimsConformance
from ._identity_conformance import IdentityConformance
from ._integrity_conformance import IntegrityConformance
from ._kit import ALICE, ALICE_OTHER_APP, BOB, T0, Client, refused
from ._lifecycle_conformance import LifecycleConformance
from ._search_conformance import SearchConformance
from ._validity_conformance import ValidityConformance

__all__ = ["Capability", "Client", "MemoryServiceConformance"]


class MemoryServiceConformance(
    BulkConformance,
    ClaimsConformance,
    IdentityConformance,
    IntegrityConformance,
    LifecycleConformance,
    SearchConformance,
    ValidityConformance,
):
    """The behaviour every backend must have. See the module docstring."""

    pytestmark = pytest.mark.asyncio

    @pytest.fixture(params=["sync", "async"])
    def client(self, request: pytest.FixtureRequest, service: MemoryService) -> Iterator[Client]:
        yield Client(service, request.param)
        service.close()

    @pytest.fixture
    def service_url(self) -> str | None:
        """A URL `langmem_trpc.open()` opens the `service` fixture's store with
        (another service, or another process, on the same data). Backends that
        declare DURABLE or CROSS_PROCESS must override it; None means "none"."""
        return None

    async def test_users_and_apps_are_isolated(self, client: Client) -> None:
        a = await client.add(ALICE, "Likes green tea")
        await client.add(BOB, "Likes black coffee")
        await client.add(ALICE_OTHER_APP, "Likes oolong tea")
        assert [e.text for e in await client.read(ALICE)] == ["Likes green tea"]
        assert [e.text for e in await client.search(ALICE, "likes tea coffee")] == [
            "Likes green tea"
        ]
        assert await client.get(BOB, a.id) is None
        assert await client.get(ALICE_OTHER_APP, a.id) is None
        with pytest.raises(MemoryNotFoundError):
            await client.update(BOB, a.id, "hijacked")
        assert await client.delete(BOB, a.id) is False
        assert await client.history(BOB, a.id) == []
        assert await client.purge(BOB, a.id) == 0
        assert (await client.get(ALICE, a.id)).text == "Likes green tea"

    async def test_lookalike_user_ids_are_distinct(self, client: Client) -> None:
        names = ["alice", "Alice", "alice ", "alice\u200b", "a/b", "50%", "o'neil", "x:y", "*"]
        for name in names:
            await client.add(UserKey("app", name), f"memory of {name!r}")
        for name in names:
            texts = [e.text for e in await client.read(UserKey("app", name))]
            assert texts == [f"memory of {name!r}"]

    async def test_clear_touches_only_that_user(self, client: Client) -> None:
        await client.add(ALICE, "one")
        await client.add(ALICE, "two")
        await client.add(BOB, "three")
        assert await client.clear(ALICE) == 2
        assert await client.read(ALICE) == []
        assert len(await client.read(BOB)) == 1
        assert await client.count(BOB) == 1

    async def test_add_is_idempotent_and_refreshes_topics(self, client: Client) -> None:
        first = await client.add(ALICE, "Prefers dark mode", topics=["ui"])
        again = await client.add(ALICE, "  prefers   DARK mode. ", topics=["theme"])
        assert again.id == first.id
        assert again.memory.topics == ["ui", "theme"]
        assert await client.count(ALICE) == 1
        assert [h.operation for h in await client.history(ALICE, first.id)] == [Operation.ADD]

    async def test_same_text_with_different_event_is_a_new_memory(self, client: Client) -> None:
        monday = await client.add(ALICE, "Went hiking", kind=Kind.EPISODE, event_time=T0)
        tuesday = await client.add(
            ALICE, "Went hiking", kind="episode", event_time=T0 + timedelta(days=1)
        )
        fact = await client.add(ALICE, "Went hiking")
        assert len({monday.id, tuesday.id, fact.id}) == 3

    async def test_update_keeps_id_and_records_history(self, client: Client) -> None:
        entry = await client.add(ALICE, "Production runs Go 1.23", topics=["go"])
        source = Source(
            thread_id="t1",
            message_ids=["m1", "m2"],
            actor="worker",
            decision="update tier=update score=0.72 jaccard=0.67",
        )
        updated = await client.update(ALICE, entry.id, "Production runs Go 1.24", source=source)
        assert updated.id == entry.id
        assert updated.memory.topics == ["go"]
        assert updated.updated_at >= entry.updated_at
        assert updated.created_at == entry.created_at
        fetched = await client.get(ALICE, entry.id)
        assert fetched is not None and fetched.text == "Production runs Go 1.24"
        history = await client.history(ALICE, entry.id)
        assert [(h.operation, h.text_before, h.text_after) for h in history] == [
            (Operation.ADD, None, "Production runs Go 1.23"),
            (Operation.UPDATE, "Production runs Go 1.23", "Production runs Go 1.24"),
        ]
        assert history[1].source == source

    async def test_update_patches_only_given_fields(self, client: Client) -> None:
        entry = await client.add(
            ALICE,
            "Met Bob",
            kind=Kind.EPISODE,
            event_time=T0,
            participants=["Bob"],
            location="Paris",
        )
        updated = await client.update(ALICE, entry.id, "Met Bob for lunch", topics=["food"])
        assert updated.memory.kind == Kind.EPISODE
        assert updated.memory.event_time == T0
        assert updated.memory.participants == ["Bob"]
        assert updated.memory.location == "Paris"
        assert updated.memory.topics == ["food"]

    async def test_update_to_existing_content_is_a_conflict(self, client: Client) -> None:
        a = await client.add(ALICE, "Uses vim")
        b = await client.add(ALICE, "Uses emacs")
        with pytest.raises(MemoryConflictError) as info:
            await client.update(ALICE, a.id, "uses EMACS")
        assert info.value.existing_id == b.id
        assert (await client.get(ALICE, a.id)).text == "Uses vim"

    async def test_update_unknown_id_raises_not_found(self, client: Client) -> None:
        with pytest.raises(MemoryNotFoundError) as info:
            await client.update(ALICE, "does-not-exist", "text")
        assert isinstance(info.value, KeyError)

    async def test_explicit_id_is_an_upsert(self, client: Client) -> None:
        first = await client.add(ALICE, "value one", memory_id="key-1", metadata={"n": 1})
        second = await client.add(ALICE, "value one", memory_id="key-2")
        assert (first.id, second.id) == ("key-1", "key-2")
        again = await client.add(ALICE, "value two", memory_id="key-1", metadata={"n": 2})
        assert (
            again.id == "key-1" and again.text == "value two" and again.memory.metadata == {"n": 2}
        )
        assert await client.count(ALICE) == 2

    async def test_soft_delete_keeps_history_and_hides_the_memory(self, client: Client) -> None:
        entry = await client.add(ALICE, "Has a cat named Tom")
        assert await client.delete(ALICE, entry.id, source=Source(actor="tool")) is True
        assert await client.delete(ALICE, entry.id) is False
        assert await client.get(ALICE, entry.id) is None
        assert await client.read(ALICE) == []
        assert await client.search(ALICE, "cat Tom") == []
        ops = [h.operation for h in await client.history(ALICE, entry.id)]
        assert ops == [Operation.ADD, Operation.DELETE]

    async def test_re_adding_deleted_content_revives_the_same_id(self, client: Client) -> None:
        entry = await client.add(ALICE, "Lives in Berlin")
        await client.delete(ALICE, entry.id)
        revived = await client.add(ALICE, "Lives in Berlin")
        assert revived.id == entry.id
        ops = [h.operation for h in await client.history(ALICE, entry.id)]
        assert ops == [Operation.ADD, Operation.DELETE, Operation.ADD]

    async def test_clear_records_history(self, client: Client) -> None:
        entry = await client.add(ALICE, "Speaks French")
        await client.clear(ALICE)
        ops = [h.operation for h in await client.history(ALICE, entry.id)]
        assert ops == [Operation.ADD, Operation.CLEAR]

    async def test_purge_removes_rows_and_history(self, client: Client) -> None:
        a = await client.add(ALICE, "alpha")
        b = await client.add(ALICE, "beta")
        await client.delete(ALICE, b.id)
        assert await client.purge(ALICE, a.id) == 1
        assert await client.history(ALICE, a.id) == []
        assert await client.get(ALICE, a.id) is None
        await client.add(BOB, "bob's")
        assert await client.purge(ALICE) == 1  # the soft-deleted beta
        assert await client.history(ALICE, b.id) == []
        assert await client.count(BOB) == 1

    async def test_read_is_newest_first_with_limit(self, client: Client) -> None:
        ids = [(await client.add(ALICE, f"memory number {i}")).id for i in range(5)]
        await client.update(ALICE, ids[0], "memory number zero, edited")
        got = [e.id for e in await client.read(ALICE)]
        assert got == [ids[0], ids[4], ids[3], ids[2], ids[1]]
        assert [e.id for e in await client.read(ALICE, limit=2)] == [ids[0], ids[4]]
        assert len(await client.read(ALICE, limit=None)) == 5

    async def test_users_lists_live_users(self, client: Client) -> None:
        await client.add(ALICE, "x1")
        await client.add(ALICE_OTHER_APP, "x2")
        gone = await client.add(BOB, "x3")
        await client.delete(BOB, gone.id)
        assert await client.users() == [ALICE, ALICE_OTHER_APP]
        assert await client.users("app") == [ALICE]

    async def test_keyword_search_ranks_and_scores_absolutely(self, client: Client) -> None:
        await client.add(ALICE, "Production environment runs Go 1.23 on Kubernetes")
        await client.add(ALICE, "Enjoys hiking in the Alps")
        await client.add(ALICE, "Has two cats")
        hits = await client.search(ALICE, "which Go version runs in production?")
        assert hits and hits[0].text.startswith("Production environment")
        assert all(0.0 <= (h.score or 0) <= 1.0 for h in hits)
        assert all("hiking" not in h.text for h in hits)

    async def test_empty_query_returns_nothing(self, client: Client) -> None:
        await client.add(ALICE, "anything")
        assert await client.search(ALICE, "   ") == []
        assert await client.search(ALICE, "", SearchOptions(query="anything")) == []

    async def test_query_syntax_in_user_text_is_harmless(self, client: Client) -> None:
        await client.add(ALICE, 'Said "hello" NEAR the door -- then left * quickly')
        for query in [
            '"hello',
            "NEAR(door",
            "-- then",
            "*",
            "a OR b AND",
            "'; DROP TABLE x; --",
            "C#",
            "^$",
        ]:
            await client.search(ALICE, query)
            await client.search(ALICE, query, SearchOptions(hybrid=True))
        assert await client.count(ALICE) == 1

    async def test_kind_filter_and_fallback(self, client: Client) -> None:
        await client.add(ALICE, "Loves sushi and ramen")
        await client.add(ALICE, "Ate sushi in Tokyo", kind=Kind.EPISODE, event_time=T0)
        only = await client.search(ALICE, "sushi", SearchOptions(kind=Kind.EPISODE))
        assert [e.text for e in only] == ["Ate sushi in Tokyo"]
        merged = await client.search(
            ALICE, "sushi", SearchOptions(kind=Kind.EPISODE, kind_fallback=True)
        )
        assert [e.text for e in merged] == ["Ate sushi in Tokyo", "Loves sushi and ramen"]

    async def test_time_range_keeps_undated_entries(self, client: Client) -> None:
        await client.add(ALICE, "Trip to Rome", kind=Kind.EPISODE, event_time=T0)
        await client.add(
            ALICE, "Trip to Oslo", kind=Kind.EPISODE, event_time=T0 + timedelta(days=60)
        )
        await client.add(ALICE, "Trip planning is fun")
        options = SearchOptions(time_after=T0 + timedelta(days=30), max_results=10)
        texts = {e.text for e in await client.search(ALICE, "trip", options)}
        assert texts == {"Trip to Oslo", "Trip planning is fun"}
        before = SearchOptions(time_before="2024-05-02")
        assert {e.text for e in await client.search(ALICE, "trip", before)} == {
            "Trip to Rome",
            "Trip planning is fun",
        }

    async def test_order_by_event_time_breaks_ties(self, client: Client) -> None:
        for days in (3, 1, 2):
            await client.add(
                ALICE, "Went to the gym", kind=Kind.EPISODE, event_time=T0 + timedelta(days=days)
            )
        hits = await client.search(ALICE, "gym", SearchOptions(order_by_event_time=True))
        assert [h.memory.event_time for h in hits] == [T0 + timedelta(days=d) for d in (1, 2, 3)]

    async def test_max_results_and_threshold(self, client: Client) -> None:
        for i in range(8):
            await client.add(ALICE, f"Coffee note {i}: likes coffee variant {i}")
        assert len(await client.search(ALICE, "coffee", SearchOptions(max_results=3))) == 3
        assert await client.search(ALICE, "coffee", SearchOptions(similarity_threshold=1.0)) == []

    async def test_deduplicate_drops_near_duplicates(self, client: Client) -> None:
        await client.add(ALICE, "Alice adopted a golden retriever puppy named Max")
        await client.add(ALICE, "Alice adopted a golden retriever puppy named Max yesterday")
        await client.add(ALICE, "Alice works as a nurse")
        plain = await client.search(ALICE, "golden retriever puppy Max")
        deduped = await client.search(
            ALICE, "golden retriever puppy Max", SearchOptions(deduplicate=True)
        )
        assert len(plain) >= 2
        assert len([e for e in deduped if "retriever" in e.text]) == 1

    async def test_hybrid_exposes_rrf_and_absolute_score(self, client: Client) -> None:
        self.need(client, Capability.VECTORS)
        await client.add(ALICE, "Production runs Go 1.23")
        await client.add(ALICE, "Prefers tabs over spaces")
        hits = await client.search(ALICE, "Go version in production", SearchOptions(hybrid=True))
        assert hits[0].text == "Production runs Go 1.23"
        assert hits[0].rrf_score is not None and 0 < hits[0].rrf_score <= 2 / 61
        assert hits[0].score is not None and 0 < hits[0].score <= 1

    async def test_vector_search_finds_morphological_variants(self, client: Client) -> None:
        self.need(client, Capability.VECTORS)
        await client.add(ALICE, "Upgraded the database servers")
        await client.add(ALICE, "Bakes sourdough bread")
        hits = await client.search(
            ALICE, "database upgrade", SearchOptions(similarity_threshold=0.2)
        )
        assert hits and hits[0].text == "Upgraded the database servers"

    async def test_vector_leg_embeds_the_text_alone(self, client: Client) -> None:
        """Participants are not part of a memory's vector (`embedding_text`): two memories
        with one text and different participants score alike in a vector-only search,
        on add, add_many and after a change of participants alone."""
        self.need(client, Capability.VECTORS)
        vector_only = SearchOptions(hybrid=False, similarity_threshold=0.0)
        said = await client.add(
            ALICE, "I went to the support group last night", participants=["Caroline"]
        )
        await client.add_many(
            ALICE,
            [Memory(text="I went to the support group last night", participants=["Melanie"])],
        )
        hits = await client.search(ALICE, "Caroline support group", vector_only)
        assert len(hits) == 2 and hits[0].score == pytest.approx(hits[1].score, abs=1e-6)
        await client.update(ALICE, said.id, said.text, participants=["Jon"])
        again = await client.search(ALICE, "Caroline support group", vector_only)
        assert [h.score for h in again] == pytest.approx([h.score for h in hits], abs=1e-6)

    async def test_unicode_and_cjk(self, client: Client) -> None:
        await client.add(ALICE, "喜欢喝绿茶和乌龙茶")
        await client.add(ALICE, "Vit à Montréal, aime le café crème")
        await client.add(ALICE, "東京で寿司を食べた")
        assert [e.text for e in await client.search(ALICE, "绿茶")] == ["喜欢喝绿茶和乌龙茶"]
        assert [e.text for e in await client.search(ALICE, "montréal café")] == [
            "Vit à Montréal, aime le café crème"
        ]
        assert [e.text for e in await client.search(ALICE, "寿司")] == ["東京で寿司を食べた"]

    async def test_bad_input_names_the_field_and_writes_nothing(self, client: Client) -> None:
        cases: list[tuple[dict[str, Any], type[InvalidInputError], str]] = [
            ({"text": "   "}, InvalidMemoryError, "text"),
            ({"text": "x" * 100_000}, InvalidMemoryError, "text"),
            ({"text": "ok", "kind": "opinion"}, InvalidMemoryError, "kind"),
            ({"text": "ok", "event_time": datetime(2024, 1, 1)}, InvalidTimeError, "event_time"),
            ({"text": "ok", "event_time": "next tuesday-ish"}, InvalidTimeError, "event_time"),
            ({"text": "ok", "topics": "not-a-list"}, InvalidMemoryError, "topics"),
            (
                {"text": "ok", "topics": [f"t{i}" for i in range(10_000)]},
                InvalidMemoryError,
                "topics",
            ),
        ]
        for kwargs, error, field in cases:
            await refused(error, field, client.add(ALICE, kwargs.pop("text"), **kwargs))
        assert await client.count(ALICE) == 0
        with pytest.raises(InvalidUserKeyError):
            UserKey("", "alice")
        with pytest.raises(InvalidUserKeyError):
            UserKey("app", "   ")
        with pytest.raises(InvalidUserKeyError):
            await client.add("not-a-user-key", "text")

    async def test_bad_update_leaves_memory_untouched(self, client: Client) -> None:
        entry = await client.add(ALICE, "Original text")
        with pytest.raises(InvalidMemoryError):
            await client.update(ALICE, entry.id, "")
        with pytest.raises(InvalidTimeError):
            await client.update(ALICE, entry.id, "New", event_time="not a date")
        assert (await client.get(ALICE, entry.id)).text == "Original text"
        assert len(await client.history(ALICE, entry.id)) == 1

    async def test_capacity_error_policy(
        self, make_service: Callable[[Limits], MemoryService]
    ) -> None:
        svc = make_service(Limits(capacity=2, on_capacity="error"))
        svc.add(ALICE, "one")
        svc.add(ALICE, "two")
        with pytest.raises(CapacityExceededError):
            svc.add(ALICE, "three")
        assert svc.add(ALICE, "two").text == "two"  # idempotent re-add is not a new memory
        svc.add(BOB, "bob has room")
        assert svc.count(ALICE) == 2
        svc.close()

    async def test_capacity_evict_policy(
        self, make_service: Callable[[Limits], MemoryService]
    ) -> None:
        svc = make_service(Limits(capacity=2, on_capacity="evict"))
        first = svc.add(ALICE, "one")
        svc.add(ALICE, "two")
        await asyncio.sleep(0.002)
        svc.add(ALICE, "three")
        assert {e.text for e in svc.read(ALICE)} == {"two", "three"}
        assert [h.operation for h in svc.history(ALICE, first.id)][-1] == Operation.DELETE
        svc.close()

    async def test_restore_writes_entries_back_exactly(self, client: Client) -> None:
        entry = await client.add(
            ALICE, "Hiked Mont Blanc", kind=Kind.EPISODE, event_time=T0, topics=["trip"]
        )
        await client.update(ALICE, entry.id, "Hiked Mont Blanc with Bob", participants=["Bob"])
        exported = await client.get(ALICE, entry.id)
        history = await client.history(ALICE, entry.id)
        await client.purge(ALICE)
        restored = await client.restore(ALICE, exported, history)
        assert restored == exported
        assert await client.get(ALICE, entry.id) == exported
        assert await client.history(ALICE, entry.id) == history
        again = await client.add(
            ALICE,
            "hiked mont blanc with bob",
            kind=Kind.EPISODE,
            event_time=T0,
            participants=["Bob"],
        )
        assert again.id == entry.id
        assert [e.id for e in await client.search(ALICE, "Mont Blanc")] == [entry.id]

    async def test_undelete_brings_every_field_back_and_records_a_restore(
        self, client: Client
    ) -> None:
        entry = await client.add(
            ALICE,
            "Hiked Mont Blanc",
            kind=Kind.EPISODE,
            event_time=T0,
            topics=["Paris, France", "trip"],
            participants=["Smith, John"],
            location="Alps",
        )
        assert await client.delete(ALICE, entry.id, source=Source(actor="ui"))
        with pytest.raises(MemoryNotFoundError):
            await client.undelete(BOB, entry.id)  # another user's id is unknown
        back = await client.undelete(ALICE, entry.id, source=Source(actor="ui"))
        assert back.memory == entry.memory and back.id == entry.id
        assert (await client.get(ALICE, entry.id)).memory == entry.memory
        events = await client.history(ALICE, entry.id)
        assert [h.operation for h in events] == [
            Operation.ADD,
            Operation.DELETE,
            Operation.RESTORE,
        ]
        assert events[-1].text_after == entry.text and events[-1].source.actor == "ui"
        assert [e.id for e in await client.search(ALICE, "Mont Blanc")] == [entry.id]
        assert (await client.undelete(ALICE, entry.id)).memory == entry.memory  # live: as is
        assert len(await client.history(ALICE, entry.id)) == 3
        await client.purge(ALICE, entry.id)
        with pytest.raises(MemoryNotFoundError):
            await client.undelete(ALICE, entry.id)
        twin = await client.add(ALICE, "Likes tea")
        await client.delete(ALICE, twin.id)
        again = await client.add(ALICE, "Likes coffee")
        await client.update(ALICE, again.id, "Likes tea")  # the content is live elsewhere
        with pytest.raises(MemoryConflictError):
            await client.undelete(ALICE, twin.id)

    async def test_deleted_lists_deleted_memories_until_restored(self, client: Client) -> None:
        first = await client.add(ALICE, "Hiked Mont Blanc", topics=["trip"], location="Alps")
        second = await client.add(ALICE, "Likes green tea")
        live = await client.add(ALICE, "Works from Lyon")
        bobs = await client.add(BOB, "Likes black coffee")
        assert await client.deleted(ALICE) == []
        await client.delete(ALICE, first.id)
        await asyncio.sleep(0.01)  # distinct deletion times on any clock
        await client.delete(ALICE, second.id)
        await client.delete(BOB, bobs.id)
        gone = await client.deleted(ALICE)
        assert [e.id for e in gone] == [second.id, first.id]  # most recently deleted first
        assert gone[1].memory == first.memory
        assert [e.id for e in await client.read(ALICE)] == [live.id]
        assert [e.id for e in await client.deleted(ALICE, 1)] == [second.id]
        assert [e.id for e in await client.deleted(BOB)] == [bobs.id]  # never another's
        assert await client.deleted(ALICE_OTHER_APP) == []
        await refused(InvalidInputError, "limit", client.deleted(ALICE, True))
        await client.undelete(ALICE, first.id)
        assert [e.id for e in await client.deleted(ALICE)] == [second.id]
        await client.purge(ALICE, second.id)
        assert await client.deleted(ALICE) == []

    async def test_cursor_round_trip_per_user_and_thread(self, client: Client) -> None:
        cursor = ExtractionCursor(
            thread_id="t1", last_message_id="m9", last_message_digest="d", message_count=9
        )
        await client.set_cursor(ALICE, cursor)
        got = await client.get_cursor(ALICE, "t1")
        assert got is not None and got.last_message_id == "m9" and got.message_count == 9
        assert await client.get_cursor(ALICE, "t2") is None
        assert await client.get_cursor(BOB, "t1") is None
        await client.set_cursor(
            ALICE, cursor.model_copy(update={"last_message_id": "m12", "message_count": 12})
        )
        again = await client.get_cursor(ALICE, "t1")
        assert again is not None and again.last_message_id == "m12"

    async def test_expired_memories_are_hidden_until_swept(self, client: Client) -> None:
        gone = await client.add(ALICE, "Temporary parking code 4417")
        kept = await client.add(ALICE, "Permanent parking spot 12")
        past, future = T0, datetime.now(timezone.utc) + timedelta(hours=1)
        assert await client.set_expiry(ALICE, gone.id, past) is True
        assert await client.set_expiry(ALICE, kept.id, future) is True
        assert await client.set_expiry(BOB, kept.id, past) is False  # another user's id
        assert await client.set_expiry(ALICE, "missing", past) is False
        with pytest.raises(InvalidTimeError):
            await client.set_expiry(ALICE, kept.id, datetime(2030, 1, 1))  # naive
        assert await client.get(ALICE, gone.id) is None
        assert [e.id for e in await client.read(ALICE)] == [kept.id]
        found = await client.search(ALICE, "parking code", SearchOptions(similarity_threshold=0))
        assert [e.id for e in found] == [kept.id]
        live = await client.get(ALICE, kept.id)
        assert live is not None and live.expires_at == future
        assert live.updated_at == kept.updated_at  # setting an expiry is not an edit
        assert len(await client.history(ALICE, kept.id)) == 1
        assert await client.expired(ALICE) == [gone.id]
        assert await client.expired(BOB) == []
        assert await client.set_expiry(ALICE, gone.id, None) is True  # cleared: visible again
        assert (await client.get(ALICE, gone.id)) is not None
        assert await client.expired(ALICE) == []
        history = await client.history(ALICE, kept.id)
        await client.purge(ALICE, kept.id)
        assert await client.restore(ALICE, live, history) == live  # the expiry round-trips
        assert await client.get(ALICE, kept.id) == live

    async def test_concurrent_writers_on_one_user(self, client: Client) -> None:
        service = client.service
        errors: list[BaseException] = []

        def writer(n: int) -> None:
            try:
                for i in range(10):
                    service.add(ALICE, f"writer {n} fact {i}")
                    service.add(ALICE, "shared fact every writer adds")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert await client.count(ALICE) == 41
        shared = [e for e in await client.read(ALICE) if e.text.startswith("shared")]
        assert len(shared) == 1
