"""Conformance for search over every content field and for paging (mixed into
`MemoryServiceConformance`): a memory is found by its text, topics, participants and
location, on every write path; a longer result list starts with the shorter one."""

from __future__ import annotations

import pytest

from ..service.capabilities import Capability
from ..types import Kind, Memory, SearchOptions
from ._kit import ALICE, Client

README_QUERIES = ("Chamonix", "Bob", "What did Alice do with Bob in Chamonix?", "Mont Blanc")


class SearchConformance:
    """Mixed into `MemoryServiceConformance`; `client` comes from it."""

    async def _texts(self, client: Client, query: str, **options: object) -> list[str]:
        hits = await client.search(ALICE, query, SearchOptions(**options))  # type: ignore[arg-type]
        return [h.text for h in hits]

    async def test_participants_and_location_are_searchable(self, client: Client) -> None:
        """The README's episode is found by its place, its companion and a question
        naming both, though neither is in its text."""
        await client.add(
            ALICE,
            "Hiked Mont Blanc",
            kind=Kind.EPISODE,
            event_time="2024-07-14",
            participants=["Bob"],
            location="Chamonix",
        )
        await client.add(ALICE, "Prefers tea over coffee", topics=["drinks"])
        for query in README_QUERIES:
            assert (await self._texts(client, query))[:1] == ["Hiked Mont Blanc"], query
            if Capability.VECTORS not in client.service.capabilities:  # keyword leg alone
                assert await self._texts(client, query, hybrid=False) == ["Hiked Mont Blanc"]

    async def test_changed_fields_are_searched_as_they_are_now(self, client: Client) -> None:
        """An update of participants or location, a topics refresh (add of the same
        content) and `add_many` all index the fields; a removed name no longer matches."""
        entry = await client.add(ALICE, "Dinner party", participants=["Carol"], location="Lyon")
        await client.add(ALICE, "Read a novel")
        assert await self._texts(client, "Carol") == ["Dinner party"]
        await client.update(ALICE, entry.id, "Dinner party", participants=["Dave"], location="Nice")
        assert await self._texts(client, "Dave Nice") == ["Dinner party"]
        assert await self._texts(client, "Carol") == []
        assert await self._texts(client, "Lyon") == []
        await client.add(
            ALICE, "Dinner party", participants=["Dave"], location="Nice", topics=["food"]
        )
        assert await self._texts(client, "Nice") == ["Dinner party"]
        sailing = Memory(text="Sailing trip", participants=["Erin"], location="Marseille")
        await client.add_many(ALICE, [sailing])
        assert await self._texts(client, "Erin Marseille") == ["Sailing trip"]

    @pytest.mark.parametrize("hybrid", [True, False], ids=["hybrid", "vector-or-keyword"])
    async def test_pages_are_slices_of_one_order(self, client: Client, hybrid: bool) -> None:
        """Asking for more results never reorders the first ones: a page read through
        `max_results` = offset + limit is a slice of one stable order (250 memories)."""
        words = ["garden", "river", "market", "music", "train", "coffee", "book", "storm"]
        await client.add_many(
            ALICE,
            [
                Memory(
                    text=f"Note {i}: {words[i % 8]} {words[(i * 3) % 8]} and {words[(i * 5) % 7]}"
                    + " garden" * (i % 4)
                    + f" item{i}",
                    topics=[words[(i * 7) % 8]] if i % 3 else [],
                )
                for i in range(250)
            ],
        )
        query = "garden river music by the train"
        options = {"hybrid": hybrid, "similarity_threshold": 0.0}
        full = await self._texts(client, query, max_results=250, **options)
        assert len(full) >= 100
        for size in (10, 30, 40, 60, 110, 170):
            head = await self._texts(client, query, max_results=size, **options)
            assert head == full[:size], size
