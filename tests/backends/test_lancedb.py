"""The LanceDB backend: the whole conformance suite, sync and async, plus what is
its own (durability across instances, rankings equal to the reference, the entry
point, one table version per write)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

pytest.importorskip("lancedb", reason="the [lancedb] extra (lancedb) is not installed")

import langmem_trpc
from langmem_trpc import (
    CapacityExceededError,
    ExtractionCursor,
    InMemoryMemoryService,
    Kind,
    Limits,
    SearchOptions,
    UserKey,
)
from langmem_trpc.backends.lancedb import LanceDBMemoryService
from langmem_trpc.errors import ConfigurationError
from langmem_trpc.service.capabilities import Capability
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.testing.conformance import MemoryServiceConformance
from tests.backends.test_keyword_ranking import _check

ALICE = UserKey("app", "alice")


class TestLanceDBWithEmbeddings(MemoryServiceConformance):
    @pytest.fixture
    def service(self, tmp_path):
        return LanceDBMemoryService(tmp_path / "m", HashingEmbeddings())

    @pytest.fixture
    def service_url(self, tmp_path):
        return f"lancedb://{tmp_path / 'm'}"

    @pytest.fixture
    def make_service(self, tmp_path):
        return lambda limits: LanceDBMemoryService(
            tmp_path / "limited", HashingEmbeddings(), limits=limits
        )


class TestLanceDBKeywordOnly(MemoryServiceConformance):
    @pytest.fixture
    def service(self, tmp_path):
        return LanceDBMemoryService(tmp_path / "m")

    @pytest.fixture
    def service_url(self, tmp_path):
        return f"lancedb://{tmp_path / 'm'}"

    @pytest.fixture
    def make_service(self, tmp_path):
        return lambda limits: LanceDBMemoryService(tmp_path / "limited", limits=limits)


# -- LanceDB-specific behaviour ----------------------------------------------------


def test_keyword_rankings_equal_the_reference(tmp_path):
    dirs = iter(range(100))
    _check(lambda: LanceDBMemoryService(tmp_path / str(next(dirs)), limits=Limits(capacity=None)))


def test_hybrid_rankings_equal_the_reference(tmp_path):
    reference = InMemoryMemoryService(HashingEmbeddings(), limits=Limits(capacity=None))
    lance = LanceDBMemoryService(tmp_path / "h", HashingEmbeddings(), limits=Limits(capacity=None))
    texts = [
        ("went hiking on the ridge trail", Kind.EPISODE, "2024-05-01T10:00:00Z"),
        ("hiked the coastal trail with Mel", Kind.EPISODE, "2024-06-02T10:00:00Z"),
        ("likes hiking and painting", Kind.FACT, None),
        ("adopted two dogs from the shelter", Kind.EPISODE, "2024-07-03T10:00:00Z"),
        ("paints watercolour landscapes", Kind.FACT, None),
    ]
    for svc in (reference, lance):
        for text, kind, at in texts:
            svc.add(ALICE, text, kind=kind, event_time=at)
    after = datetime(2024, 5, 15, tzinfo=timezone.utc)
    for options in (
        SearchOptions(max_results=10),
        SearchOptions(max_results=10, kind=Kind.EPISODE, kind_fallback=False),
        SearchOptions(max_results=10, time_after=after),
        SearchOptions(max_results=10, hybrid=False, similarity_threshold=0.0),
    ):
        for query in ("hiking trail", "dogs", "painting"):
            want = [
                (e.text, round(e.score or 0, 5)) for e in reference.search(ALICE, query, options)
            ]
            got = [(e.text, round(e.score or 0, 5)) for e in lance.search(ALICE, query, options)]
            assert got == want, (query, options)
    lance.close()


def test_a_new_service_on_the_directory_sees_everything(tmp_path):
    first = LanceDBMemoryService(tmp_path / "d", HashingEmbeddings())
    entry = first.add(ALICE, "Prefers dark mode", topics=["ui"])
    first.update(ALICE, entry.id, "Prefers light mode")
    first.set_cursor(
        ALICE, ExtractionCursor(thread_id="t", message_count=3, message_keys=b"\xff" * 8)
    )
    first.close()
    second = LanceDBMemoryService(tmp_path / "d", HashingEmbeddings())
    assert second.get(ALICE, entry.id).text == "Prefers light mode"
    assert [h.operation.value for h in second.history(ALICE, entry.id)] == ["add", "update"]
    assert second.get_cursor(ALICE, "t").message_keys == b"\xff" * 8
    assert [e.id for e in second.search(ALICE, "light mode")] == [entry.id]
    newer = second.add(ALICE, "Uses a standing desk")  # the write order continues
    second.update(ALICE, newer.id, "Uses a treadmill desk")
    assert [h.operation.value for h in second.history(ALICE, newer.id)] == ["add", "update"]
    assert second.capabilities == {Capability.VECTORS, Capability.DURABLE}
    second.close()
    keyword_only = LanceDBMemoryService(tmp_path / "d")  # a store with vectors, no embedder
    assert [e.id for e in keyword_only.search(ALICE, "light mode")] == [entry.id]
    keyword_only.add(ALICE, "Drinks oolong tea")  # stored without a vector
    assert keyword_only.count(ALICE) == 3
    with pytest.raises(ConfigurationError, match="embeddings"):
        LanceDBMemoryService(tmp_path / "d", HashingEmbeddings(), dims=3)


def test_a_write_is_one_table_version(tmp_path):
    svc = LanceDBMemoryService(tmp_path / "v", limits=Limits(capacity=2, on_capacity="evict"))
    svc.add(ALICE, "one")
    svc.add(ALICE, "two")
    before = svc._table.version
    svc.add(ALICE, "three")  # evicts "one": eviction, insert and two history events
    assert svc._table.version == before + 1
    assert [e.text for e in svc.read(ALICE)] == ["three", "two"]


def test_a_refused_write_commits_nothing(tmp_path):
    svc = LanceDBMemoryService(tmp_path / "r", limits=Limits(capacity=1))
    svc.add(ALICE, "one")
    before = svc._table.version
    with pytest.raises(CapacityExceededError):
        svc.add(ALICE, "two")
    assert svc._table.version == before
    assert svc.count(ALICE) == 1
    assert [e.text for e in svc.search(ALICE, "one two")] == ["one"]  # the state is untouched


def test_open_by_url(tmp_path):
    with langmem_trpc.open(f"lancedb://{tmp_path}/u", embeddings=HashingEmbeddings()) as svc:
        assert isinstance(svc, LanceDBMemoryService)
        svc.add(ALICE, "Likes green tea")
    with pytest.raises(ConfigurationError, match="no LanceDB memory store"):
        langmem_trpc.open(f"lancedb://{tmp_path}/missing", create=False)


def test_search_hides_a_memory_expired_after_the_snapshot_was_cached(tmp_path):
    svc = LanceDBMemoryService(tmp_path / "x")
    entry = svc.add(ALICE, "Likes green tea")
    assert [e.id for e in svc.search(ALICE, "green tea")] == [entry.id]  # cached
    assert svc.set_expiry(ALICE, entry.id, datetime.now(timezone.utc) - timedelta(seconds=1))
    assert svc.search(ALICE, "green tea") == []


def test_users_past_state_rows_are_dropped_and_reloaded_from_the_table(tmp_path):
    svc = LanceDBMemoryService(tmp_path / "s", state_rows=3)
    bob, carol = UserKey("app", "bob"), UserKey("app", "carol")
    tea = [svc.add(ALICE, text) for text in ("Likes green tea", "Likes black coffee")]
    svc.add(bob, "Plays chess")
    svc.add(bob, "Plays go")
    assert svc.count(carol) == 0  # loading carol drops alice (least recently used)
    assert ALICE not in svc._users
    assert [e.id for e in svc.search(ALICE, "green tea")] == [tea[0].id]  # reloaded
    assert list(svc._users) == [carol, ALICE]  # bob dropped
    svc.delete(ALICE, tea[0].id)
    assert svc.search(ALICE, "green tea") == []
    assert svc.count(bob) == 2
    svc.close()
    assert not svc._users
