"""Adversarial checks of issue #26 (validity, safe supersede, as-of reads) on every backend.

Each test states one rule of the issue; a known defect is `xfail(strict=True)` with why.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from langmem_trpc import InMemoryMemoryService, Operation, UserKey
from langmem_trpc.errors import InvalidInputError, LangmemTrpcError, MemoryConflictError
from langmem_trpc.service.plans import update as update_plan
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.service.rules import MemoryPatch
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.transfer import checked_records, export_lines, import_record
from langmem_trpc.types import SearchOptions

ALICE = UserKey("app", "alice")
BOB = UserKey("app", "bob")
BACKENDS = ["memory", "sqlite", "lancedb", pytest.param("postgres", marks=pytest.mark.postgres)]


def _day(day: int) -> datetime:
    return datetime(2026, 7, day, tzinfo=timezone.utc)


def _build(kind: str, path: Path, request: pytest.FixtureRequest) -> MemoryService:
    if kind == "memory":
        return InMemoryMemoryService(embeddings=HashingEmbeddings())
    if kind == "sqlite":
        from langmem_trpc.backends.sqlite import SQLiteMemoryService

        return SQLiteMemoryService(str(path / "m.db"), embeddings=HashingEmbeddings())
    if kind == "lancedb":
        from langmem_trpc.backends.lancedb import LanceDBMemoryService

        return LanceDBMemoryService(path / "lance", HashingEmbeddings())
    from langmem_trpc.backends.postgres import PostgresMemoryService

    svc = PostgresMemoryService(request.getfixturevalue("pg_url"), HashingEmbeddings())
    svc.setup()
    return svc


@pytest.fixture(params=BACKENDS)
def svc(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryService]:
    service = _build(request.param, tmp_path, request)
    yield service
    service.close()


def _chain(svc: MemoryService) -> list[str]:
    """Go 1.23 (from day 1) -> 1.24 (day 10) -> 1.25 (day 20); the ids, oldest first."""
    a = svc.add(ALICE, "Production runs Go 1.23", valid_from=_day(1))
    b = svc.update(ALICE, a.id, "Production runs Go 1.24", supersede=True, valid_from=_day(10))
    c = svc.update(ALICE, b.id, "Production runs Go 1.25", supersede=True, valid_from=_day(20))
    return [a.id, b.id, c.id]


def test_as_of_boundaries_on_read_and_search(svc: MemoryService) -> None:
    """valid_from inclusive, valid_to exclusive, the same for read() and search()."""
    _chain(svc)
    expected = {1: "1.23", 9: "1.23", 10: "1.24", 19: "1.24", 20: "1.25"}
    for day, version in expected.items():
        read = [e.text for e in svc.read(ALICE, as_of=_day(day))]
        options = SearchOptions(as_of=_day(day), similarity_threshold=0.0)
        found = [e.text for e in svc.search(ALICE, "Production Go", options)]
        assert read == found == [f"Production runs Go {version}"], day


@pytest.mark.parametrize("bad", ["garbage", datetime(2026, 1, 1), True, "10000-01-01", 5])
def test_bad_as_of_is_the_same_error_everywhere(svc: MemoryService, bad: object) -> None:
    _chain(svc)
    before = svc.read(ALICE, include_superseded=True)
    with pytest.raises(LangmemTrpcError) as read_error:
        svc.read(ALICE, as_of=bad)  # type: ignore[arg-type]
    with pytest.raises(LangmemTrpcError) as search_error:
        svc.search(ALICE, "Go", SearchOptions(as_of=bad))  # type: ignore[arg-type]
    assert type(read_error.value) is type(search_error.value)
    assert read_error.value.field == search_error.value.field == "as_of"  # type: ignore[attr-defined]
    assert svc.read(ALICE, include_superseded=True) == before


def test_include_superseded_rejects_a_non_bool_in_search_options_too() -> None:
    """read(include_superseded="yes") is an InvalidInputError; SearchOptions must agree
    (pydantic's lax bool read "yes" as True)."""
    for bad in ("yes", "no", 1, "false"):
        with pytest.raises(InvalidInputError) as error:
            SearchOptions(include_superseded=bad)  # type: ignore[arg-type]
        assert error.value.field == "include_superseded"


def test_restore_version_of_another_user_is_not_found(svc: MemoryService) -> None:
    ids = _chain(svc)
    with pytest.raises(LangmemTrpcError):
        svc.restore_version(BOB, ids[0])
    assert svc.versions(BOB, ids[0]) == []
    assert [e.text for e in svc.read(ALICE)] == ["Production runs Go 1.25"]


def test_versions_keeps_every_version_after_two_restores(svc: MemoryService) -> None:
    """Restore the oldest, then the newest again: the chain still lists all three
    versions, from any id, and exactly one is current."""
    a, b, c = _chain(svc)
    svc.restore_version(ALICE, a)
    svc.restore_version(ALICE, c)
    assert [e.text for e in svc.read(ALICE)] == ["Production runs Go 1.25"]
    for start in (a, b, c):
        assert {e.id for e in svc.versions(ALICE, start)} == {a, b, c}, start


def test_export_import_round_trip_keeps_a_restored_chain(
    svc: MemoryService, tmp_path: Path
) -> None:
    a, _b, _c = _chain(svc)
    svc.restore_version(ALICE, a)
    lines = [line.encode() for line in export_lines(svc, [ALICE])]
    target = InMemoryMemoryService(embeddings=HashingEmbeddings())
    for record in checked_records(lines, target, target.limits):
        import_record(target, record)

    def shape(s: MemoryService) -> list[tuple[str, object, object, object]]:
        rows = s.read(ALICE, include_superseded=True)
        return sorted((e.id, e.valid_from, e.valid_to, e.superseded_by) for e in rows)

    assert shape(target) == shape(svc)
    assert [e.text for e in target.read(ALICE)] == ["Production runs Go 1.23"]
    assert [e.id for e in target.versions(ALICE, a)] == [e.id for e in svc.versions(ALICE, a)]


def test_two_threads_superseding_one_fact_one_wins(svc: MemoryService) -> None:
    """Two concurrent supersedes of the same current fact: exactly one succeeds, the
    other is a MemoryConflictError, and one row is current afterwards."""
    old = svc.add(ALICE, "Production runs Go 1.23", valid_from=_day(1))
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def write(text: str) -> None:
        barrier.wait()
        try:
            outcomes.append(svc.update(ALICE, old.id, text, supersede=True))
        except MemoryConflictError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=write, args=(f"Production runs Go 1.2{n}",)) for n in (4, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(type(o).__name__ for o in outcomes) == ["Entry", "MemoryConflictError"]
    assert len(svc.read(ALICE)) == 1
    assert len(svc.versions(ALICE, old.id)) == 2


def test_async_supersede_and_versions_agree_with_sync(svc: MemoryService) -> None:
    async def run() -> list[str]:
        a = await svc.aadd(ALICE, "Lives in Paris", valid_from=_day(1))
        b = await svc.aupdate(ALICE, a.id, "Moved to Berlin", supersede=True, valid_from=_day(5))
        current = await svc.aread(ALICE)
        past = await svc.aread(ALICE, as_of=_day(4))
        chain = await svc.aversions(ALICE, b.id)
        assert [e.text for e in current] == ["Moved to Berlin"]
        assert [e.text for e in past] == ["Lives in Paris"]
        return [e.id for e in chain]

    assert asyncio.run(run()) == [e.id for e in svc.versions(ALICE, svc.read(ALICE)[0].id)]


def test_keyed_memory_supersede_keeps_its_key_current(svc: MemoryService) -> None:
    """A keyed memory (memory_id given by the caller): the key is the caller's handle,
    so a supersede (which would leave the key on the closed version) is refused before
    any write, and `get(key)` returns the current value after an in-place update."""
    svc.add(ALICE, "Theme: dark", memory_id="pref-theme")
    with pytest.raises(InvalidInputError) as refused:
        svc.update(ALICE, "pref-theme", "Theme: light", supersede=True)
    assert refused.value.field == "supersede"  # type: ignore[attr-defined]
    assert [e.text for e in svc.versions(ALICE, "pref-theme")] == ["Theme: dark"]
    assert len(svc.read(ALICE, include_superseded=True)) == 1  # nothing written
    svc.update(ALICE, "pref-theme", "Theme: light")
    got = svc.get(ALICE, "pref-theme")
    assert got is not None and got.text == "Theme: light"


def test_capacity_eviction_does_not_break_a_chain() -> None:
    from langmem_trpc.service.rules import Limits

    svc = InMemoryMemoryService(
        embeddings=HashingEmbeddings(), limits=Limits(capacity=3, on_capacity="evict")
    )
    a, b, c = _chain(svc)
    svc.add(ALICE, "Allergic to peanuts")
    chain = [e.id for e in svc.versions(ALICE, c)]
    assert chain in ([a, b, c], [b, c]), chain  # the oldest version may go, not a middle one
    assert [e.id for e in svc.versions(ALICE, chain[0])] == chain


def test_preload_does_not_call_an_undone_version_the_past(svc: MemoryService) -> None:
    """After restore_version(1.23), the closed head (1.25, never true: valid_to ==
    valid_from) names 1.23 as its successor; preload must not render 1.23 as
    "before: Production runs Go 1.25"."""
    from langmem_trpc.integration._calls import drive
    from langmem_trpc.integration.preload import _past, render_block

    a, _b, _c = _chain(svc)
    restored = svc.restore_version(ALICE, a)
    past = drive(svc, _past(ALICE, [restored]))
    assert "1.25" not in render_block([restored], None, past)
    assert past == {}


def test_preload_gives_a_restored_middle_version_its_true_past(svc: MemoryService) -> None:
    """After restore_version(1.24), 1.24 has two predecessors: the closed head (1.25,
    never true) and 1.23 (true until 1.24 began); preload renders 1.23 as the past."""
    from langmem_trpc.integration._calls import drive
    from langmem_trpc.integration.preload import _past

    a, b, _c = _chain(svc)
    restored = svc.restore_version(ALICE, b)
    past = drive(svc, _past(ALICE, [restored]))
    assert {k: v.id for k, v in past.items()} == {b: a}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Doesn't drink alcohol", "Does not drink alcohol"),
        ("Does not eat pork", "Doesn't eat pork"),
        ("Isn't on call this week", "Is not on call this week"),
    ],
)
def test_a_spelled_out_negation_is_a_paraphrase_not_a_supersede(old: str, new: str) -> None:
    """ "doesn't" and "does not" are one negation: a rewording, updated in place."""
    from langmem_trpc.extraction.supersede import judge

    entry = InMemoryMemoryService().add(ALICE, old)
    assert judge(entry, new, None).supersede is False


def test_a_number_word_change_is_a_change_of_state() -> None:
    from langmem_trpc.extraction.signals import state_change

    assert state_change("Has two cats", "Has three cats") is not None


def test_a_number_respelled_is_not_a_change_of_state() -> None:
    from langmem_trpc.extraction.signals import state_change

    assert state_change("Has 2 kids", "Has two kids") is None
    assert state_change("Salary is $100k", "Salary is $100,000") is None


def test_read_limit_counts_only_the_chosen_view(svc: MemoryService) -> None:
    """The limit applies after the view: the past version is found though newer rows exist."""
    _chain(svc)
    for n in range(3):
        svc.add(ALICE, f"Unrelated note number {n}")
    assert [e.text for e in svc.read(ALICE, 1, as_of=_day(5))] == ["Production runs Go 1.23"]
    assert len(svc.read(ALICE, 2, include_superseded=True)) == 2


def test_many_old_versions_never_crowd_out_the_current_one(svc: MemoryService) -> None:
    head = svc.add(ALICE, "Deploy count is 0", valid_from=_day(1))
    for n in range(1, 30):
        head = svc.update(ALICE, head.id, f"Deploy count is {n}", supersede=True)
    options = SearchOptions(max_results=1, similarity_threshold=0.0)
    assert [e.text for e in svc.search(ALICE, "Deploy count", options)] == ["Deploy count is 29"]
    assert [e.text for e in svc.read(ALICE, 1)] == ["Deploy count is 29"]
    assert svc.count(ALICE) == 1
    assert len(svc.versions(ALICE, head.id)) == 30


def test_bad_supersede_leaves_the_chain_untouched(svc: MemoryService) -> None:
    """A supersede with valid_until before its valid_from fails naming the field and
    writes nothing; superseding an already superseded version names the head."""
    a, b, c = _chain(svc)
    before = svc.read(ALICE, include_superseded=True)
    with pytest.raises(LangmemTrpcError) as error:
        svc.update(
            ALICE,
            c,
            "Production runs Go 1.26",
            supersede=True,
            valid_from=_day(25),
            valid_until=_day(24),
        )
    assert error.value.field == "valid_until"  # type: ignore[attr-defined]
    with pytest.raises(MemoryConflictError) as conflict:
        svc.update(ALICE, a, "Production runs Go 1.30", supersede=True)
    assert c in str(conflict.value)
    assert svc.read(ALICE, include_superseded=True) == before
    assert svc.restore_version(ALICE, c).id == c  # the head: returned unchanged
    assert svc.read(ALICE, include_superseded=True) == before


def test_restore_of_content_another_current_row_holds_is_a_conflict(svc: MemoryService) -> None:
    a, _b, c = _chain(svc)
    svc.add(ALICE, "Production runs Go 1.23")  # said again as a plain add: current twin of a
    before = svc.read(ALICE, include_superseded=True)
    with pytest.raises(MemoryConflictError):
        svc.restore_version(ALICE, a)
    assert svc.read(ALICE, include_superseded=True) == before
    assert svc.get(ALICE, c).superseded_by is None  # type: ignore[union-attr]


def test_concurrent_restore_and_supersede_leave_one_current(svc: MemoryService) -> None:
    a, _b, c = _chain(svc)
    barrier = threading.Barrier(2)
    errors: list[Exception] = []

    def run(action: str) -> None:
        barrier.wait()
        try:
            if action == "restore":
                svc.restore_version(ALICE, a)
            else:
                svc.update(ALICE, c, "Production runs Go 1.26", supersede=True)
        except MemoryConflictError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(x,)) for x in ("restore", "supersede")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(svc.read(ALICE)) == 1, [e.text for e in svc.read(ALICE)]


@pytest.mark.parametrize("odd_id", ["a_b", "k:1", "x/y.z", "a+b=c", "_x@y"])
def test_chain_walks_with_odd_memory_ids(svc: MemoryService, odd_id: str) -> None:
    """Ids with LIKE wildcards or separators as supersede links: the chain
    is walked exactly (no wildcard match, no quoting error), and only the user's."""
    svc.add(BOB, "Production runs Go 1.23", memory_id=odd_id)
    svc.add(ALICE, "Production runs Go 1.23", memory_id=odd_id)
    svc.add(ALICE, "Unrelated fact", memory_id=odd_id.replace("_", "x").replace("%", "9") + "z")
    # a keyed memory is superseded only where the caller follows the link (MemoryStore)
    patch = MemoryPatch("Production runs Go 1.24")
    plan = update_plan(ALICE, odd_id, patch, limits=svc.limits, supersede=True, keyed_versions=True)
    new = svc.run_plan(plan)
    svc.restore_version(ALICE, odd_id)  # the head now names odd_id as its successor
    chain = svc.versions(ALICE, odd_id)
    assert [e.id for e in chain] == [odd_id, new.id]  # oldest first by valid_from
    assert [e.text for e in svc.read(ALICE) if "Go" in e.text] == ["Production runs Go 1.23"]
    assert [e.id for e in svc.versions(BOB, odd_id)] == [odd_id]


def test_as_of_after_restoring_an_older_version_returns_one_version(svc: MemoryService) -> None:
    """A restore is a correction: every later version was never true, the middle one too."""
    a, b, c = _chain(svc)
    svc.restore_version(ALICE, a)
    for day in (5, 15, 25):
        assert [e.text for e in svc.read(ALICE, as_of=_day(day))] == ["Production runs Go 1.23"]
        options = SearchOptions(as_of=_day(day), similarity_threshold=0.0)
        assert [e.id for e in svc.search(ALICE, "Production Go", options)] == [a]
    assert [e.id for e in svc.versions(ALICE, a)] == [a, b, c]  # the chain is kept
    middle = svc.get(ALICE, b)
    assert middle is not None and middle.valid_to == middle.valid_from and middle.superseded_by == c
    assert [h.operation for h in svc.history(ALICE, b)][-1] == Operation.SUPERSEDE


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("The production cluster runs Go 1.23", "The staging cluster runs Go 1.24"),
        ("My son is 5 years old", "My daughter is 7 years old"),
        ("Uses PostgreSQL 15 for the billing service", "Uses PostgreSQL 16 for the search service"),
    ],
)
@pytest.mark.parametrize("where", ["store", "preserve_history"])
def test_a_similar_fact_about_another_subject_closes_nothing(
    old: str, new: str, where: str
) -> None:
    """Never over-invalidate: a new fact that shares words and changes a number but is
    about another subject (staging, not production; the daughter, not the son) keeps
    the old one current (before the supersede, preserve_history kept both rows)."""
    from langmem_trpc.extraction.ops import Action, MemoryOp
    from langmem_trpc.extraction.policies import apply_policy
    from langmem_trpc.extraction.reconcile import PROBE_OPTIONS
    from langmem_trpc.integration.store import MemoryStore

    svc = InMemoryMemoryService(embeddings=HashingEmbeddings())
    if where == "store":
        store = MemoryStore(svc, reconcile=True)
        store.put(("app", "alice", "facts"), "k1", {"text": old})
        store.put(("app", "alice", "facts"), "k2", {"text": new})
        current = [e.text for e in svc.read(ALICE)]
        assert sorted(current) == sorted([old, new])
        return
    svc.add(ALICE, old)
    decided = apply_policy(
        "preserve_history",
        [MemoryOp.add(new)],
        probe=lambda q: svc.search(ALICE, q, PROBE_OPTIONS),
        existing=(),
        actions=frozenset({Action.ADD, Action.UPDATE}),
    )
    assert [op.supersede for op in decided.ops] == [False]


def test_valid_until_a_bare_date_means_the_same_on_every_entry_point() -> None:
    from langmem_trpc.extraction.tool_calls import _valid_until

    svc = InMemoryMemoryService()
    entry = svc.add(ALICE, "Is in Tokyo", valid_until="2030-07-24")
    assert entry.valid_to == _valid_until({"valid_until": "2030-07-24"}, "memory_add")


def test_async_views_restore_and_bad_input_match_sync(svc: MemoryService) -> None:
    a, b, c = _chain(svc)

    async def run() -> None:
        for day, version in {9: "1.23", 10: "1.24", 20: "1.25"}.items():
            found = await svc.asearch(
                ALICE, "Production Go", SearchOptions(as_of=_day(day), similarity_threshold=0.0)
            )
            assert [e.text for e in found] == [f"Production runs Go {version}"]
        with pytest.raises(LangmemTrpcError) as error:
            await svc.aread(ALICE, as_of="2026-13-45")
        assert error.value.field == "as_of"  # type: ignore[attr-defined]
        with pytest.raises(InvalidInputError):
            await svc.aread(ALICE, as_of=_day(1), include_superseded=True)
        restored = await svc.arestore_version(ALICE, b)
        assert restored.id == b and restored.valid_to is None
        assert [e.id for e in await svc.aread(ALICE)] == [b]
        assert b in {e.id for e in await svc.aversions(ALICE, b)}
        with pytest.raises(LangmemTrpcError):
            await svc.arestore_version(BOB, a)

    asyncio.run(run())


def test_versions_lists_the_whole_chain_after_one_restore(svc: MemoryService) -> None:
    a, b, c = _chain(svc)
    svc.restore_version(ALICE, b)
    for start in (a, b, c):
        assert {e.id for e in svc.versions(ALICE, start)} == {a, b, c}, start
