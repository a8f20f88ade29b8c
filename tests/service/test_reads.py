"""Reads as plans (`service.reads`): every read executor implements the one method
per read step, `dispatch_read` routes each step to it, the search plan asks for the
steps its rules call for, and the in-memory backend runs its async reads as plans."""

from __future__ import annotations

import asyncio
import inspect
import re
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, get_args

import pytest

from langmem_trpc import InMemoryMemoryService, UserKey
from langmem_trpc.backends.lancedb._read import ReadRun
from langmem_trpc.backends.memory.service import _Reads
from langmem_trpc.backends.sqlite._reads import SQLiteReads
from langmem_trpc.service import reads, steps
from langmem_trpc.service.reads import ReadPlan
from langmem_trpc.service.search import POOL_GROWTH, Legs, candidate_pool
from langmem_trpc.types import Entry, FusionSettings, HistoryEvent, Memory, SearchOptions

ALICE = UserKey("app", "alice")
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _method(step: type) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", step.__name__).lower()


STEP_METHODS = {_method(step) for step in get_args(reads.ReadStep)}

EXECUTORS = [
    pytest.param(_Reads, id="memory"),
    pytest.param(SQLiteReads, id="sqlite"),
    pytest.param(ReadRun, id="lancedb"),
    # PostgreSQL's executor is sans-I/O (each method a generator of statements), held by
    # tests/backends/test_postgres_twins.py against the same protocol.
]


def test_the_protocol_has_one_method_per_read_step() -> None:
    declared = {name for name in vars(reads.ReadExecutor) if not name.startswith("_")}
    assert declared == STEP_METHODS


@pytest.mark.parametrize("executor", EXECUTORS)
def test_every_read_executor_implements_every_step_with_the_protocols_parameters(
    executor: type,
) -> None:
    for name in sorted(STEP_METHODS):
        wanted = inspect.signature(getattr(reads.ReadExecutor, name)).parameters
        method = getattr(executor, name, None)
        assert callable(method), f"{executor.__name__} lacks {name}"
        assert list(inspect.signature(method).parameters) == list(wanted), name


def test_dispatch_read_calls_the_method_of_the_step() -> None:
    class Recorder:
        def __getattr__(self, name: str) -> Callable[[object], object]:
            return lambda step: (name, step)

    for kind in get_args(reads.ReadStep):
        step = kind.__new__(kind)
        assert reads.dispatch_read(Recorder(), step) == (_method(kind), step)  # type: ignore[arg-type]


# -- the search plan, run on a scripted executor --------------------------------------


def _entry(n: int, expired: bool = False) -> Entry:
    return Entry(
        id=f"m{n:03d}",
        app_name=ALICE.app_name,
        user_id=ALICE.user_id,
        memory=Memory(text=f"note {n}"),
        created_at=T0,
        updated_at=T0,
        expires_at=T0 if expired else None,
    )


class Scripted:
    """A read executor that answers `EmbedQuery` with a marker and each `FetchLegs`
    with the next of `answers`, recording every step."""

    QUERY = object()

    def __init__(self, answers: Sequence[Callable[[reads.FetchLegs], reads.Fetched]]) -> None:
        self.answers = list(answers)
        self.steps: list[reads.ReadStep] = []

    def run(self, plan: ReadPlan) -> list[Entry]:
        def execute(step: reads.ReadStep) -> object:
            self.steps.append(step)
            return reads.dispatch_read(self, step)

        found: list[Entry] = steps.drive(plan, execute)
        return found

    def embed_query(self, step: reads.EmbedQuery) -> object:
        return self.QUERY

    def fetch_legs(self, step: reads.FetchLegs) -> reads.Fetched:
        return self.answers.pop(0)(step)

    def get_row(self, step: reads.GetRow) -> Entry | None:
        raise AssertionError("a search reads no row by id")

    def read_rows(self, step: reads.ReadRows) -> list[Entry]:
        raise AssertionError("a search lists no rows")

    def read_history(self, step: reads.ReadHistory) -> list[HistoryEvent]:
        raise AssertionError("a search reads no history")

    def count_current(self, step: reads.CountCurrent) -> int:
        raise AssertionError("a search counts nothing")

    def list_users(self, step: reads.ListUsers) -> list[UserKey]:
        raise AssertionError("a search lists no users")


def _vector(scores: Sequence[float], narrowed: int | None = None) -> Callable[..., reads.Fetched]:
    """An answer whose vector leg holds one entry per score, best first."""
    hits = [(_entry(i), s) for i, s in enumerate(scores)]
    return lambda step: reads.Fetched({k: Legs(hits, []) for k in step.kinds}, narrowed)


def _fetches(executor: Scripted) -> list[reads.FetchLegs]:
    return [s for s in executor.steps if isinstance(s, reads.FetchLegs)]


def test_a_blank_query_asks_for_no_step_at_all() -> None:
    executor = Scripted([])
    assert executor.run(reads.search(ALICE, SearchOptions(query="  "))) == []
    assert executor.steps == []


def test_a_search_embeds_the_query_once_then_fetches_the_legs_with_it() -> None:
    options = SearchOptions(query="note", max_results=2, hybrid=False)
    executor = Scripted([_vector([0.9, 0.8, 0.7])])
    found = executor.run(reads.search(ALICE, options))
    assert [e.id for e in found] == ["m000", "m001"]
    first, fetch = executor.steps
    assert first == reads.EmbedQuery("note")
    assert fetch == reads.FetchLegs(
        ALICE, options, Scripted.QUERY, (None,), candidate_pool(2), keep=2, wide=False
    )


def test_a_narrowed_fetch_that_ranked_too_few_is_asked_again_wide() -> None:
    options = SearchOptions(query="note", max_results=5, hybrid=False)
    executor = Scripted([_vector([0.9, 0.8, 0.7], narrowed=3), _vector([0.9, 0.8, 0.7, 0.6, 0.5])])
    found = executor.run(reads.search(ALICE, options))
    narrow, wide = _fetches(executor)
    assert not narrow.wide and wide.wide
    assert (wide.kinds, wide.pool, wide.keep) == (narrow.kinds, narrow.pool, narrow.keep)
    assert [e.id for e in found] == ["m000", "m001", "m002", "m003", "m004"]


@pytest.mark.parametrize(
    "scores",
    [
        pytest.param([0.9, 0.8, 0.35], id="the-farthest-candidate-ranks-below-the-last-hit"),
        pytest.param([0.9, 0.8], id="the-narrow-leg-came-back-short"),
    ],
)
def test_a_narrowed_fetch_that_was_enough_is_not_asked_again(scores: list[float]) -> None:
    options = SearchOptions(query="note", max_results=2, hybrid=False)
    executor = Scripted([_vector(scores, narrowed=3)])
    found = executor.run(reads.search(ALICE, options))
    assert [e.id for e in found] == ["m000", "m001"]
    assert len(_fetches(executor)) == 1


def _keyword(expired: int, total: int) -> Callable[[reads.FetchLegs], reads.Fetched]:
    """A full keyword leg of `step.pool` hits (scores falling from 0.9) whose first
    `expired` hits are past their `expires_at`, out of `total` entries in all."""

    def answer(step: reads.FetchLegs) -> reads.Fetched:
        size = min(step.pool, total)
        hits = [(_entry(i, expired=i < expired), 0.9 - i / 1000) for i in range(size)]
        return reads.Fetched({k: Legs(None, hits) for k in step.kinds})

    return answer


def test_deeper_tiers_are_fetched_while_fewer_than_max_results_were_ranked() -> None:
    fusion = FusionSettings(min_pool=20)
    options = SearchOptions(query="note", max_results=10, fusion=fusion)
    # the first tier's 20 candidates: 15 past their expiry, so only 5 rank
    executor = Scripted([_keyword(15, 200), _keyword(15, 200)])
    found = executor.run(reads.search(ALICE, options))
    first, deeper = _fetches(executor)
    assert (first.pool, first.keep) == (20, 10)
    assert (deeper.pool, deeper.keep) == (20 * POOL_GROWTH, 10 + 5)
    assert [e.id for e in found] == [f"m{i:03d}" for i in range(15, 25)]


def test_no_deeper_tier_once_max_results_were_ranked() -> None:
    options = SearchOptions(query="note", max_results=10, fusion=FusionSettings(min_pool=20))
    executor = Scripted([_keyword(5, 200)])
    assert len(executor.run(reads.search(ALICE, options))) == 10
    assert len(_fetches(executor)) == 1


def _named(answers: int, *people: str) -> list[Callable[[reads.FetchLegs], reads.Fetched]]:
    """`answers` answers whose vector leg holds one entry per person, as a participant."""
    hits = [
        (_entry(i).model_copy(update={"memory": Memory(text=f"note {i}", participants=[p])}), 0.9)
        for i, p in enumerate(people)
    ]
    return [lambda step: reads.Fetched({k: Legs(hits, []) for k in step.kinds})] * answers


def test_a_query_naming_a_participant_is_embedded_masked_and_its_tier_fetched_again() -> None:
    mask = FusionSettings(mask_names=True, min_pool=20)
    options = SearchOptions(query="What is Caroline's job?", max_results=10, fusion=mask)
    executor = Scripted(_named(2, "Caroline", "Melanie"))
    assert len(executor.run(reads.search(ALICE, options))) == 2
    embeds = [s for s in executor.steps if isinstance(s, reads.EmbedQuery)]
    assert embeds == [reads.EmbedQuery(options.query), reads.EmbedQuery("What is they job?")]
    first, again = _fetches(executor)
    assert first.options is options and not first.wide
    assert again.options == options.model_copy(update={"hybrid": False})  # its vector leg
    assert again.wide and (again.kinds, again.pool, again.keep) == (first.kinds, first.pool, 10)
    assert executor.steps.index(embeds[1]) == executor.steps.index(first) + 1


@pytest.mark.parametrize(
    ("query", "options"),
    [
        ("What is Bob's job?", {"fusion": FusionSettings(mask_names=True)}),  # not a candidate's
        ("What is Caroline's job?", {"fusion": FusionSettings(mask_names=False)}),
        ("What is Caroline's job?", {"fusion": FusionSettings(mask_names=True), "hybrid": False}),
    ],
)
def test_no_masked_query_without_a_named_participant_or_with_the_step_off(
    query: str, options: dict[str, Any]
) -> None:
    asked = SearchOptions(query=query, max_results=10, **options)
    executor = Scripted(_named(1, "Caroline"))
    executor.run(reads.search(ALICE, asked))
    assert [type(s) for s in executor.steps] == [reads.EmbedQuery, reads.FetchLegs]


def test_a_keyword_only_search_embeds_nothing_masked() -> None:
    class NoEmbedder(Scripted):
        def embed_query(self, step: reads.EmbedQuery) -> object:
            return None

    options = SearchOptions(query="What is Caroline's job?", fusion={"mask_names": True})
    executor = NoEmbedder(_named(1, "Caroline"))
    executor.run(reads.search(ALICE, options))
    assert [type(s) for s in executor.steps] == [reads.EmbedQuery, reads.FetchLegs]


def test_a_query_naming_a_dated_period_also_fetches_the_tier_within_it() -> None:
    fusion = FusionSettings(period_fetch=True, mask_names=False, min_pool=20)
    options = SearchOptions(query="What did Ann do in May 2023?", max_results=10, fusion=fusion)
    inside = _entry(7)
    executor = Scripted(
        [_vector([0.9, 0.8]), lambda step: reads.Fetched({None: Legs([(inside, 0.5)], [])})]
    )
    found = executor.run(reads.search(ALICE, options))
    assert [e.id for e in found] == ["m000", "m001", "m007"]
    first, within = _fetches(executor)
    assert first.options is options
    assert (within.options.time_after, within.options.time_before) == (
        datetime(2023, 5, 1, tzinfo=timezone.utc),
        datetime(2023, 6, 1, tzinfo=timezone.utc) - timedelta(microseconds=1),
    )
    assert (within.pool, within.keep, within.query) == (first.pool, first.keep, first.query)


@pytest.mark.parametrize(
    "options",
    [
        SearchOptions(query="What did Ann do in July?", fusion={"period_fetch": True}),
        SearchOptions(query="in May 2023", fusion={"period_fetch": False}),
        SearchOptions(query="in May 2023", hybrid=False, fusion={"period_fetch": True}),
    ],
)
def test_no_period_fetch_without_a_dated_period_or_with_the_step_off(
    options: SearchOptions,
) -> None:
    executor = Scripted([_vector([0.9])])
    executor.run(reads.search(ALICE, options))
    assert len(_fetches(executor)) == 1


# -- the in-memory backend's executor -------------------------------------------------


def test_a_searchs_deeper_tier_reads_the_state_its_first_tier_read() -> None:
    """One plan, one state: `_Reads` reads the rows once, at the plan's first
    `FetchLegs`; a write between two tiers does not show up in the second."""
    svc = InMemoryMemoryService()
    svc.add(ALICE, "Keeps bees in the garden")
    reader, options = _Reads(svc), SearchOptions(query="bees")
    first = reader.fetch_legs(reads.FetchLegs(ALICE, options, None, (None,), 20, 10))
    svc.add(ALICE, "Sells honey from the bees")
    deeper = reader.fetch_legs(reads.FetchLegs(ALICE, options, None, (None,), 80, 10))
    assert [len(f.legs[None].keyword) for f in (first, deeper)] == [1, 1]
    assert first.narrowed is None and first.legs[None].vector is None
    fresh = _Reads(svc).fetch_legs(reads.FetchLegs(ALICE, options, None, (None,), 20, 10))
    assert len(fresh.legs[None].keyword) == 2


def test_a_first_tiers_masked_and_period_fetches_read_the_state_its_first_fetch_read() -> None:
    """The masked query's vector-only fetch and the period fetch (`reads._first_tier`)
    differ from the first fetch only in `hybrid` and the time range: `_Reads` answers
    them from the first fetch's rows, not from a write that landed in between."""
    from langmem_trpc.testing import HashingEmbeddings

    svc = InMemoryMemoryService(HashingEmbeddings())
    svc.add(ALICE, "Keeps bees in the garden", event_time="2023-05-02")
    reader, options = _Reads(svc), SearchOptions(query="bees in May 2023")
    query = reader.embed_query(reads.EmbedQuery("bees"))
    first = reader.fetch_legs(reads.FetchLegs(ALICE, options, query, (None,), 20, 10))
    svc.add(ALICE, "Sells honey from the bees", event_time="2023-05-03")
    vector_only = options.model_copy(update={"hybrid": False})
    again = reader.fetch_legs(reads.FetchLegs(ALICE, vector_only, query, (None,), 20, 10, True))
    period = options.model_copy(update={"time_after": datetime(2023, 5, 1, tzinfo=timezone.utc)})
    within = reader.fetch_legs(reads.FetchLegs(ALICE, period, query, (None,), 20, 10))
    assert [len(f.legs[None].vector or []) for f in (first, again, within)] == [1, 1, 1]
    assert again.legs[None].keyword == []  # a vector-only fetch brings no keyword leg
    assert len(within.legs[None].keyword) == 1
    other = options.model_copy(update={"query": "honey"})  # another search: a fresh read
    fresh = reader.fetch_legs(reads.FetchLegs(ALICE, other, query, (None,), 20, 10))
    assert len(fresh.legs[None].vector or []) == 2


class Recording(InMemoryMemoryService):
    """Records which plan each `run_read` ran, and on which thread."""

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[tuple[str, int]] = []

    def run_read(self, plan: ReadPlan) -> Any:
        self.ran.append((plan.__name__, threading.get_ident()))  # type: ignore[attr-defined]
        return super().run_read(plan)


def test_the_async_reads_run_their_plans_through_arun_read_off_the_event_loop() -> None:
    svc = Recording()
    kept = svc.add(ALICE, "Keeps bees")
    gone = svc.add(ALICE, "Plays chess")
    svc.delete(ALICE, gone.id)

    async def main() -> tuple[list[object], int]:
        found: list[object] = [
            await svc.aget(ALICE, kept.id),
            await svc.aread(ALICE),
            await svc.adeleted(ALICE),
            await svc.asearch(ALICE, "bees"),
            await svc.ahistory(ALICE, kept.id),
            await svc.acount(ALICE),
            await svc.ausers(),
        ]
        return found, threading.get_ident()

    svc.ran.clear()
    found, loop = asyncio.run(main())
    names = ["get", "read", "deleted", "search", "history", "count", "users"]
    assert [name for name, _ in svc.ran] == names
    assert all(thread != loop for _, thread in svc.ran)
    got, listed, deleted, searched, events, count, users = found
    assert got == kept and listed == [kept] and count == 1 and users == [ALICE]
    assert [e.id for e in deleted] == [gone.id]  # type: ignore[attr-defined]
    assert [e.id for e in searched] == [kept.id]  # type: ignore[attr-defined]
    assert [e.memory_id for e in events] == [kept.id]  # type: ignore[attr-defined]
    assert found == [
        svc.get(ALICE, kept.id),
        svc.read(ALICE),
        svc.deleted(ALICE),
        svc.search(ALICE, "bees"),
        svc.history(ALICE, kept.id),
        svc.count(ALICE),
        svc.users(),
    ]


def test_an_expired_row_stays_hidden_from_every_read_plan() -> None:
    svc = InMemoryMemoryService()
    entry = svc.add(ALICE, "Keeps bees")
    assert svc.set_expiry(ALICE, entry.id, datetime.now(timezone.utc) - timedelta(seconds=1))
    assert svc.get(ALICE, entry.id) is None and svc.read(ALICE) == []
    assert svc.search(ALICE, "bees") == [] and svc.count(ALICE) == 1
