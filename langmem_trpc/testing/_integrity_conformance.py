"""Conformance for integrity under hostile or concurrent input (mixed into
`MemoryServiceConformance`, so every backend runs them, sync and async):
compare-and-set updates, injective per-user index keys, every valid text,
NUL and surrogates in ids, JSON metadata, unambiguous fingerprints and an
eviction order independent of the wall clock."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from .. import _time
from ..errors import InvalidMemoryError, InvalidUserKeyError
from ..service.protocol import MemoryService
from ..service.rules import Limits
from ..types import ExtractionCursor, SearchOptions, Source, UserKey
from ._kit import ALICE, T0, refused

if TYPE_CHECKING:
    from ._kit import Client


class IntegrityConformance:
    """Mixed into `MemoryServiceConformance`; see the module docstring."""

    async def test_concurrent_updates_of_different_fields_both_survive(
        self, client: Client
    ) -> None:
        """Updates are compare-and-set: one changing topics and one changing the
        location of the same memory at once both land, on every round."""
        service = client.service
        entry = await client.add(ALICE, "Shared memory")
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # switch threads often, so the two updates interleave
        try:
            for n in range(20):
                service.update(ALICE, entry.id, "Shared memory", topics=[], location="")
                barrier = threading.Barrier(2)
                errors: list[BaseException] = []

                def run(
                    change: dict[str, Any], barrier: threading.Barrier, errors: list[BaseException]
                ) -> None:
                    try:
                        barrier.wait()
                        service.update(ALICE, entry.id, "Shared memory", **change)
                    except BaseException as exc:  # pragma: no cover - reported below
                        errors.append(exc)

                changes: list[dict[str, Any]] = [{"topics": [f"t{n}"]}, {"location": f"city {n}"}]
                threads = [threading.Thread(target=run, args=(c, barrier, errors)) for c in changes]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                assert errors == []
                got = service.get(ALICE, entry.id)
                assert got is not None
                assert (got.memory.topics, got.memory.location) == ([f"t{n}"], f"city {n}"), n
        finally:
            sys.setswitchinterval(interval)
        assert len(await client.history(ALICE, entry.id)) == 1 + 3 * 20

    async def test_separator_bearing_ids_never_share_an_index(self, client: Client) -> None:
        """Pairs one separator apart, ("a\x1fb", "c") and ("a", "b\x1fc"), are two users
        everywhere: with the other's 40 memories next door, a user's results, scores,
        ranks and counts equal those of a control user who has no such neighbour."""
        pairs = [
            (UserKey("a\x1fb", "c"), UserKey("a", "b\x1fc")),
            (UserKey("a\x1e", "b"), UserKey("a", "\x1eb")),
            (UserKey("a:b", "c"), UserKey("a", "b:c")),
            (UserKey("a/b", "c"), UserKey("a", "b/c")),
            (UserKey("3\x1fa", "b"), UserKey("3", "a\x1fb")),
        ]

        async def view(user: UserKey) -> Any:
            hits = await client.search(user, "zebra office lions")
            return (
                [(e.id, e.text, e.score, e.rrf_score) for e in hits],
                sorted(e.text for e in await client.read(user)),
                await client.count(user),
            )

        for n, (mine, theirs) in enumerate(pairs):
            control = UserKey("control", f"user {n}")
            texts = [
                "zebra stripes are black and white",
                "the zebra crossing near the office",
                "lions sleep most of the day",
            ]
            for user in (mine, control):  # equal ids: equal tie-breaks
                for k, text in enumerate(texts):
                    await client.add(user, text, memory_id=f"m{k}")
            for i in range(40):
                await client.add(theirs, f"zebra zebra office number {i}")
            for user in (mine, control):  # a new state: its first search reads the index
                await client.add(user, "one more zebra note", memory_id="m3")
            assert await view(mine) == await view(control)
            hits = await client.search(theirs, "lions stripes zebra", SearchOptions(max_results=50))
            assert {e.text for e in hits} <= {f"zebra zebra office number {i}" for i in range(40)}
            assert await client.clear(theirs) == 40
            for user in (mine, control):
                await client.add(user, "zebra after the neighbour left", memory_id="m4")
            assert await view(mine) == await view(control)
        listed = await client.users()
        assert all(mine in listed and theirs not in listed for mine, theirs in pairs)

    async def test_every_valid_text_round_trips_and_is_found(self, client: Client) -> None:
        """Long tokens, NUL-free control characters and every Unicode line separator
        are stored exactly and found by their own text; a lone surrogate is refused."""
        blob = "".join(chr(ord("a") + (i * 7) % 26) + str(i % 10) for i in range(1_500))
        texts = [
            f"pasted key {blob} end",  # one 3,000-character token
            "x" * 8_000,  # the longest text validation accepts, one token
            "wide " + "ж" * 1_100 + " token",  # 2,200 UTF-8 bytes in one token
            "bell\x07 escape\x1b[31m red \x7f delete \x9b csi \x01 end",
            "lines a\nb\rc\x0bd\x0ce\x1cf\x1dg\x1eh\x1fi\x85j\u2028k\u2029l end",
        ]
        for text in texts:
            entry = await client.add(ALICE, text)
            got = await client.get(ALICE, entry.id)
            assert got is not None and got.text == text
            assert entry.id in [e.id for e in await client.search(ALICE, text)]
        refusals: list[tuple[str, dict[str, Any]]] = [
            ("text", {"text": "lone \ud800 surrogate"}),
            ("topics", {"text": "ok", "topics": ["\udfff"]}),
            ("participants", {"text": "ok", "participants": ["a\ud83d"]}),
            ("location", {"text": "ok", "location": "\ud800"}),
            ("memory_id", {"text": "ok", "memory_id": "k\ud800"}),
        ]
        for field, kwargs in refusals:
            await refused(
                InvalidMemoryError, field, client.add(ALICE, kwargs.pop("text"), **kwargs)
            )
        await refused(InvalidMemoryError, "query", client.search(ALICE, "query \ud800"))
        assert await client.count(ALICE) == len(texts)

    async def test_nul_and_surrogates_in_ids_are_field_errors(self, client: Client) -> None:
        entry = await client.add(ALICE, "Kept safe")
        bad_sources: list[tuple[dict[str, Any], str]] = [
            ({"thread_id": "t\x00"}, "source.thread_id"),
            ({"message_ids": ["m1", "m\x00"]}, "source.message_ids"),
            ({"actor": "\ud800"}, "source.actor"),
            ({"decision": "add\x00"}, "source.decision"),
        ]
        for fields, field in bad_sources:
            with pytest.raises(InvalidMemoryError) as info:
                Source(**fields)
            assert info.value.field == field
        sneaked = Source.model_construct(thread_id=None, message_ids=["m\x00"], actor=None)
        for call in [
            client.add(ALICE, "New text", source=sneaked),
            client.update(ALICE, entry.id, "Changed", source=sneaked),
            client.delete(ALICE, entry.id, source=sneaked),
            client.clear(ALICE, source=sneaked),
        ]:
            await refused(InvalidMemoryError, "source.message_ids", call)
        decided = Source.model_construct(message_ids=[], decision="add\ud800")
        await refused(
            InvalidMemoryError, "source.decision", client.add(ALICE, "New text", source=decided)
        )
        assert [e.text for e in await client.read(ALICE)] == ["Kept safe"]
        assert len(await client.history(ALICE, entry.id)) == 1
        for cursor, field in [
            (ExtractionCursor(thread_id="t\x00"), "thread_id"),
            (ExtractionCursor(thread_id="t", last_message_id="m\x00"), "cursor.last_message_id"),
            (
                ExtractionCursor(thread_id="t", last_message_digest="\ud800"),
                "cursor.last_message_digest",
            ),
        ]:
            await refused(InvalidMemoryError, field, client.set_cursor(ALICE, cursor))
        await refused(InvalidMemoryError, "thread_id", client.get_cursor(ALICE, "t\x00"))
        await refused(InvalidMemoryError, "memory_id", client.get(ALICE, "m\x00"))
        await refused(InvalidUserKeyError, "app_name", client.users("app\x00"))
        assert await client.get_cursor(ALICE, "t") is None

    async def test_metadata_is_json_the_same_on_every_backend(self, client: Client) -> None:
        json_alike = {"n": 1.5, "big": 2**70, "deep": {"ok": [True, None, "é", "\x07"]}}
        given = {"when": T0, "day": T0.date(), "pair": (1, 2), **json_alike}
        expected = {
            "when": "2024-05-01T12:00:00+00:00",
            "day": "2024-05-01",
            "pair": [1, 2],
            **json_alike,
        }
        entry = await client.add(ALICE, "Has metadata", metadata=given)
        assert entry.memory.metadata == expected
        got = await client.get(ALICE, entry.id)
        assert got is not None and got.memory.metadata == expected
        nested: dict[str, Any] = {}
        deepest = nested
        for _ in range(40):
            deepest["x"] = {}
            deepest = deepest["x"]
        bad: list[Any] = [
            {"x": float("nan")},
            {"x": [float("inf")]},
            {"x": "nul\x00"},
            {"nul\x00": 1},
            {"x": "\ud800"},
            {1: "int key"},
            {"x": {1, 2}},
            {"x": b"bytes"},
            nested,
            ["not", "a", "dict"],
        ]
        for metadata in bad:
            await refused(
                InvalidMemoryError, "metadata", client.add(ALICE, "Other text", metadata=metadata)
            )
            with pytest.raises(InvalidMemoryError):
                await client.update(ALICE, entry.id, "Has metadata", metadata=metadata)
        got = await client.get(ALICE, entry.id)
        assert got is not None and got.memory.metadata == expected
        assert await client.count(ALICE) == 1

    async def test_participants_and_separators_never_merge_memories(self, client: Client) -> None:
        """The content fingerprint is unambiguous: a participant holding a comma or
        U+001F is not a list of two, nor a location."""
        pairs: list[tuple[dict[str, Any], dict[str, Any]]] = [
            ({"participants": ["Smith, John"]}, {"participants": ["Smith", "John"]}),
            (
                {"participants": ["x\x1fat:paris"]},
                {"participants": ["x"], "location": "paris\x1fat:"},
            ),
        ]
        for first, second in pairs:
            await client.clear(ALICE)
            a = await client.add(ALICE, "Met for lunch", **first)
            b = await client.add(ALICE, "Met for lunch", **second)
            assert a.id != b.id
            assert await client.count(ALICE) == 2
        again = await client.add(
            ALICE, "met for lunch", participants=["x"], location="paris\x1fat:"
        )
        assert again.id == b.id  # the unambiguous form is still idempotent

    async def test_evict_policy_ignores_a_clock_stepping_backwards(
        self, make_service: Callable[[Limits], MemoryService], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """ "evict" takes the least recently written memory even when the wall clock
        steps back (NTP correction, another host): never the newest."""
        now = [T0 + timedelta(hours=1)]
        monkeypatch.setattr(_time, "wall_clock", lambda: now[0])
        svc = make_service(Limits(capacity=2, on_capacity="evict"))
        svc.add(ALICE, "written first")
        now[0] = T0  # the clock steps back an hour
        second = svc.add(ALICE, "written second")
        now[0] = T0 + timedelta(seconds=1)
        svc.add(ALICE, "written third")
        assert {e.text for e in svc.read(ALICE)} == {"written second", "written third"}
        now[0] = T0 - timedelta(hours=2)
        svc.update(ALICE, second.id, "written second, then updated")
        svc.add(ALICE, "written fourth")
        texts = {e.text for e in svc.read(ALICE)}
        assert texts == {"written second, then updated", "written fourth"}
        svc.close()
