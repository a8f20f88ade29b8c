"""Conformance for validity and supersede (`service/validity.py`, the write rules of
`service/plans.py`): business time on every memory, supersede that closes and
links instead of overwriting, current-by-default reads, `as_of`, version chains
and their restore (mixed into `MemoryServiceConformance`, so every backend runs
them, sync and async)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import pytest

from ..errors import (
    CapacityExceededError,
    InvalidInputError,
    InvalidTimeError,
    MemoryConflictError,
    MemoryNotFoundError,
)
from ..service.rules import Limits
from ..types import Entry, Kind, Operation, SearchOptions
from ._kit import ALICE, BOB, T0, Client, refused

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..service.protocol import MemoryService

DAY = timedelta(days=1)
GO = "Production runs Go 1.23"
GO_NEW = "Production runs Go 1.24"


async def _chain(client: Client, *texts: str, step: timedelta = 10 * DAY) -> list[Entry]:
    """A version chain of `texts`: the first valid from T0, each next one `step` later."""
    entries = [await client.add(ALICE, texts[0], valid_from=T0)]
    for n, text in enumerate(texts[1:], start=1):
        new = await client.update(
            ALICE, entries[-1].id, text, supersede=True, valid_from=T0 + n * step
        )
        entries.append(new)
    return entries


def _texts(entries: list[Entry]) -> list[str]:
    return [e.text for e in entries]


class ValidityConformance:
    """Validity, supersede, as-of reads and version chains."""

    async def test_valid_from_defaults_to_the_event_time_else_the_write_time(
        self, client: Client
    ) -> None:
        fact = await client.add(ALICE, "Keeps bees")
        assert fact.valid_from == fact.created_at and fact.valid_to is None
        assert fact.superseded_by is None and not fact.superseded
        trip = await client.add(ALICE, "Flew to Oslo", kind=Kind.EPISODE, event_time=T0)
        assert trip.valid_from == T0
        said = await client.add(ALICE, "Lives in Lyon", valid_from="2024-05-01")
        assert said.valid_from == T0 - timedelta(hours=12)
        stored = {e.id: e for e in await client.read(ALICE)}
        assert stored[fact.id].valid_from == fact.valid_from
        assert stored[trip.id].valid_from == T0
        assert stored[said.id].valid_from == said.valid_from

    async def test_valid_until_ends_the_memory_without_deleting_it(self, client: Client) -> None:
        lapsed = await client.add(ALICE, "Is in Tokyo", valid_from=T0, valid_until=T0 + 5 * DAY)
        ahead = await client.add(ALICE, "Is on leave", valid_until="2999-01-01")
        assert lapsed.valid_to == T0 + 5 * DAY and lapsed.superseded_by is None
        assert _texts(await client.read(ALICE)) == ["Is on leave"]
        assert _texts(await client.search(ALICE, "Tokyo")) == []
        assert _texts(await client.read(ALICE, as_of=T0 + DAY)) == ["Is in Tokyo"]
        assert _texts(await client.read(ALICE, as_of=T0 + 5 * DAY)) == []  # valid_to excluded
        past = SearchOptions(as_of=T0 + DAY)
        assert _texts(await client.search(ALICE, "Tokyo", past)) == ["Is in Tokyo"]
        got = await client.get(ALICE, lapsed.id)
        assert got is not None and got.valid_to == T0 + 5 * DAY
        assert (await client.get(ALICE, ahead.id)).valid_to == datetime(
            2999, 1, 2, tzinfo=timezone.utc
        )  # a bare date as the end: through that day
        assert await client.count(ALICE) == 2  # lapsed, not superseded: still counted

    async def test_a_re_add_sets_a_said_end_and_a_lapsed_one_gets_a_new_version(
        self, client: Client
    ) -> None:
        held = await client.add(ALICE, "Works from home")
        again = await client.add(ALICE, "works from home", valid_until="2999-01-01")
        assert again.id == held.id and again.valid_to is not None
        assert (await client.get(ALICE, held.id)).valid_to == again.valid_to
        lapsed = await client.add(ALICE, "Is in Tokyo", valid_from=T0, valid_until=T0 + DAY)
        back = await client.add(ALICE, "Is in Tokyo", topics=["travel"])
        assert back.id != lapsed.id and back.valid_to is None
        old = await client.get(ALICE, lapsed.id)
        assert old.superseded_by == back.id and old.valid_to == T0 + DAY
        assert back.valid_from >= old.valid_to
        assert "Is in Tokyo" in _texts(await client.read(ALICE))
        assert await client.count(ALICE) == 2
        ops = [h.operation for h in await client.history(ALICE, lapsed.id)]
        assert ops == [Operation.ADD, Operation.SUPERSEDE]

    async def test_supersede_closes_and_links_and_keeps_both(self, client: Client) -> None:
        old = await client.add(ALICE, GO, topics=["go"], valid_from=T0)
        new = await client.update(ALICE, old.id, GO_NEW, supersede=True, valid_from=T0 + 30 * DAY)
        assert new.id != old.id and new.text == GO_NEW and new.memory.topics == ["go"]
        assert new.valid_from == T0 + 30 * DAY and new.valid_to is None and not new.superseded
        closed = await client.get(ALICE, old.id)
        assert closed is not None and closed.text == GO and closed.superseded
        assert closed.superseded_by == new.id and closed.valid_to == new.valid_from
        assert _texts(await client.read(ALICE)) == [GO_NEW]
        assert _texts(await client.search(ALICE, "Production Go")) == [GO_NEW]
        every = await client.read(ALICE, include_superseded=True)
        assert sorted(_texts(every)) == [GO, GO_NEW]
        wide = SearchOptions(include_superseded=True)
        assert sorted(_texts(await client.search(ALICE, "Production Go", wide))) == [GO, GO_NEW]
        assert await client.count(ALICE) == 1 and await client.users() == [ALICE]
        old_history = await client.history(ALICE, old.id)
        assert [(h.operation, h.text_before, h.text_after) for h in old_history] == [
            (Operation.ADD, None, GO),
            (Operation.SUPERSEDE, GO, GO_NEW),
        ]
        assert [h.operation for h in await client.history(ALICE, new.id)] == [Operation.ADD]

    async def test_supersede_defaults_and_the_in_place_cases(self, client: Client) -> None:
        old = await client.add(ALICE, "Team size is 5", valid_from=T0)
        new = await client.update(ALICE, old.id, "Team size is 6", supersede=True)
        assert new.valid_from == new.created_at  # no start given: the write time
        assert (await client.get(ALICE, old.id)).valid_to == new.valid_from
        same = await client.update(
            ALICE, new.id, "team size is 6.", topics=["team"], supersede=True
        )
        assert same.id == new.id and same.memory.topics == ["team"]  # no content change
        plain = await client.update(ALICE, new.id, "Team size is 7")  # the default: in place
        assert plain.id == new.id and await client.count(ALICE) == 1
        early = await client.add(ALICE, "Office is in Rome", valid_from=T0)
        moved = await client.update(
            ALICE, early.id, "Office is in Milan", supersede=True, valid_from=T0 - DAY
        )
        assert (await client.get(ALICE, early.id)).valid_to == T0  # never before its start
        assert moved.valid_from == T0 - DAY
        until = await client.update(ALICE, moved.id, "Office is in Milan", valid_until="2999-01-01")
        assert until.id == moved.id and until.valid_to is not None

    async def test_as_of_picks_the_version_true_at_that_time(self, client: Client) -> None:
        v1, v2, v3 = await _chain(client, "Runs Go 1.21", "Runs Go 1.22", "Runs Go 1.23")
        assert await client.read(ALICE, as_of=T0 - DAY) == []  # before the first version
        assert _texts(await client.read(ALICE, as_of=T0)) == ["Runs Go 1.21"]
        assert _texts(await client.read(ALICE, as_of=T0 + 15 * DAY)) == ["Runs Go 1.22"]
        assert _texts(await client.read(ALICE, as_of="2024-05-21T12:00:00Z")) == ["Runs Go 1.23"]
        assert _texts(
            await client.read(ALICE, as_of=datetime(2999, 1, 1, tzinfo=timezone.utc))
        ) == ["Runs Go 1.23"]
        for when, text in ((T0 + DAY, "Runs Go 1.21"), (T0 + 11 * DAY, "Runs Go 1.22")):
            hits = await client.search(ALICE, "Runs Go", SearchOptions(as_of=when))
            assert _texts(hits) == [text]
        assert await client.search(ALICE, "Runs Go", SearchOptions(as_of=T0 - DAY)) == []
        assert len(await client.read(ALICE, include_superseded=True)) == 3
        assert {v.id for v in (v1, v2, v3)} == {
            e.id for e in await client.read(ALICE, None, include_superseded=True)
        }

    async def test_versions_lists_the_chain_from_any_id(self, client: Client) -> None:
        chain = await _chain(client, "Runs Go 1.21", "Runs Go 1.22", "Runs Go 1.23")
        ids = [e.id for e in chain]
        for entry in chain:
            listed = await client.versions(ALICE, entry.id)
            assert [e.id for e in listed] == ids
        listed = await client.versions(ALICE, ids[0])
        assert [e.superseded_by for e in listed] == [ids[1], ids[2], None]
        assert await client.versions(ALICE, "no-such-id") == []
        lone = await client.add(ALICE, "Keeps bees")
        assert [e.id for e in await client.versions(ALICE, lone.id)] == [lone.id]

    async def test_restore_version_reopens_it_and_closes_the_head(self, client: Client) -> None:
        old, new = await _chain(client, GO, GO_NEW)
        restored = await client.restore_version(ALICE, old.id)
        assert restored.id == old.id and restored.valid_to is None and not restored.superseded
        assert restored.valid_from == T0
        head = await client.get(ALICE, new.id)
        assert head.superseded_by == old.id and head.valid_to == head.valid_from
        assert _texts(await client.read(ALICE)) == [GO]
        assert _texts(await client.search(ALICE, "Production Go")) == [GO]
        assert [
            (h.operation, h.text_before, h.text_after) for h in await client.history(ALICE, new.id)
        ] == [
            (Operation.ADD, None, GO_NEW),
            (Operation.SUPERSEDE, GO_NEW, GO),
        ]
        assert [h.operation for h in await client.history(ALICE, old.id)][-1] is Operation.RESTORE
        again = await client.restore_version(ALICE, old.id)  # current: returned unchanged
        assert again.id == old.id and again.superseded_by is None
        assert await client.count(ALICE) == 1
        with pytest.raises(MemoryNotFoundError):
            await client.restore_version(ALICE, "no-such-id")
        await client.delete(ALICE, new.id)
        with pytest.raises(MemoryNotFoundError):
            await client.restore_version(ALICE, new.id)

    async def test_a_superseded_version_is_superseded_once(self, client: Client) -> None:
        old, new = await _chain(client, GO, GO_NEW)
        with pytest.raises(MemoryConflictError) as info:
            await client.update(ALICE, old.id, "Production runs Go 1.25", supersede=True)
        assert info.value.existing_id == new.id
        assert _texts(await client.read(ALICE)) == [GO_NEW]
        assert len(await client.read(ALICE, include_superseded=True)) == 2

    async def test_an_episode_is_never_superseded(self, client: Client) -> None:
        trip = await client.add(ALICE, "Flew to Oslo", kind="episode", event_time=T0)
        await refused(
            InvalidInputError,
            "supersede",
            client.update(ALICE, trip.id, "Flew to Bergen", supersede=True),
        )
        fact = await client.add(ALICE, "Likes Oslo")
        await refused(
            InvalidInputError,
            "supersede",
            client.update(ALICE, fact.id, "Went to Oslo", kind="episode", supersede=True),
        )
        assert sorted(_texts(await client.read(ALICE, include_superseded=True))) == [
            "Flew to Oslo",
            "Likes Oslo",
        ]

    async def test_old_content_said_again_after_a_supersede_is_a_new_current_row(
        self, client: Client
    ) -> None:
        old, new = await _chain(client, GO, GO_NEW)
        back = await client.add(ALICE, GO)
        assert back.id not in (old.id, new.id) and back.superseded_by is None
        assert sorted(_texts(await client.read(ALICE))) == [GO, GO_NEW]
        assert (await client.get(ALICE, old.id)).superseded_by == new.id
        with pytest.raises(MemoryConflictError) as info:  # two current rows, one content
            await client.restore_version(ALICE, old.id)
        assert info.value.existing_id == back.id
        assert (await client.add(ALICE, GO)).id == back.id  # the current row, not the old one
        await client.delete(ALICE, back.id)
        restored = await client.restore_version(ALICE, old.id)
        assert restored.superseded_by is None
        assert _texts(await client.read(ALICE)) == [GO]
        assert (await client.add(ALICE, GO)).id == old.id
        assert (await client.update(ALICE, old.id, GO_NEW, supersede=True)).id != new.id

    async def test_a_lapsed_version_renewed_can_be_restored(self, client: Client) -> None:
        lapsed = await client.add(ALICE, "Is in Tokyo", valid_from=T0, valid_until=T0 + DAY)
        renewed = await client.add(ALICE, "Is in Tokyo")
        restored = await client.restore_version(ALICE, lapsed.id)  # same content as the head
        assert restored.superseded_by is None
        assert (await client.get(ALICE, renewed.id)).superseded_by == lapsed.id
        assert [e.id for e in await client.read(ALICE)] == [lapsed.id]

    async def test_versions_and_as_of_are_per_user(self, client: Client) -> None:
        old, new = await _chain(client, GO, GO_NEW)
        await client.add(BOB, "Production runs Rust", valid_from=T0)
        assert await client.versions(BOB, old.id) == []
        with pytest.raises(MemoryNotFoundError):
            await client.restore_version(BOB, old.id)
        with pytest.raises(MemoryNotFoundError):
            await client.update(BOB, new.id, "hijacked", supersede=True)
        assert _texts(await client.read(BOB, as_of=T0 + DAY)) == ["Production runs Rust"]
        assert _texts(await client.read(BOB, include_superseded=True)) == ["Production runs Rust"]
        wide = SearchOptions(include_superseded=True)
        assert _texts(await client.search(BOB, "Production runs", wide)) == ["Production runs Rust"]
        assert (await client.get(ALICE, old.id)).superseded_by == new.id

    async def test_bad_validity_input_is_refused_naming_the_field(self, client: Client) -> None:
        entry = await client.add(ALICE, GO, valid_from=T0)
        naive = datetime(2024, 5, 1)
        for bad in ("not a date", naive, 42):
            await refused(InvalidTimeError, "as_of", client.read(ALICE, as_of=bad))
            await refused(InvalidTimeError, "valid_until", client.add(ALICE, "x", valid_until=bad))
            await refused(InvalidTimeError, "valid_from", client.add(ALICE, "x", valid_from=bad))
        await refused(
            InvalidTimeError, "valid_until", client.add(ALICE, "x", valid_from=T0, valid_until=T0)
        )
        await refused(InvalidTimeError, "valid_until", client.add(ALICE, "x", valid_until=T0))
        await refused(
            InvalidTimeError,
            "valid_until",
            client.update(ALICE, entry.id, GO, valid_until=T0 - DAY),
        )
        await refused(
            InvalidInputError,
            "include_superseded",
            client.read(ALICE, as_of=T0, include_superseded=True),
        )
        await refused(
            InvalidInputError, "include_superseded", client.read(ALICE, include_superseded="yes")
        )
        await refused(
            InvalidInputError, "supersede", client.update(ALICE, entry.id, GO_NEW, supersede="yes")
        )
        await refused(
            InvalidInputError, "valid_from", client.update(ALICE, entry.id, GO_NEW, valid_from=T0)
        )
        with pytest.raises(InvalidInputError) as info:
            SearchOptions(as_of=T0, include_superseded=True)
        assert info.value.field == "include_superseded"
        assert _texts(await client.read(ALICE, include_superseded=True)) == [GO]
        assert (await client.get(ALICE, entry.id)).valid_to is None

    async def test_export_and_restore_keep_the_chain(self, client: Client) -> None:
        chain = await _chain(client, "Runs Go 1.21", "Runs Go 1.22", "Runs Go 1.23")
        exported = await client.read(ALICE, include_superseded=True)
        for entry in exported:
            history = await client.history(ALICE, entry.id)
            await client.restore(BOB, Entry.model_validate_json(entry.model_dump_json()), history)
        for entry in exported:
            back = await client.get(BOB, entry.id)
            assert back is not None
            fields = ("valid_from", "valid_to", "superseded_by", "text")
            assert [getattr(back, f) for f in fields] == [getattr(entry, f) for f in fields]
        assert [e.id for e in await client.versions(BOB, chain[0].id)] == [e.id for e in chain]
        assert _texts(await client.read(BOB)) == ["Runs Go 1.23"]
        assert _texts(await client.read(BOB, as_of=T0 + 15 * DAY)) == ["Runs Go 1.22"]
        assert await client.count(BOB) == 1

    async def test_a_long_chain_never_crowds_out_the_current_version(self, client: Client) -> None:
        entry = await client.add(ALICE, "Production runs release 0", valid_from=T0)
        for n in range(1, 100):
            entry = await client.update(
                ALICE, entry.id, f"Production runs release {n}", supersede=True
            )
        one = SearchOptions(max_results=1)
        hits = await client.search(ALICE, "which release does production run", one)
        assert [e.id for e in hits] == [entry.id]
        assert _texts(await client.read(ALICE, 1)) == ["Production runs release 99"]
        assert await client.count(ALICE) == 1
        assert len(await client.versions(ALICE, entry.id)) == 100

    async def test_a_revived_memory_sheds_an_expiry_that_passed(self, client: Client) -> None:
        entry = await client.add(ALICE, "Likes green tea")
        assert await client.set_expiry(ALICE, entry.id, T0) is True
        assert await client.delete(ALICE, entry.id) is True
        back = await client.add(ALICE, "Likes green tea")
        assert back.id == entry.id and back.expires_at is None
        got = await client.get(ALICE, entry.id)
        assert got is not None and got.expires_at is None
        assert _texts(await client.read(ALICE)) == ["Likes green tea"]

    async def test_an_expiry_hides_a_memory_under_every_view(self, client: Client) -> None:
        old, new = await _chain(client, GO, GO_NEW)
        assert await client.set_expiry(ALICE, old.id, T0) is True
        assert await client.read(ALICE, as_of=T0 + DAY) == []
        assert _texts(await client.read(ALICE, include_superseded=True)) == [GO_NEW]
        assert await client.get(ALICE, old.id) is None
        assert [e.id for e in await client.versions(ALICE, new.id)] == [new.id]

    async def test_superseded_versions_take_capacity(
        self, make_service: Callable[[Limits], MemoryService]
    ) -> None:
        for mode in ("sync", "async"):
            service = make_service(Limits(capacity=2))
            client = Client(service, mode)
            try:
                first = await client.add(ALICE, "Runs Go 1.22")
                second = await client.update(ALICE, first.id, "Runs Go 1.23", supersede=True)
                with pytest.raises(CapacityExceededError):
                    await client.update(ALICE, second.id, "Runs Go 1.24", supersede=True)
                assert await client.count(ALICE) == 1
                assert _texts(await client.read(ALICE)) == ["Runs Go 1.23"]
                service.purge(ALICE)  # a durable store is the same for the next mode
            finally:
                service.close()

    async def test_a_deleted_version_comes_back_superseded(self, client: Client) -> None:
        lapsed = await client.add(ALICE, "Is in Tokyo", valid_from=T0, valid_until=T0 + DAY)
        renewed = await client.add(ALICE, "Is in Tokyo")  # same content, current
        assert await client.delete(ALICE, lapsed.id) is True
        assert await client.versions(ALICE, renewed.id) == [await client.get(ALICE, renewed.id)]
        back = await client.undelete(ALICE, lapsed.id)  # no clash: it is not current
        assert back.id == lapsed.id and back.superseded_by == renewed.id
        assert [e.id for e in await client.read(ALICE)] == [renewed.id]
        assert [e.id for e in await client.versions(ALICE, lapsed.id)] == [lapsed.id, renewed.id]

    async def test_an_imported_chain_with_one_content_stays_one_chain(self, client: Client) -> None:
        lapsed = await client.add(ALICE, "Is in Tokyo", valid_from=T0, valid_until=T0 + DAY)
        renewed = await client.add(ALICE, "Is in Tokyo")
        for entry in (await client.get(ALICE, renewed.id), await client.get(ALICE, lapsed.id)):
            await client.restore(BOB, entry, await client.history(ALICE, entry.id))
        assert (await client.add(BOB, "is in tokyo")).id == renewed.id  # found by content
        assert [e.id for e in await client.versions(BOB, lapsed.id)] == [lapsed.id, renewed.id]
        assert await client.count(BOB) == 1
        await client.restore_version(BOB, lapsed.id)  # the old version holds the content now
        assert (await client.add(BOB, "is in tokyo")).id == lapsed.id
        assert await client.count(BOB) == 1
