"""Reads as plans: the read steps, their results, the read executor contract and the
shared read plans (public backend kit, issue 25).

A read (get, read, deleted, search, history, count, users) is a *plan* like a write:
a generator that yields the steps below and returns the read's result. Every read
rule lives here once: above all search, which is plan -> fetch -> rank over
`service.search` (`plan_search`, `rank_search`, `Tiers`) with no callback from the
shared core into the backend. A backend is a `ReadExecutor`: one method per step,
each returning that step's typed result; `dispatch_read` is the one exhaustive
`match` from a step to its method.

    result = drive(plan, lambda step: dispatch_read(executor, step))  # sync backends
    result = await adrive(plan, aexecute)                              # async backends

The contract every read executor keeps:

* A step's `user` scopes it: no step reads another user's rows.
* One plan reads one consistent state: the executor opens a read snapshot at its
  first storage step and holds it until the plan ends (SQLite), or reads the rows a
  search ranks once, at its first `FetchLegs`, and cuts every later fetch of the
  search from them (in-memory, LanceDB): deeper tiers, and the first tier's masked
  query (a vector-only fetch) and period fetch (other time range). PostgreSQL does
  not keep this yet: each of its statements reads its own snapshot (a strict xfail
  in tests/reliability/test_reads_adversarial.py).
* `EmbedQuery` returns the query vector in whatever form the executor's storage
  wants (None without an embedder); the plan hands it back untouched in
  `FetchLegs.query`.
* `FetchLegs` returns, for each of its `kinds`, the best `pool` candidates of each
  leg (vector, keyword), best first, filtered by kind, the search's time range and
  view (`validity.view_of(options)`), scored as `service.search` expects: cosine
  clamped at 0 for the vector leg (None when `query` is None, or for a keyword-only
  search), BM25F (`service.bm25`) for the keyword leg. An executor may return fewer
  vector candidates than `pool` on purpose (an approximate index narrowed to what
  the ranking probably needs) and say so in `Fetched.narrowed`; the plan then asks
  again with `wide=True` when the ranking shows the narrow pool was not enough.

PostgreSQL's executor is sans-I/O (its methods yield statements for its sync and
async drivers): it keeps the same method names and results and its own `match`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, assert_never

from ..types import Entry, HistoryEvent, Kind, SearchOptions, UserKey
from .first_tier import masked_query, merge_legs, period_options
from .language import ENGLISH, Language
from .search import Legs, SearchPlan, Tiers, needs_wider_pool, plan_search, rank_search
from .validity import CURRENT, View

__all__ = [
    "CountCurrent",
    "EmbedQuery",
    "FetchLegs",
    "Fetched",
    "GetRow",
    "ListUsers",
    "ReadExecutor",
    "ReadHistory",
    "ReadPlan",
    "ReadRows",
    "ReadStep",
    "count",
    "deleted",
    "dispatch_read",
    "get",
    "history",
    "read",
    "search",
    "users",
]


# -- steps ------------------------------------------------------------------------


@dataclass(slots=True)
class GetRow:
    """The row with this id -> `Entry | None`: None when unknown, soft-deleted or past
    its `expires_at`; a superseded or lapsed version is returned, marked."""

    user: UserKey
    memory_id: str


@dataclass(slots=True)
class ReadRows:
    """The user's rows -> `list[Entry]`, at most `limit` (None: all).

    With `deleted=False`: the live rows `view` shows (`View.visible`), not past their
    `expires_at`, most recently updated first (ties: most recently created, then
    id, descending). With `deleted=True`: the soft-deleted (not purged) rows, most
    recently deleted first (ties: id, descending), as they were when deleted; `view`
    is not consulted.
    """

    user: UserKey
    limit: int | None
    view: View = CURRENT
    deleted: bool = False


@dataclass(slots=True)
class ReadHistory:
    """Every history event of the memory -> `list[HistoryEvent]`, oldest first (empty
    for an unknown id)."""

    user: UserKey
    memory_id: str


@dataclass(slots=True)
class CountCurrent:
    """The user's live rows that no newer version superseded -> `int` (a lapsed or
    TTL-expired row still counts)."""

    user: UserKey


@dataclass(slots=True)
class ListUsers:
    """Users with at least one live, unsuperseded row -> `list[UserKey]`, sorted by
    (app_name, user_id); only `app_name`'s when it is not None."""

    app_name: str | None


@dataclass(slots=True)
class EmbedQuery:
    """The query's vector in the executor's own form -> `object | None` (None without
    an embedder)."""

    text: str


@dataclass(slots=True)
class FetchLegs:
    """The candidates of one search tier -> `Fetched`: `Legs` for each of `kinds`
    (see the module's contract)."""

    user: UserKey
    options: SearchOptions
    query: object | None
    """`EmbedQuery`'s result, untouched."""
    kinds: tuple[Kind | None, ...]
    pool: int
    keep: int
    """How many hits the ranking keeps of this tier (a hint for narrowing)."""
    wide: bool = False
    """Fetch the full `pool` on every leg: the narrowed fetch was not enough."""


@dataclass(slots=True)
class Fetched:
    """`FetchLegs`' result: the legs of each kind asked for."""

    legs: Mapping[Kind | None, Legs]
    narrowed: int | None = field(default=None)
    """Set when the vector legs hold only this many candidates on purpose (fewer than
    the pool); None when every leg holds up to the pool."""


ReadStep = GetRow | ReadRows | ReadHistory | CountCurrent | ListUsers | EmbedQuery | FetchLegs
ReadPlan = Generator[ReadStep, Any, Any]


class ReadExecutor(Protocol):
    """What a backend implements to run the read plans: one method per step."""

    def get_row(self, step: GetRow) -> Entry | None: ...

    def read_rows(self, step: ReadRows) -> list[Entry]: ...

    def read_history(self, step: ReadHistory) -> list[HistoryEvent]: ...

    def count_current(self, step: CountCurrent) -> int: ...

    def list_users(self, step: ListUsers) -> list[UserKey]: ...

    def embed_query(self, step: EmbedQuery) -> object | None: ...

    def fetch_legs(self, step: FetchLegs) -> Fetched: ...


def dispatch_read(executor: ReadExecutor, step: ReadStep) -> object:
    """Run one read step on `executor`: the one exhaustive dispatch (a step type the
    match misses is a type error under mypy's `assert_never`)."""
    match step:
        case GetRow():
            return executor.get_row(step)
        case ReadRows():
            return executor.read_rows(step)
        case ReadHistory():
            return executor.read_history(step)
        case CountCurrent():
            return executor.count_current(step)
        case ListUsers():
            return executor.list_users(step)
        case EmbedQuery():
            return executor.embed_query(step)
        case FetchLegs():
            return executor.fetch_legs(step)
        case _:
            assert_never(step)


# -- plans --------------------------------------------------------------------------
# Arguments arrive validated (`rules.check_user` and friends): the service's public
# methods check them before they build a plan, as for writes.


def get(user: UserKey, memory_id: str) -> Generator[ReadStep, Any, Entry | None]:
    found: Entry | None = yield GetRow(user, memory_id)
    return found


def read(user: UserKey, limit: int | None, view: View) -> Generator[ReadStep, Any, list[Entry]]:
    rows: list[Entry] = yield ReadRows(user, limit, view)
    return rows


def deleted(user: UserKey, limit: int | None) -> Generator[ReadStep, Any, list[Entry]]:
    rows: list[Entry] = yield ReadRows(user, limit, deleted=True)
    return rows


def history(user: UserKey, memory_id: str) -> Generator[ReadStep, Any, list[HistoryEvent]]:
    events: list[HistoryEvent] = yield ReadHistory(user, memory_id)
    return events


def count(user: UserKey) -> Generator[ReadStep, Any, int]:
    found: int = yield CountCurrent(user)
    return found


def users(app_name: str | None) -> Generator[ReadStep, Any, list[UserKey]]:
    found: list[UserKey] = yield ListUsers(app_name)
    return found


def search(
    user: UserKey,
    options: SearchOptions,
    language: Language = ENGLISH,
    says: Callable[[str], bool] | None = None,
) -> Generator[ReadStep, Any, list[Entry]]:
    """The whole search: `plan_search`, then tier by tier (`Tiers`) fetch the legs and
    `rank_search` them, asking again wide when a narrowed fetch was not enough. With
    `FusionSettings.mask_names`, a hybrid search whose query names a participant of the
    first tier's candidates embeds `masked_query` and fetches that tier's vector leg
    again; with `period_fetch`, one naming a dated period also fetches the tier within
    it (`_first_tier`). `language` and `says` (whether a text says a time) are the
    service's."""
    tiers = Tiers(plan_search(options), options, language)
    if tiers.done:
        return []
    query = yield EmbedQuery(options.query)
    first = True
    while not tiers.done:
        plan = tiers.current
        fetched: Fetched = yield FetchLegs(user, options, query, plan.kinds, plan.pool, tiers.keep)
        if first:  # the first tier's extra steps; every later tier reuses what they chose
            first = False
            query, fetched = yield from _first_tier(
                user, options, query, plan, tiers, fetched, language
            )
        ranked = rank_search(plan, fetched.legs, options, language, says, tiers.keep)
        narrowed = fetched.narrowed
        if narrowed is not None and needs_wider_pool(
            ranked, fetched.legs.values(), narrowed, options
        ):
            step = FetchLegs(user, options, query, plan.kinds, plan.pool, tiers.keep, wide=True)
            fetched = yield step
            ranked = rank_search(plan, fetched.legs, options, language, says, tiers.keep)
        tiers.add(ranked, fetched.legs.values())
    return tiers.final


def _first_tier(
    user: UserKey,
    options: SearchOptions,
    query: object,
    plan: SearchPlan,
    tiers: Tiers,
    fetched: Fetched,
    language: Language,
) -> Generator[ReadStep, Any, tuple[object, Fetched]]:
    """What a hybrid search adds to its first tier: with `FusionSettings.mask_names`, the
    query embedded without the participants it names (`masked_query`) and the tier's
    vector leg fetched again with that vector (a vector-only `FetchLegs`, `wide`: the
    whole pool; the keyword leg, which reads the query's words, is kept); with
    `period_fetch`, the tier's candidates within the periods the query names
    (`period_options`) merged in. Returns the query vector later tiers use and the
    tier's legs."""
    tuning = options.fusion
    if not options.hybrid:
        return query, fetched
    if tuning.mask_names and query is not None:
        text = masked_query(options.query, fetched.legs.values(), language)
        if text != options.query:
            query = yield EmbedQuery(text)
            vector_only = options.model_copy(update={"hybrid": False})  # the keyword leg stays
            step = FetchLegs(user, vector_only, query, plan.kinds, plan.pool, tiers.keep, wide=True)
            again: Fetched = yield step
            legs = {
                kind: Legs(again.legs[kind].vector, leg.keyword)
                for kind, leg in fetched.legs.items()
            }
            fetched = Fetched(legs, fetched.narrowed)
    narrowed = period_options(options, language) if tuning.period_fetch else None
    if narrowed is not None:
        extra = yield FetchLegs(user, narrowed, query, plan.kinds, plan.pool, tiers.keep)
        legs = {kind: merge_legs(leg, extra.legs[kind]) for kind, leg in fetched.legs.items()}
        fetched = Fetched(legs, fetched.narrowed)
    return query, fetched
