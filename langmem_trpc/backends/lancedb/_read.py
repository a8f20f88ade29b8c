"""The LanceDB `ReadExecutor`: the read steps over the cached rows and the table.

Rows come from the user's cache (the `records` table at the cache's version);
history and the user list are read from the table (`LanceDBMemoryService._scan`).
Each storage step runs under the service's lock, so it never sees half a plan's
commit; `EmbedQuery` runs outside it. A search's `FetchLegs` is served by the
user's index (`_index.py`): the keyword candidates scored with the shared BM25F
(`service.bm25.score_candidates`) and the cosine of every indexed vector, cut per
kind to the pool; the shared ranking (`service.reads.search`) does the rest. A
search's deeper tiers cut their pools from its first tier's scores: one plan ranks
one state, whatever was committed between two tiers.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np

from ...service import reads as r
from ...service.bm25 import QueryTerms, score_candidates
from ...service.rules import is_expired, utcnow
from ...service.search import Legs, passes_time, unit_vector
from ...service.validity import view_of
from ...types import Entry, HistoryEvent, Kind, UserKey
from ._records import HISTORY, MEMORY, digest, scope_of

if TYPE_CHECKING:
    from ._host import LanceDBHost

Scored = tuple[Sequence[Entry], np.ndarray]
"""Candidates and their scores, index for index."""


def _top(scored: Scored, keep: Callable[[Entry], bool], pool: int) -> list[tuple[Entry, float]]:
    """The best `pool` candidates `keep` accepts (scores clipped at 0); ties keep row
    order, as a stable sort does."""
    entries, scores = scored
    ranked = (i for i in np.argsort(-scores, kind="stable").tolist() if keep(entries[i]))
    return [(entries[i], max(0.0, float(scores[i]))) for i in itertools.islice(ranked, pool)]


class ReadRun:
    """One read plan's run (see the module docstring); a `ReadExecutor`."""

    def __init__(self, service: LanceDBHost) -> None:
        self._service = service
        self._scored: tuple[Scored, Scored | None] | None = None
        """A search's candidates, scored by its first `FetchLegs`: its deeper tiers
        rank the same state (one plan, one state), whatever was written since."""
        self._vectors: tuple[Sequence[Entry], np.ndarray] | None = None
        """The indexed entries and their vectors that state held, for a later fetch
        with another query vector (a masked query: `FusionSettings.mask_names`)."""
        self._query: object = None
        """The query vector `_scored`'s vector leg was scored with."""

    def execute(self, step: r.ReadStep) -> object:
        if type(step) is r.EmbedQuery:
            return self.embed_query(step)
        with self._service._lock:
            return r.dispatch_read(self, step)

    def get_row(self, step: r.GetRow) -> Entry | None:
        row = self._service._cached(step.user).rows.get(step.memory_id)
        if row is None or not row.live or is_expired(row.entry):
            return None
        return row.entry

    def read_rows(self, step: r.ReadRows) -> list[Entry]:
        rows = self._service._cached(step.user).rows.values()
        if step.deleted:
            gone = sorted((x for x in rows if not x.live), key=lambda x: (x.deleted_at, x.entry.id))
            return [x.entry for x in reversed(gone)][: step.limit]
        now = utcnow()
        shown = [x.entry for x in rows if x.shown(step.view, now)]
        shown.sort(key=lambda e: (e.updated_at, e.created_at, e.id), reverse=True)
        return shown[: step.limit]

    def read_history(self, step: r.ReadHistory) -> list[HistoryEvent]:
        scope, refh = scope_of(step.user), digest(step.memory_id)
        where = f"scope = '{scope}' AND rec = '{HISTORY}' AND refh = '{refh}'"
        found = self._service._scan(where, ["seq", "body"]).sort_by("seq").column("body")
        return [HistoryEvent.model_validate_json(body) for body in found.to_pylist()]

    def count_current(self, step: r.CountCurrent) -> int:
        return sum(1 for x in self._service._cached(step.user).rows.values() if x.current)

    def list_users(self, step: r.ListUsers) -> list[UserKey]:
        where = f"rec = '{MEMORY}' AND deleted IS NULL AND superseded IS NULL"
        found = self._service._scan(where, ["app", "user"]).to_pylist()
        keys = {(x["app"], x["user"]) for x in found if step.app_name in (None, x["app"])}
        return [UserKey(app, user) for app, user in sorted(keys)]

    def embed_query(self, step: r.EmbedQuery) -> np.ndarray | None:
        embeddings = self._service._embeddings
        return None if embeddings is None else unit_vector(embeddings.embed_query(step.text))

    def fetch_legs(self, step: r.FetchLegs) -> r.Fetched:
        """Each kind's legs from one pass over the user's index (the view filters before
        any pool is cut); a deeper tier cuts them from the first tier's candidates."""
        if self._scored is None:
            self._scored, self._query = self._score(step), step.query
        keyword, near = self._scored
        if step.query is not self._query and self._vectors is not None:
            near = self._near(step.query, *self._vectors)  # the same state, another vector
            self._scored, self._query = (keyword, near), step.query
        legs = {}
        for kind in step.kinds:
            keep = _keeper(kind, step.options.time_after, step.options.time_before)
            vectors = None if near is None else _top(near, keep, step.pool)
            legs[kind] = Legs(vectors, _top(keyword, keep, step.pool))
        return r.Fetched(legs)

    def _score(self, step: r.FetchLegs) -> tuple[Scored, Scored | None]:
        """Every keyword and vector candidate of the search, scored."""
        opts, svc = step.options, self._service
        vector = step.query if isinstance(step.query, np.ndarray) else None
        terms = QueryTerms.of(opts, svc.language)
        data = svc._cached(step.user)
        index = data.view(view_of(opts), svc.language, utcnow())
        pool, stats = index.keyword(data.rows, terms, data.live)
        entries, matrix = index.matrix
        if vector is not None and not opts.hybrid:
            pool = []
        scores = score_candidates(terms, [doc for _, doc in pool], stats)
        hit = np.flatnonzero(scores > 0)
        keyword: Scored = [pool[i][0] for i in hit.tolist()], scores[hit]
        self._vectors = entries, matrix
        return keyword, self._near(vector, entries, matrix)

    @staticmethod
    def _near(query: object, entries: Sequence[Entry], matrix: np.ndarray) -> Scored | None:
        """Every indexed vector's cosine with the unit `query` (None: keyword-only)."""
        if not isinstance(query, np.ndarray):
            return None
        return entries, matrix @ query if len(entries) else np.zeros(0, np.float32)


def _keeper(
    kind: Kind | None, after: datetime | None, before: datetime | None
) -> Callable[[Entry], bool]:
    """Whether a candidate is of `kind` (None: any) and in the search's time range."""

    def keep(entry: Entry) -> bool:
        if kind is not None and entry.memory.kind != kind:
            return False
        return passes_time(entry.memory.event_time, after, before)

    return keep
