"""PostgreSQL's read executor, sans-I/O: the shared read plans (`service.reads`) in SQL.

`SqlReads` has the methods of `reads.ReadExecutor`, each a plan over the statements
of `_ops.py` that returns the step's result, so the sync and async drivers run the
same SQL; `run` turns a whole read plan into its statements. A search is one
statement per tier (`_search_sql.build_search`, every kind of the tier at once);
for a user known to be heavy, a vector-only search reads only the ANN candidates
(`Fetched.narrowed`) and the shared plan asks again wide when they were not enough.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never, cast

from ...service import reads
from ...service.language import Language
from ...service.periods import TimeMentions
from ...service.rules import unexpired, utcnow
from ...service.search import Legs
from ...service.validity import view_of
from ...types import Entry, HistoryEvent, Kind, UserKey
from . import _identity, _search_sql, _sql
from ._cache import EntryCache
from ._ops import Embed, Plan, Sql

PAST_EXACT_MAX = 2**62
"""`exact_max` of a past view's search: no user is above it, so every vector leg is exact."""

SIZE_CACHE_MAX = 10_000
"""Users whose live count `SearchCache.sizes` keeps; when full it forgets them all."""


@dataclass
class SearchCache:
    """What searches of one service learn and keep: each user's live count, the
    dimension, the entries of candidate rows (by row version) and which memory
    texts say a time. Owned by the service; `clear()` (its `close()`) forgets all
    but the dimension."""

    dims: int | None = None
    sizes: dict[UserKey, int] = field(default_factory=dict)
    entries: EntryCache = field(default_factory=EntryCache)
    time_mentions: TimeMentions = field(default_factory=TimeMentions)

    def clear(self) -> None:
        self.sizes.clear()
        self.entries.clear()
        self.time_mentions.clear()


def run(
    plan: reads.ReadPlan, executor: SqlReads, generation: Callable[[], int] | None = None
) -> Plan[Any]:
    """The statements of a shared read plan: each step becomes its `SqlReads` method's.

    With `generation` (an embedder whose identity the database records), a plan that
    embeds its query (a search) runs inside `_identity.read_checked`: the query vector
    and the stored ones are of one embedder even across a re-embed's cutover."""
    try:
        first = next(plan)
    except StopIteration as done:
        return done.value
    steps = _statements(plan, first, executor)
    if generation is not None and isinstance(first, reads.EmbedQuery):
        return (yield from _identity.read_checked(steps, generation))
    return (yield from steps)


def _statements(plan: reads.ReadPlan, step: reads.ReadStep, executor: SqlReads) -> Plan[Any]:
    while True:
        reply = yield from executor.dispatch(step)
        try:
            step = plan.send(reply)
        except StopIteration as done:
            return done.value


class SqlReads:
    """PostgreSQL's read executor: the methods of `reads.ReadExecutor`, each a plan that
    yields the step's statements and returns its result.

    `embed`: the service has an embedder. `exact_max`: users with at most this many
    live rows get exact vector search (`exact_search_max`), every user for a past view
    (`PAST_EXACT_MAX`: near-duplicate versions link poorly in the HNSW graph, so a
    filtered index scan could miss the one version true at `as_of`)."""

    def __init__(self, embed: bool, exact_max: int, cache: SearchCache, language: Language) -> None:
        self._embed = embed
        self._exact_max = exact_max
        self._cache = cache
        self._language = language

    def dispatch(self, step: reads.ReadStep) -> Plan[object]:
        """The statements of `step`'s method; the one exhaustive match over the read steps."""
        match step:
            case reads.GetRow():
                return (yield from self.get_row(step))
            case reads.ReadRows():
                return (yield from self.read_rows(step))
            case reads.ReadHistory():
                return (yield from self.read_history(step))
            case reads.CountCurrent():
                return (yield from self.count_current(step))
            case reads.ListUsers():
                return (yield from self.list_users(step))
            case reads.EmbedQuery():
                return (yield from self.embed_query(step))
            case reads.FetchLegs():
                return (yield from self.fetch_legs(step))
            case _:
                assert_never(step)

    def get_row(self, step: reads.GetRow) -> Plan[Entry | None]:
        params = _sql.user_params(step.user, id=step.memory_id)
        rows = yield Sql(_sql.SELECT_LIVE_BY_ID, params)
        return next(iter(unexpired([_sql.entry_from_row(rows[0])])), None) if rows else None

    def read_rows(self, step: reads.ReadRows) -> Plan[list[Entry]]:
        """Live rows of the step's view, newest first, expired ones (TTL) left out; or
        the soft-deleted ones, most recently deleted first."""
        limit = step.limit if step.limit and step.limit > 0 else None
        if step.deleted:
            rows = yield Sql(_sql.READ_DELETED, _sql.user_params(step.user, limit=limit))
            return [_sql.entry_from_row(r) for r in rows]
        now = utcnow()
        params = _sql.user_params(step.user, limit=limit, **_sql.view_params(step.view, now))
        rows = yield Sql(_sql.READ_LIVE[_sql.view_name(step.view)], params)
        return unexpired((_sql.entry_from_row(r) for r in rows), now)

    def read_history(self, step: reads.ReadHistory) -> Plan[list[HistoryEvent]]:
        rows = yield Sql(_sql.SELECT_HISTORY, _sql.user_params(step.user, id=step.memory_id))
        return [_sql.history_from_row(r) for r in rows]

    def count_current(self, step: reads.CountCurrent) -> Plan[int]:
        rows = yield Sql(_sql.CURRENT_COUNT, _sql.user_params(step.user))
        return int(rows[0]["current_count"]) if rows else 0

    def list_users(self, step: reads.ListUsers) -> Plan[list[UserKey]]:
        rows = yield Sql(_sql.SELECT_USERS, {"app": step.app_name})
        return [UserKey(r["app_name"], r["user_id"]) for r in rows]

    def embed_query(self, step: reads.EmbedQuery) -> Plan[list[float] | None]:
        """The query's vector (None without an embedder); on first use, the stored
        dimension (a database set up by another process: the index expression needs it)."""
        if not self._embed:
            return None
        vectors = yield Embed([step.text], query=True)
        if self._cache.dims is None:
            found = yield Sql(_sql.EMBEDDING_DIMS)
            self._cache.dims = int(found[0]["dims"]) if found and found[0]["dims"] > 0 else None
        return list(vectors[0])

    def fetch_legs(self, step: reads.FetchLegs) -> Plan[reads.Fetched]:
        """One tier's legs in one statement: the fused one, or for a user whose last
        search counted more than `exact_max` rows a vector-only fetch of the HNSW
        candidates alone, 3 x `keep` each (room for dedupe; `Fetched.narrowed`), unless
        `wide`. Then the candidates' entries the cache lacks, in one more statement."""
        vector = cast("Sequence[float] | None", step.query)  # `embed_query`'s, untouched
        exact_max = self._exact_max if view_of(step.options).current else PAST_EXACT_MAX
        heavy = vector is not None and self._cache.sizes.get(step.user, 0) > exact_max
        query = _search_sql.build_search(
            step.user,
            step.options,
            step.kinds[0],
            step.pool,
            vector,
            exact_max,
            heavy=heavy,
            dims=self._cache.dims or len(vector or ()),
            language=self._language,
            fallback=len(step.kinds) > 1,
        )
        narrow = None
        if heavy and not step.options.hybrid and not step.wide:
            narrow = min(step.pool, 3 * step.keep)
            params = {**query.params, "pool": narrow}
            rows = yield Sql(_search_sql.ann_candidates_sql(len(step.kinds)), params)
        else:
            rows = yield Sql(query.sql, query.params)
        entries = yield from self._entries(step.user, rows)
        legs: dict[Kind | None, Legs] = {}
        for part, kind in enumerate(step.kinds):
            if narrow is not None:
                ann = _search_sql.vector_leg_from_ann(rows, entries, narrow, part)
                legs[kind] = Legs(vector=ann, keyword=[])
            else:
                legs[kind] = Legs(*_search_sql.legs_from_rows(query, rows, entries, part))
        return reads.Fetched(legs, narrow)

    def _entries(self, user: UserKey, rows: Sequence[_sql.Row]) -> Plan[dict[str, Entry]]:
        """The candidates' entries: from the cache at their row version, the rest in one
        fetch; remembers the user's live count the statement returned."""
        cache = self._cache
        if rows and rows[0]["n"] is not None:
            if user not in cache.sizes and len(cache.sizes) >= SIZE_CACHE_MAX:
                cache.sizes.clear()  # bounded: a forgotten heavy user costs one unpinned search
            cache.sizes[user] = int(rows[0]["n"])
        versions = {r["id"]: (r["version"], r["updated_at"]) for r in rows}  # ids repeat by part
        entries, missing = cache.entries.split(user, versions.items())
        if missing:
            for row in (yield Sql(_sql.ROWS_BY_IDS, _sql.user_params(user, ids=missing))):
                entry = _sql.entry_from_row(row)
                cache.entries.put(user, entry, (row["version"], row["updated_at"]))
                entries[entry.id] = entry
        return entries
