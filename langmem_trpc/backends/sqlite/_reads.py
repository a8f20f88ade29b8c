"""The SQLite read executor: runs the shared read plans (`service/reads.py`).

A search's `EmbedQuery` runs with no transaction open. The first step that reads
the database opens one read transaction (a WAL snapshot) and every later step of
the plan runs inside it, so one plan reads one consistent state, as a search always
did: also the second `EmbedQuery` of a query naming a participant
(`FusionSettings.mask_names`), which needs the first fetch's candidates, so the
snapshot stays open while the model embeds the masked query (on a ":memory:"
database, whose reads take the write lock, a write waits for that embedding).

The one exception is a search that finds live memories stored without a vector of
the query's size: its first `FetchLegs` gives the snapshot up (nothing it read has
reached the plan yet), the memories are embedded, and a new snapshot answers that
same step.
"""

from __future__ import annotations

import sqlite3
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import BackendError
from ...service.reads import (
    CountCurrent,
    EmbedQuery,
    Fetched,
    FetchLegs,
    GetRow,
    ListUsers,
    ReadHistory,
    ReadPlan,
    ReadRows,
    ReadStep,
    dispatch_read,
)
from ...service.rules import unexpired, utcnow
from ...service.search import unit_vector
from ...types import Entry, HistoryEvent, UserKey
from . import _sql as sql
from ._query import SearchRun
from ._rows import DELETED, to_entry, user_state
from ._validity import conditions

if TYPE_CHECKING:
    from ._host import SQLiteHost


class _Backfill(Exception):
    """A search's first fetch found live memories without a vector of `dim` floats."""

    def __init__(self, user: UserKey, dim: int) -> None:
        super().__init__(user, dim)
        self.user, self.dim = user, dim


class SQLiteReads:
    """One read plan's run on a `SQLiteMemoryService`: the SQLite `ReadExecutor`, each
    storage step on the connection of the plan's one read transaction."""

    def __init__(self, service: SQLiteHost) -> None:
        self._svc = service
        self._conn: sqlite3.Connection
        self._models = ExitStack()
        """Holds the service's model lock (shared) from a search's first step to its end."""
        self._modelled = False
        self._sent = False
        """Whether a result read in the open snapshot reached the plan (no replay after)."""
        self._checked = False
        self._search: SearchRun | None = None
        self._backfilled = False

    def run(self, plan: ReadPlan) -> Any:
        """Drive `plan` to its end: steps before the first storage step one at a time,
        the rest in one read transaction."""
        with self._models:
            reply: object = None
            while True:
                try:
                    step = plan.send(reply)
                except StopIteration as done:
                    return done.value
                self._hold_model(step)
                if type(step) is not EmbedQuery:
                    return self._in_snapshot(plan, step)
                reply = dispatch_read(self, step)

    def _in_snapshot(self, plan: ReadPlan, step: ReadStep) -> Any:
        """The rest of `plan`, from `step` on, in one read transaction (a new one after
        a backfill, which only the snapshot's first step asks for)."""
        while True:
            try:
                return self._svc._db.read(lambda conn: self._rest(plan, step, conn))
            except _Backfill as missing:
                self._backfilled = True
                self._svc._backfill_embeddings(missing.user, missing.dim)

    def _rest(self, plan: ReadPlan, step: ReadStep, conn: sqlite3.Connection) -> Any:
        if self._sent:  # a busy retry cannot replay a plan that already read this snapshot
            raise BackendError("SQLite read failed: the database was busy mid-read")
        self._conn, self._checked, self._search = conn, False, None
        while True:
            reply = dispatch_read(self, step)
            self._sent = True
            try:
                step = plan.send(reply)
            except StopIteration as done:
                return done.value
            self._hold_model(step)

    def _hold_model(self, step: ReadStep) -> None:
        """A search holds the model lock shared from its query's embedding to its end: one
        embedder for the query and the stored vectors (a cutover waits)."""
        if not self._modelled and type(step) in (EmbedQuery, FetchLegs):
            self._models.enter_context(self._svc._model_lock.shared())
            self._modelled = True

    # -- the steps ----------------------------------------------------------------

    def get_row(self, step: GetRow) -> Entry | None:
        key = (step.user.app_name, step.user.user_id, step.memory_id)
        row = self._conn.execute(sql.SELECT_BY_ID, key).fetchone()
        if row is None or row[DELETED] is not None:
            return None
        return next(iter(unexpired([to_entry(row, step.user)])), None)

    def read_rows(self, step: ReadRows) -> list[Entry]:
        u: tuple[Any, ...] = (step.user.app_name, step.user.user_id)
        if step.deleted:
            query = sql.SELECT_DELETED
            if step.limit is not None:
                query, u = query + " LIMIT ?", (*u, step.limit)
            rows = self._conn.execute(query, u).fetchall()
            return [to_entry(row, step.user) for row in rows]
        now = utcnow()
        valid, valid_params = conditions(step.view, sql.to_us(now) or 0)
        query = sql.SELECT_READ + valid + sql.READ_ORDER
        u = (*u, *valid_params)
        if step.limit is not None:
            query, u = query + " LIMIT ?", (*u, step.limit)
        rows = self._conn.execute(query, u).fetchall()
        return unexpired((to_entry(row, step.user) for row in rows), now)

    def read_history(self, step: ReadHistory) -> list[HistoryEvent]:
        key = (step.user.app_name, step.user.user_id, step.memory_id)
        rows = self._conn.execute(sql.SELECT_HISTORY, key).fetchall()
        return [sql.row_to_event(row) for row in rows]

    def count_current(self, step: CountCurrent) -> int:
        state = user_state(self._conn, step.user)
        return 0 if state is None else int(state[2]) - int(state[5])  # superseded left out

    def list_users(self, step: ListUsers) -> list[UserKey]:
        query, params = sql.SELECT_USERS, tuple[str, ...]()
        if step.app_name is not None:
            query, params = query + " AND app_name = ?", (step.app_name,)
        rows = self._conn.execute(query + " ORDER BY app_name, user_id", params).fetchall()
        return [UserKey(app, uid) for app, uid in rows]

    def embed_query(self, step: EmbedQuery) -> np.ndarray | None:
        """The unit float32 query vector (None without an embedder)."""
        embeddings = self._svc._embeddings
        return None if embeddings is None else unit_vector(embeddings.embed_query(step.text))

    def fetch_legs(self, step: FetchLegs) -> Fetched:
        """Each kind's legs (`SearchRun.fetch`); the snapshot's first fetch checks the
        embedder (a re-embed's cutover refuses an old-model search) and asks for a
        backfill when live memories lack a vector of the query's size."""
        if not self._checked:
            self._svc.check_embedder(self._conn)
            self._checked = True
        query = step.query
        if query is not None and not isinstance(query, np.ndarray):
            raise TypeError("FetchLegs.query: expected the vector EmbedQuery returned")
        run = self._search
        if run is None or not run.serves(step.user, step.options, query):
            svc = self._svc
            run = SearchRun(
                svc._caches,
                self._conn,
                step.user,
                step.options,
                query,
                svc._keyword_candidates,
                svc.language,
            )
            self._search = run
        legs = {kind: run.fetch(kind, step.pool) for kind in step.kinds}
        if run.missing_vectors and not self._sent and not self._backfilled:
            raise _Backfill(step.user, run.missing_vectors)
        return Fetched(legs)
