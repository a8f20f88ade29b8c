"""The LanceDB backend: the whole conformance suite, sync and async, plus what is
its own (durability across instances, rankings equal to the reference, the entry
point, one table version per write)."""

from __future__ import annotations

import itertools
import time
import typing
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
    MemoryNotFoundError,
    SearchOptions,
    UserKey,
)
from langmem_trpc.backends.lancedb import LanceDBMemoryService
from langmem_trpc.backends.lancedb._read import ReadRun
from langmem_trpc.backends.lancedb._records import digest
from langmem_trpc.backends.lancedb._threads import Threads
from langmem_trpc.backends.lancedb._write import WriteRun
from langmem_trpc.backends.lancedb.service import COMPACT_EVERY
from langmem_trpc.errors import ConfigurationError
from langmem_trpc.service.capabilities import Capability
from langmem_trpc.service.claim_steps import ClaimExecutor
from langmem_trpc.service.reads import ReadExecutor
from langmem_trpc.service.steps import StepExecutor
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.testing.conformance import MemoryServiceConformance
from tests.backends.test_keyword_ranking import _check

ALICE = UserKey("app", "alice")


class _OneServicePerDirectory:
    """LanceDB holds its directory until `close()`: the conformance suite's "a new
    service sees the store" runs after the first one closed (a second one while it is
    open is refused: `test_a_second_service_on_the_directory_is_refused`)."""

    async def test_durable_store_is_seen_by_a_new_service(self, client, service_url):
        written = await client.add(ALICE, "Survives a new service", topics=["durable"])
        with pytest.raises(ConfigurationError, match="in use by another LanceDBMemoryService"):
            langmem_trpc.open(service_url)
        await client.service.aclose()
        async with await langmem_trpc.aopen(service_url) as again:
            assert (await again.aget(ALICE, written.id)) == written


class TestLanceDBWithEmbeddings(_OneServicePerDirectory, MemoryServiceConformance):
    @pytest.fixture
    def service(self, tmp_path):
        return LanceDBMemoryService(tmp_path / "m", HashingEmbeddings())

    @pytest.fixture
    def service_url(self, tmp_path):
        return f"lancedb://{tmp_path / 'm'}"

    @pytest.fixture
    def make_service(self, tmp_path):
        made = itertools.count()  # a fresh directory per call: each is a new store
        return lambda limits: LanceDBMemoryService(
            tmp_path / f"limited{next(made)}", HashingEmbeddings(), limits=limits
        )


class TestLanceDBKeywordOnly(_OneServicePerDirectory, MemoryServiceConformance):
    @pytest.fixture
    def service(self, tmp_path):
        return LanceDBMemoryService(tmp_path / "m")

    @pytest.fixture
    def service_url(self, tmp_path):
        return f"lancedb://{tmp_path / 'm'}"

    @pytest.fixture
    def make_service(self, tmp_path):
        made = itertools.count()
        return lambda limits: LanceDBMemoryService(tmp_path / f"limited{next(made)}", limits=limits)


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
    keyword_only.close()
    with pytest.raises(ConfigurationError, match="embeddings"):
        LanceDBMemoryService(tmp_path / "d", HashingEmbeddings(), dims=3)
    LanceDBMemoryService(tmp_path / "d").close()  # the refused one released the directory


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


# -- validity (issue 26) -----------------------------------------------------------


def _previous_format_store(path):
    """A directory as the code before validity wrote it: no validity columns, memory
    bodies without `valid_from` / `valid_to` / `superseded_by`."""
    import lancedb
    import pyarrow as pa

    from langmem_trpc.backends.lancedb._records import HISTORY, MEMORY, record
    from langmem_trpc.types import Entry, Memory

    names = ["key", "rec", "scope", "app", "user", "refh", "body", "fp"]
    types = {"seq": pa.int64(), "deleted": pa.timestamp("us", "UTC"), "keyed": pa.bool_()}
    schema = pa.schema([pa.field(n, pa.string()) for n in names]
                       + [pa.field(n, t) for n, t in types.items()])  # fmt: skip
    created = datetime(2025, 1, 2, tzinfo=timezone.utc)
    said = Memory(text="Went to Lisbon", kind=Kind.EPISODE, event_time="2024-03-01T10:00:00Z")
    rows = []
    for seq, (memory, deleted) in enumerate(
        [(said, None), (Memory(text="Likes green tea"), None), (Memory(text="Old"), created)], 1
    ):
        entry = Entry(id=f"m{seq}", app_name="app", user_id="alice", memory=memory,
                      created_at=created, updated_at=created)  # fmt: skip
        body = entry.model_dump_json(exclude={"valid_from", "valid_to", "superseded_by"})
        more = {"fp": f"fp{seq}", "deleted": deleted, "keyed": False}
        rows.append(record(MEMORY, ALICE, entry.id, body, seq=seq, **more))
    rows.append(record(HISTORY, ALICE, "m1", "{}", seq=4, fp=None, deleted=None, keyed=None))
    lancedb.connect(str(path)).create_table("records", pa.Table.from_pylist(rows, schema))


def test_a_table_from_before_validity_opens_with_valid_from_filled(tmp_path):
    import lancedb

    _previous_format_store(tmp_path / "old")
    for _ in range(2):  # the second open finds nothing left to fill
        with LanceDBMemoryService(tmp_path / "old") as svc:
            lisbon, tea = svc.get(ALICE, "m1"), svc.get(ALICE, "m2")
            assert lisbon.valid_from == datetime(2024, 3, 1, 10, tzinfo=timezone.utc)
            assert tea.valid_from == tea.created_at and tea.valid_to is None
            assert not tea.superseded and svc.count(ALICE) == 2
            assert [e.id for e in svc.search(ALICE, "green tea")] == ["m2"]
            assert svc.users() == [ALICE]
    table = lancedb.connect(str(tmp_path / "old")).open_table("records")
    found = table.search().where("rec = 'm'").limit(None).to_arrow().sort_by("seq")
    assert found.column("valid_from").null_count == 0
    assert found.column("valid_from")[0].as_py() == lisbon.valid_from
    assert found.column("superseded").null_count == 3
    with LanceDBMemoryService(tmp_path / "old") as svc:
        newer = svc.update(ALICE, "m2", "Likes black tea", supersede=True)
        assert svc.get(ALICE, "m2").superseded_by == newer.id
        assert [e.id for e in svc.versions(ALICE, newer.id)] == ["m2", newer.id]


def test_users_and_count_skip_a_user_left_with_superseded_versions_only(tmp_path):
    bob = UserKey("app", "bob")
    with LanceDBMemoryService(tmp_path / "v") as svc:
        first = svc.add(bob, "Runs Go 1.23 in production")
        newer = svc.update(bob, first.id, "Runs Go 1.24 in production", supersede=True)
        svc.add(ALICE, "Likes green tea")
        assert svc.users() == [ALICE, bob] and svc.count(bob) == 1
        svc.delete(bob, newer.id)
    with LanceDBMemoryService(tmp_path / "v") as svc:  # from the table's columns
        assert svc.users() == [ALICE] and svc.count(bob) == 0
        assert svc.get(bob, first.id).superseded_by == newer.id


def test_a_long_chain_of_versions_stays_out_of_the_default_index(tmp_path):
    with LanceDBMemoryService(tmp_path / "c", HashingEmbeddings()) as svc:
        head = svc.add(ALICE, "Production runs Go 1.0", valid_from="2020-01-01")
        for minor in range(1, 101):
            at = datetime(2020, 1, 1, tzinfo=timezone.utc) + timedelta(days=minor)
            head = svc.update(ALICE, head.id, f"Production runs Go 1.{minor}",
                              supersede=True, valid_from=at)  # fmt: skip
        other = svc.add(ALICE, "Production database is PostgreSQL 16")
        hits = svc.search(ALICE, "production runs Go", SearchOptions(max_results=3))
        assert [e.id for e in hits][:1] == [head.id] and len(hits) == 2
        assert {e.id for e in hits} == {head.id, other.id}
        assert len(svc._users[ALICE].index.docs) == 2  # 100 superseded rows: not indexed
        past = SearchOptions(as_of=datetime(2020, 1, 11, 12, tzinfo=timezone.utc))
        assert [e.text for e in svc.search(ALICE, "production runs Go", past)][:1] == [
            "Production runs Go 1.10"
        ]
        every = SearchOptions(include_superseded=True, max_results=200)
        assert len(svc.search(ALICE, "production runs Go", every)) == 102


def test_a_memory_leaves_the_cached_index_when_its_validity_lapses(tmp_path):
    svc = LanceDBMemoryService(tmp_path / "l")
    soon = datetime.now(timezone.utc) + timedelta(seconds=1)
    entry = svc.add(ALICE, "In Tokyo until tomorrow", valid_from="2020-01-01", valid_until=soon)
    assert [e.id for e in svc.search(ALICE, "Tokyo")] == [entry.id]  # indexed, cached
    while datetime.now(timezone.utc) <= soon:
        time.sleep(0.05)
    assert svc.search(ALICE, "Tokyo") == [] and svc.read(ALICE) == []
    assert [e.id for e in svc.search(ALICE, "Tokyo", SearchOptions(as_of="2021-01-01"))] == [
        entry.id
    ]
    svc.close()


# -- one service per directory (issue 31, item 5) ------------------------------------------

_HOLD = """
import sys
from langmem_trpc import UserKey
from langmem_trpc.backends.lancedb import LanceDBMemoryService
service = LanceDBMemoryService(sys.argv[1])
service.add(UserKey("app", "alice"), "Written by the other process")
print("ready", flush=True)
sys.stdin.readline()
service.close()
print("closed", flush=True)
sys.stdin.readline()
"""


def test_a_second_service_on_the_directory_is_refused(tmp_path):
    """A purge through a second service was undone by the first one's stale cache."""
    first = LanceDBMemoryService(tmp_path / "d")
    entry = first.add(ALICE, "Prefers dark mode")
    for _ in range(2):  # refused, and the refusal leaves the first one's lock in place
        with pytest.raises(ConfigurationError) as info:
            LanceDBMemoryService(tmp_path / "d")
        assert str(tmp_path / "d") in str(info.value)
        assert "in use by another LanceDBMemoryService" in str(info.value)
    with pytest.raises(ConfigurationError):
        langmem_trpc.open(f"lancedb://{tmp_path / 'd'}")
    assert first.get(ALICE, entry.id) is not None
    first.close()
    first.close()  # idempotent
    with LanceDBMemoryService(tmp_path / "d") as second:
        assert second.get(ALICE, entry.id).text == "Prefers dark mode"
    other = LanceDBMemoryService(tmp_path / "other")  # another directory is another lock
    other.close()


def test_a_service_in_another_process_holds_the_directory_until_it_closes(tmp_path):
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path / "d")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        with pytest.raises(ConfigurationError, match="in use by another LanceDBMemoryService"):
            LanceDBMemoryService(tmp_path / "d")
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "closed"
        with LanceDBMemoryService(tmp_path / "d") as mine:  # the child still runs
            assert [e.text for e in mine.read(ALICE)] == ["Written by the other process"]
    finally:
        child.kill()
        child.wait(timeout=30)


def test_a_killed_process_leaves_no_stale_lock(tmp_path):
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path / "d")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
    finally:
        child.kill()  # SIGKILL: no close()
        child.wait(timeout=30)
    with LanceDBMemoryService(tmp_path / "d") as service:
        assert service.count(ALICE) == 1


@pytest.mark.parametrize(
    "backend", ["lancedb", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_second_service_never_undoes_a_purge_or_passes_capacity(backend, tmp_path, request):
    """The issue's scenario (a CLI purge next to a running app, both at capacity 3) on
    every durable backend: LanceDB refuses the second service; SQLite and PostgreSQL
    share the store, so the purge holds and the capacity is the store's."""
    if backend == "postgres":
        url = request.getfixturevalue("pg_url")
    else:
        url = f"{backend}://{tmp_path / 'store'}"
    limits = Limits(capacity=3)
    app = langmem_trpc.open(url, limits=limits)
    try:
        kept = app.add(ALICE, "Lives in Lisbon")
        if backend == "lancedb":
            with pytest.raises(ConfigurationError, match="in use by another"):
                langmem_trpc.open(url, limits=limits)
            return
        with langmem_trpc.open(url, limits=limits) as cli:
            cli.purge(ALICE)
            assert app.get(ALICE, kept.id) is None
            with pytest.raises(MemoryNotFoundError):
                app.update(ALICE, kept.id, "Lives in Porto")  # not written back
            for i in range(3):
                cli.add(ALICE, f"fact {i} from the cli")
            with pytest.raises(CapacityExceededError):
                app.add(ALICE, "one more from the app")
            assert app.count(ALICE) == cli.count(ALICE) == 3
    finally:
        app.close()


# -- LanceDB's own executors (issue 25) ------------------------------------------------


def _step_types(protocol: type) -> dict[str, object]:
    """Each method of an executor protocol, by name, and the step type it takes."""
    return {
        name: typing.get_type_hints(method)["step"]
        for name, method in vars(protocol).items()
        if callable(method) and not name.startswith("_")
    }


@pytest.mark.parametrize(
    ("executor", "protocol"),
    [(WriteRun, StepExecutor), (ReadRun, ReadExecutor), (Threads, ClaimExecutor)],
)
def test_the_executors_implement_every_step_of_the_kit(executor, protocol):
    """The write, read and claim plans run on LanceDB's own executors, one method per
    step type of the public kit (the old service replayed another backend's run)."""
    wanted = _step_types(protocol)
    assert wanted  # the protocol's methods were found
    for name, step in wanted.items():
        method = getattr(executor, name, None)
        assert callable(method), f"{executor.__name__} lacks {name}"
        assert typing.get_type_hints(method)["step"] is step, name
    assert not issubclass(LanceDBMemoryService, InMemoryMemoryService)


def test_a_plan_reads_its_own_pending_writes_and_a_raise_keeps_nothing(tmp_path):
    svc = LanceDBMemoryService(tmp_path / "p", limits=Limits(capacity=2, on_capacity="error"))
    before = svc._table.version
    with pytest.raises(CapacityExceededError):  # the third item's CountLive sees the pending two
        svc.add_many(ALICE, ["Reads sci-fi", "Likes jazz", "Owns a cat"])
    assert svc._table.version == before
    assert svc.count(ALICE) == 0 and svc.read(ALICE) == [] and svc.search(ALICE, "jazz") == []
    twice = svc.add_many(ALICE, ["Plays chess", "Plays chess"])  # the second finds the first
    assert twice[0].id == twice[1].id and svc._table.version == before + 1
    assert svc.count(ALICE) == 1
    svc.close()


def test_the_cache_is_dropped_when_the_table_moved_without_the_service(tmp_path):
    svc = LanceDBMemoryService(tmp_path / "c")
    kept, gone = svc.add(ALICE, "Likes green tea"), svc.add(ALICE, "Plays chess")
    svc._table.delete(f"rec = 'm' AND refh = '{digest(gone.id)}'")  # behind its back
    svc.add(ALICE, "Owns a cat")  # its commit finds the version moved: the cache reloads
    assert {e.id for e in svc.read(ALICE)} == {kept.id, svc.search(ALICE, "cat")[0].id}
    assert svc.get(ALICE, gone.id) is None
    svc.close()


def test_a_commit_that_raises_after_its_table_version_leaves_the_cache_true(tmp_path, monkeypatch):
    """A compaction failing after the plan's version was written: the caller sees the
    error, and the service serves what the table holds (not a cache without the row)."""
    svc = LanceDBMemoryService(tmp_path / "f")
    svc.add(ALICE, "Likes green tea")

    def refuse() -> None:
        raise OSError("disk full while compacting")

    monkeypatch.setattr(svc._table, "optimize", refuse)
    svc._commits = COMPACT_EVERY - 1  # this commit compacts
    with pytest.raises(OSError, match="compacting"):
        svc.add(ALICE, "Plays chess")
    assert sorted(e.text for e in svc.read(ALICE)) == ["Likes green tea", "Plays chess"]
    assert [e.text for e in svc.search(ALICE, "chess")] == ["Plays chess"]
    svc.close()
