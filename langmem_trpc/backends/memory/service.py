"""`InMemoryMemoryService`: the reference backend, for tests and notebooks.

Everything lives in dicts guarded by one lock; nothing survives the process.
Its behaviour is the specification the SQL backends are tested against.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from ...service import reads, steps, validity
from ...service.bm25 import CorpusStats, KeywordDoc, KeywordScorer, QueryTerms
from ...service.capabilities import Capability
from ...service.claims import ClaimOp, ClaimTable
from ...service.language import Language, resolve_language
from ...service.periods import TimeMentions
from ...service.protocol import SyncMemoryService
from ...service.reads import ReadPlan, dispatch_read
from ...service.rows import MemoryRow
from ...service.rules import (
    Limits,
    check_expiry,
    check_memory_id,
    check_read_limit,
    check_user,
    is_expired,
    utcnow,
)
from ...service.search import Legs, passes_time, unit_vector
from ...service.steps import Plan
from ...types import Entry, HistoryEvent, Kind, Memory, SearchOptions, UserKey

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["InMemoryMemoryService"]

T = TypeVar("T")


@dataclass
class _UserData:
    rows: dict[str, MemoryRow] = field(default_factory=dict)
    history: list[HistoryEvent] = field(default_factory=list)


def _remember(row: MemoryRow, undo: list[Callable[[], None]]) -> None:
    """Append the inverse of the next change to `row` (its fields as they are now)."""
    undo.append(partial(_restore, row, replace(row)))


def _restore(row: MemoryRow, before: MemoryRow) -> None:
    for name in (f.name for f in fields(MemoryRow)):
        setattr(row, name, getattr(before, name))


class _Run:
    """One plan's run: the in-memory `StepExecutor`. Outside its write section each
    step takes the service's lock; from `LockUser` on the run holds it. Every write
    appends its inverse to an undo log, which `rollback` replays."""

    def __init__(self, service: InMemoryMemoryService) -> None:
        self._service = service
        self._held = False
        self._undo: list[Callable[[], None]] = []

    def execute(self, step: steps.Step) -> object:
        """Perform one step; embedding runs outside the lock, every other step in it."""
        if type(step) is steps.Embed:
            return self.embed(step)
        with self._service._lock:  # re-entrant: held already from `LockUser` on
            return steps.dispatch(self, step)

    def rollback(self) -> None:
        with self._service._lock:
            for undo in reversed(self._undo):
                undo()
            self._undo.clear()

    def release(self) -> None:
        if self._held:
            self._held = False
            self._service._lock.release()

    # -- the steps (`StepExecutor`) ------------------------------------------------

    def now(self, step: steps.Now) -> datetime:
        return utcnow()

    def embed(self, step: steps.Embed) -> list[np.ndarray | None]:
        return self._service._embed_texts(step.texts)

    def lock_user(self, step: steps.LockUser) -> None:
        if not self._held:
            self._service._lock.acquire()
            self._held = True

    def find_by_id(self, step: steps.FindById) -> steps.Stored | None:
        data = self._service._find(step.user)
        return _stored(data.rows.get(step.memory_id) if data is not None else None)

    def find_live_by_fingerprint(self, step: steps.FindLiveByFingerprint) -> steps.Stored | None:
        fp, skip = step.fingerprint, step.exclude_id
        rows = self._service._rows(step.user)
        found = (r for r in rows if r.fingerprint == fp and r.current and r.entry.id != skip)
        return _stored(next(found, None))

    def find_by_fingerprint(self, step: steps.FindByFingerprint) -> steps.Stored | None:
        same = [
            r
            for r in self._service._rows(step.user)
            if r.fingerprint == step.fingerprint and r.entry.superseded_by is None
        ]
        return _stored(next((r for r in same if r.live), same[0] if same else None))

    def find_predecessor(self, step: steps.FindPredecessor) -> steps.Stored | None:
        rows = self._service._rows(step.user)
        before = [
            r
            for r in rows
            if r.live and r.entry.superseded_by == step.memory_id and r.entry.id not in step.exclude
        ]
        return _stored(max(before, key=lambda r: r.seq) if before else None)

    def known_fingerprints(self, step: steps.KnownFingerprints) -> set[str]:
        return {r.fingerprint for r in self._service._rows(step.user)} & step.fingerprints

    def count_live(self, step: steps.CountLive) -> int:
        return sum(1 for r in self._service._rows(step.user) if r.live)

    def insert(self, step: steps.Insert) -> None:
        data = self._service._data(step.user)
        for new in step.rows:
            row = MemoryRow(
                entry=new.entry,
                fingerprint=new.fingerprint,
                vector=cast("np.ndarray | None", new.vector),
                keyed=new.keyed,
            )
            self._service._touch(row, new.entry)
            data.rows[new.entry.id] = row
            self._undo.append(lambda i=new.entry.id: data.rows.__delitem__(i))  # type: ignore[misc]

    def rewrite(self, step: steps.Rewrite) -> None:
        row = _handle(step.target)
        _remember(row, self._undo)
        row.fingerprint, row.deleted_at = step.fingerprint, None
        if not isinstance(step.vector, steps.Keep):
            row.vector = cast("np.ndarray | None", step.vector)
        if not isinstance(step.expires_at, steps.Keep):
            row.entry = row.entry.model_copy(update={"expires_at": step.expires_at})
        self._rewritten(row, step.memory, step.at)

    def set_topics(self, step: steps.SetTopics) -> None:
        row = _handle(step.target)
        _remember(row, self._undo)
        memory = row.entry.memory.model_copy(update={"topics": list(step.topics)})
        self._rewritten(row, memory, step.at)

    def set_validity(self, step: steps.SetValidity) -> None:
        row = _handle(step.target)
        _remember(row, self._undo)
        fields = {"valid_to": step.valid_to, "superseded_by": step.superseded_by}
        self._service._touch(row, row.entry.model_copy(update={**fields, "updated_at": step.at}))

    def _rewritten(self, row: MemoryRow, memory: Memory, at: datetime) -> None:
        self._service._touch(row, row.entry.model_copy(update={"memory": memory, "updated_at": at}))
        row.doc = None

    def soft_delete(self, step: steps.SoftDelete) -> list[steps.Gone]:
        live = self._service._live(self._service._data(step.user))
        wanted = None if step.memory_ids is None else set(step.memory_ids)
        return self._delete([r for r in live if wanted is None or r.entry.id in wanted], step.at)

    def evict_oldest(self, step: steps.EvictOldest) -> steps.Gone | None:
        live = self._service._live(self._service._data(step.user))
        gone = self._delete([min(live, key=lambda r: r.seq)] if live else [], step.at)
        return gone[0] if gone else None

    def _delete(self, victims: list[MemoryRow], at: datetime) -> list[steps.Gone]:
        for row in victims:
            _remember(row, self._undo)
            row.deleted_at = at
        return [(r.entry.id, r.entry.text) for r in victims]

    def record_history(self, step: steps.RecordHistory) -> None:
        history = self._service._data(step.user).history
        size = len(history)
        history.extend(step.events)
        self._undo.append(lambda: history.__delitem__(slice(size, None)))

    def purge(self, step: steps.Purge) -> int:
        service, user, undo = self._service, step.user, self._undo
        data = service._find(user)
        if step.memory_id is None:
            undo.append(service._claims.purge(user))
            if data is None:
                return 0
            del service._users[user]
            undo.append(lambda: service._users.__setitem__(user, data))
            return len(data.rows)
        if data is None:
            return 0
        removed = data.rows.pop(step.memory_id, None)
        history = data.history
        data.history = [h for h in history if h.memory_id != step.memory_id]

        def back() -> None:
            data.history = history
            if removed is not None:
                data.rows[step.memory_id or ""] = removed

        undo.append(back)
        return 1 if removed else 0


def _stored(row: MemoryRow | None) -> steps.Stored | None:
    return None if row is None else row.stored()


def _handle(target: steps.Stored) -> MemoryRow:
    """The row a `Stored` this executor returned refers to."""
    return cast(MemoryRow, target.handle)


def _visible(data: _UserData | None, view: validity.View) -> list[MemoryRow]:
    """The live, unexpired rows `view` shows (`validity.View.visible`)."""
    if data is None:
        return []
    now = utcnow()
    return [r for r in data.rows.values() if r.shown(view, now)]


@dataclass
class _Corpus:
    """One search's candidates, read once under the lock by the plan's first
    `FetchLegs` and reused by its deeper tiers, so the plan ranks one state."""

    user: UserKey
    options: SearchOptions
    scorer: KeywordScorer
    """BM25F over the statistics of every live row, as SQL keeps them."""
    shown: list[tuple[Entry, np.ndarray | None, KeywordDoc]]
    """The live rows the search's view shows: filtered before any pool is cut."""

    @classmethod
    def of(cls, service: InMemoryMemoryService, user: UserKey, options: SearchOptions) -> _Corpus:
        language, view, now = service.language, validity.view_of(options), utcnow()
        with service._lock:
            data = service._find(user)
            rows = service._live(data) if data else []
            snapshot = [(r.entry, r.vector, r.keyword_doc(language)) for r in rows]
        scorer = KeywordScorer.of(
            QueryTerms.of(options, language), CorpusStats.from_docs(doc for _, _, doc in snapshot)
        )
        shown = [hit for hit in snapshot if view.visible(hit[0], now)]
        return cls(user, options, scorer, shown)

    def serves(self, user: UserKey, options: SearchOptions) -> bool:
        """Whether a fetch of this search can use the corpus: the same user, query and
        view. A first tier's masked-query or period fetch (`reads.search`) differs only in
        `hybrid` and the time range, which `legs` reads from the fetch's own options."""
        mine = self.options
        return (
            user == self.user
            and (options is mine or (options.query, options.fusion) == (mine.query, mine.fusion))
            and validity.view_of(options) == validity.view_of(mine)
        )

    def legs(
        self, kind: Kind | None, pool: int, query: np.ndarray | None, options: SearchOptions
    ) -> Legs:
        """The best `pool` candidates of each leg among the rows of `kind` in the time
        range of `options`; no vector leg without a query vector, no keyword leg for a
        vector-only fetch."""
        after, before = options.time_after, options.time_before
        pick = [
            (entry, vector, doc)
            for entry, vector, doc in self.shown
            if (kind is None or entry.memory.kind == kind)
            and passes_time(entry.memory.event_time, after, before)
        ]
        keyword: list[tuple[Entry, float]] = []
        if options.hybrid or query is None:
            keyword = [(entry, self.scorer.score(doc)) for entry, _, doc in pick]
            keyword = sorted((h for h in keyword if h[1] > 0), key=lambda h: -h[1])[:pool]
        if query is None:
            return Legs(vector=None, keyword=keyword)
        vector = [(e, max(0.0, float(v @ query))) for e, v, _ in pick if v is not None]
        return Legs(vector=sorted(vector, key=lambda h: -h[1])[:pool], keyword=keyword)


class _Reads:
    """One read plan's run: the in-memory `ReadExecutor`. Each step reads under the
    service's lock (a search's tiers share the first tier's `_Corpus`); embedding
    the query runs outside it."""

    def __init__(self, service: InMemoryMemoryService) -> None:
        self._service = service
        self._corpus: _Corpus | None = None

    def get_row(self, step: reads.GetRow) -> Entry | None:
        with self._service._lock:
            data = self._service._find(step.user)
            row = data.rows.get(step.memory_id) if data else None
            live = row is not None and row.live and not is_expired(row.entry)
            return row.entry if row is not None and live else None

    def read_rows(self, step: reads.ReadRows) -> list[Entry]:
        if step.deleted:
            return self._deleted(step.user, step.limit)
        with self._service._lock:
            entries = [r.entry for r in _visible(self._service._find(step.user), step.view)]
        entries.sort(key=lambda e: (e.updated_at, e.created_at, e.id), reverse=True)
        return entries[: step.limit]

    def _deleted(self, user: UserKey, limit: int | None) -> list[Entry]:
        with self._service._lock:
            data = self._service._find(user)
            rows = [r for r in data.rows.values() if not r.live] if data else []
        rows.sort(key=lambda r: (r.deleted_at, r.entry.id), reverse=True)
        return [r.entry for r in rows][:limit]

    def read_history(self, step: reads.ReadHistory) -> list[HistoryEvent]:
        with self._service._lock:
            data = self._service._find(step.user)
            return [h for h in data.history if h.memory_id == step.memory_id] if data else []

    def count_current(self, step: reads.CountCurrent) -> int:
        with self._service._lock:
            data = self._service._find(step.user)
            return sum(1 for r in data.rows.values() if r.current) if data else 0

    def list_users(self, step: reads.ListUsers) -> list[UserKey]:
        service, app_name = self._service, step.app_name
        with service._lock:
            keys = [k for k, d in service._users.items() if any(r.current for r in d.rows.values())]
        return sorted(
            (k for k in keys if app_name is None or k.app_name == app_name),
            key=lambda k: (k.app_name, k.user_id),
        )

    def embed_query(self, step: reads.EmbedQuery) -> np.ndarray | None:
        embeddings = self._service._embeddings
        return None if embeddings is None else unit_vector(embeddings.embed_query(step.text))

    def fetch_legs(self, step: reads.FetchLegs) -> reads.Fetched:
        corpus = self._corpus
        if corpus is None or not corpus.serves(step.user, step.options):
            corpus = self._corpus = _Corpus.of(self._service, step.user, step.options)
        query = cast("np.ndarray | None", step.query)
        legs = {kind: corpus.legs(kind, step.pool, query, step.options) for kind in step.kinds}
        return reads.Fetched(legs)


class InMemoryMemoryService(SyncMemoryService):
    """Reference implementation with the full contract (soft delete, history, cursors).

    Args:
        embeddings: optional LangChain `Embeddings`; without one search is keyword-only.
        limits: text, topic and capacity limits (see `Limits`).
        language: the tokenizer's language (a Snowball name such as "german", or a
            `Language`; English by default): stemming, stopwords and search cues.
    """

    def __init__(
        self,
        embeddings: Embeddings | None = None,
        *,
        limits: Limits | None = None,
        language: str | Language = "english",
    ) -> None:
        self.language = resolve_language(language)
        self._embeddings = embeddings
        self._limits = limits or Limits()
        self._users: dict[UserKey, _UserData] = {}
        self._lock = threading.RLock()
        self._writes = itertools.count(1)
        self._claims = ClaimTable(self._lock)
        self._time_mentions = TimeMentions(self.language)

    @property
    def capabilities(self) -> frozenset[Capability]:
        """VECTORS with an embedder; nothing outlives the process."""
        return frozenset({Capability.VECTORS}) if self._embeddings is not None else frozenset()

    # -- helpers ------------------------------------------------------------

    def _find(self, user: UserKey) -> _UserData | None:
        """The user's data, if any (a durable backend loads it here)."""
        return self._users.get(user)

    def _data(self, user: UserKey) -> _UserData:
        return self._find(user) or self._users.setdefault(user, _UserData())

    def _touch(self, row: MemoryRow, entry: Entry) -> Entry:
        """Store `entry` in `row` as its newest write (under the lock); returns it."""
        row.entry, row.seq = entry, next(self._writes)
        return entry

    def _live(self, data: _UserData) -> list[MemoryRow]:
        return [r for r in data.rows.values() if r.live]

    # -- writes: the step executor ---------------------------------------------

    def run_plan(self, plan: Plan[T]) -> T:
        """Run a write plan: steps after `LockUser` hold the service's lock, and a
        plan that raises has its writes undone."""
        run = _Run(self)
        try:
            return steps.drive(plan, run.execute)
        except BaseException:
            run.rollback()
            raise
        finally:
            run.release()

    def _embed_texts(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        if self._embeddings is None:
            return [None] * len(texts)
        return [unit_vector(v) for v in self._embeddings.embed_documents(list(texts))]

    def _rows(self, user: UserKey) -> Iterable[MemoryRow]:
        data = self._find(user)
        return data.rows.values() if data is not None else ()

    # -- reads: the read executor ----------------------------------------------

    def run_read(self, plan: ReadPlan) -> Any:
        """Run a read plan (`service.reads`): each step reads under the service's lock."""
        reader = _Reads(self)
        return steps.drive(plan, lambda step: dispatch_read(reader, step))

    @property
    def time_mentions(self) -> TimeMentions:
        """This instance's `says_time` cache, which search ranking reads."""
        return self._time_mentions

    # -- expiry -------------------------------------------------------------

    def set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | str | None) -> bool:
        user = check_user(user)
        check_memory_id(memory_id)
        at = check_expiry(expires_at)
        with self._lock:
            data = self._find(user)
            row = data.rows.get(memory_id) if data else None
            if row is None or not row.live:
                return False
            row.entry = row.entry.model_copy(update={"expires_at": at})
            return True

    def expired(self, user: UserKey, limit: int | None = None) -> list[str]:
        user, limit = check_user(user), check_read_limit(limit)
        now = utcnow()
        with self._lock:
            data = self._find(user)
            rows = [r for r in self._live(data) if is_expired(r.entry, now)] if data else []
        rows.sort(key=lambda r: (r.entry.expires_at, r.entry.id))
        return [r.entry.id for r in rows][:limit]

    # -- cursors, claims and dead letters ----------------------------------------

    def run_claim_op(self, op: ClaimOp[T]) -> T:
        """Run the op on the service's `ClaimTable`, under the service's lock."""
        result: T = self._claims.apply(op)
        return result
