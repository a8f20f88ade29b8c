"""The SQLite step executor: runs the shared write plans (`service/_plans.py`).

Steps before `LockUser` run one at a time (reads in their own read
transaction, embedding with no transaction open); from `LockUser` on, the rest
of the plan runs inside one `BEGIN IMMEDIATE` write transaction, which commits
when the plan returns and rolls back when it raises. A run whose write section
only appended rows tells the vector cache after the commit, so the next search
extends the cached matrix instead of reloading it.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, TypeVar

from ...errors import BackendError
from ...service import _steps as steps
from ...service._steps import Plan
from ...types import UserKey
from . import _sql as sql
from ._claims import purge_claims
from ._expiry import restore_expiry
from ._keyword import scope_prefix, topics_document
from ._rows import (
    CONTENT_DOC,
    DELETED,
    KEYED,
    Prepared,
    count_inserted,
    index_row,
    insert_new,
    known_fingerprints,
    note_appended,
    to_entry,
    unindex_row,
    user_state,
    write_content,
)
from ._vectors import Appended

if TYPE_CHECKING:
    from .service import SQLiteMemoryService

T = TypeVar("T")

_NewRows = list[tuple[int, str, int | None, bytes | None]]


class SQLiteRun:
    """One plan's run on a `SQLiteMemoryService`."""

    def __init__(self, service: SQLiteMemoryService) -> None:
        self._svc = service
        self._entered = False
        self._user: UserKey | None = None
        self._before: tuple[str, int] | None = None
        self._appends: _NewRows = []
        self._append_only = True
        self._appended: list[Appended] = []
        self._purged: UserKey | None = None

    def run(self, plan: Plan[T]) -> T:
        """Drive `plan` to its end; after a committed write section, update the caches."""
        reply: Any = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as done:
                result: T = done.value
                return result
            if isinstance(step, steps.LockUser):
                self._user = step.user
                result = self._svc._db.write(lambda conn: self._locked(plan, conn))
                self._after_commit(step.user)
                return result
            if isinstance(step, (steps.Embed, steps.Now)):
                reply = self._free(step)
            else:
                reply = self._svc._db.read(lambda conn: self.execute(conn, step))  # noqa: B023

    def _locked(self, plan: Plan[T], conn: sqlite3.Connection) -> T:
        if self._entered:  # a busy retry cannot replay a plan that already ran
            raise BackendError("SQLite write failed: the database was busy mid-transaction")
        self._entered = True
        assert self._user is not None
        cached = self._svc._caches.vectors.holds(self._user)  # else no append to record
        if cached:
            state = user_state(conn, self._user)
            self._before = None if state is None else (state[0], state[1])
        result = steps.drive(plan, lambda step: self.execute(conn, step))
        if cached and self._append_only and self._appends:
            note_appended(conn, self._user, self._before, self._appends, self._appended)
        return result

    def _after_commit(self, user: UserKey) -> None:
        if self._purged is not None:
            self._svc._caches.drop(self._purged)
        elif self._appended:
            self._svc._caches.vectors.append(user, self._appended[0])

    def _free(self, step: steps.Embed | steps.Now) -> Any:
        if isinstance(step, steps.Embed):
            return self._svc._embed(step.texts)
        return self._svc._now()

    def execute(self, conn: sqlite3.Connection, step: steps.Step) -> Any:
        """Perform one step on `conn` (inside the write transaction after `LockUser`)."""
        if isinstance(step, (steps.Embed, steps.Now)):
            return self._free(step)
        if isinstance(step, steps.LockUser):
            return None
        u = (step.user.app_name, step.user.user_id)
        if isinstance(step, steps.FindById):
            row = conn.execute(sql.SELECT_BY_ID, (*u, step.memory_id)).fetchone()
            return _stored(row, step.user, row is not None and row[DELETED] is not None, None)
        if isinstance(step, steps.FindLiveByFingerprint):
            query = sql.SELECT_LIVE_BY_FINGERPRINT
            params: tuple[object, ...] = (*u, bytes.fromhex(step.fingerprint))
            if step.exclude_id is not None:
                query, params = query + " AND id != ?", (*params, step.exclude_id)
            row = conn.execute(query, params).fetchone()
            return _stored(row, step.user, False, row[CONTENT_DOC] if row else None)
        if isinstance(step, steps.FindDeletedByFingerprint):
            deleted = (*u, bytes.fromhex(step.fingerprint))
            row = conn.execute(sql.SELECT_DELETED_BY_FINGERPRINT, deleted).fetchone()
            return _stored(row, step.user, True, None)
        if isinstance(step, steps.KnownFingerprints):
            found = known_fingerprints(
                conn, step.user, {bytes.fromhex(f) for f in step.fingerprints}
            )
            return {fp.hex() for fp in found}
        if isinstance(step, steps.CountLive):
            state = user_state(conn, step.user)
            return 0 if state is None else int(state[2])
        if isinstance(step, steps.RecordHistory):
            rows = [
                (*u, e.memory_id, e.operation.value, e.text_before, e.text_after,
                 sql.to_us(e.at), sql.source_json(e.source))
                for e in step.events
            ]  # fmt: skip
            if len(rows) == 1:
                conn.execute(sql.INSERT_HISTORY, rows[0])
            else:
                conn.executemany(sql.INSERT_HISTORY, rows)
            return None
        if isinstance(step, steps.Insert):
            return self._insert(conn, step)
        if isinstance(step, steps.Purge):
            return self._purge(conn, step)
        self._append_only = False
        assert isinstance(
            step, (steps.Rewrite, steps.SetTopics, steps.EvictOldest, steps.SoftDelete)
        )
        return self._change(conn, step)

    def _insert(self, conn: sqlite3.Connection, step: steps.Insert) -> None:
        user, language = step.user, self._svc.language
        rows = [(Prepared.of(r.entry.memory, r.fingerprint, language), r) for r in step.rows]
        if len(rows) == 1:
            p, new = rows[0]
            self._appends.append((_insert_one(conn, user, p, new), p.columns[1], p.columns[2],
                                  new.vector))  # fmt: skip
        else:
            pending = [(p, new.vector, new.entry, new.keyed) for p, new in rows]
            self._appends.extend(insert_new(conn, user, pending))
        for _, new in rows:
            if new.entry.expires_at is not None:
                restore_expiry(conn, (user.app_name, user.user_id), new.entry)

    def _change(
        self,
        conn: sqlite3.Connection,
        step: steps.Rewrite | steps.SetTopics | steps.EvictOldest | steps.SoftDelete,
    ) -> Any:
        user, at = step.user, sql.to_us(step.at)
        assert at is not None
        if isinstance(step, steps.Rewrite):
            p = Prepared.of(step.memory, step.fingerprint, self._svc.language)
            write_content(conn, user, step.target.handle[0], p, step.vector, at)
            return None
        if isinstance(step, steps.SetTopics):
            rid, content_doc = step.target.handle
            if content_doc is None:
                content_doc = conn.execute(sql.SELECT_CONTENT_DOC, (rid,)).fetchone()[0]
            topic_doc = topics_document(list(step.topics), self._svc.language)
            unindex_row(conn, user, rid)
            conn.execute(
                sql.UPDATE_TOPICS,
                (sql.list_json(list(step.topics)), topic_doc, len(topic_doc.split()), at, rid),
            )
            index_row(conn, user, rid, content_doc, topic_doc)
            return None
        u = (user.app_name, user.user_id)
        if isinstance(step, steps.EvictOldest):
            oldest = conn.execute(sql.SELECT_OLDEST_LIVE, u).fetchone()
            if oldest is None:
                return None
            unindex_row(conn, user, oldest[0])
            conn.execute(sql.SOFT_DELETE, (at, oldest[0]))
            return (oldest[1], oldest[2])
        assert isinstance(step, steps.SoftDelete)
        return _soft_delete(conn, user, step.memory_ids, at)

    def _purge(self, conn: sqlite3.Connection, step: steps.Purge) -> int:
        user = step.user
        u = (user.app_name, user.user_id)
        if step.memory_id is not None:
            self._append_only = False
            row = conn.execute(sql.SELECT_RID_BY_ID, (*u, step.memory_id)).fetchone()
            conn.execute(sql.DELETE_HISTORY, (*u, step.memory_id))
            if row is None:
                return 0
            unindex_row(conn, user, row[0])
            conn.execute(sql.DELETE_BY_RID, (row[0],))
            return 1
        count: int = conn.execute(sql.COUNT_USER_ROWS, u).fetchone()[0]
        prefix = scope_prefix(user)
        conn.execute(sql.FTS_UNINDEX_USER, (prefix, prefix, *u))
        conn.execute(sql.DELETE_USER, u)
        conn.execute(sql.DELETE_USER_HISTORY, u)
        conn.execute(sql.DELETE_USER_CURSORS, u)
        purge_claims(conn, user)
        self._svc._file_claims.purge(user.app_name, user.user_id)
        conn.execute(sql.DELETE_STATE, u)
        self._purged = user
        return count


def _stored(row: Any, user: UserKey, deleted: bool, content_doc: str | None) -> steps.Stored | None:
    if row is None:
        return None
    return steps.Stored(to_entry(row, user), bool(row[KEYED]), deleted, (row[0], content_doc))


def _insert_one(conn: sqlite3.Connection, user: UserKey, p: Prepared, new: steps.NewRow) -> int:
    at, updated = sql.to_us(new.entry.created_at), sql.to_us(new.entry.updated_at)
    cursor = conn.execute(
        sql.INSERT_MEMORY,
        (user.app_name, user.user_id, new.entry.id, p.memory.text, p.fingerprint, new.keyed,
         *p.columns, new.vector, p.content_doc, p.topic_doc, p.content_len, p.topic_len, at,
         updated),
    )  # fmt: skip
    assert cursor.lastrowid is not None
    count_inserted(conn, user, 1, p.content_len, p.topic_len)
    index_row(conn, user, cursor.lastrowid, p.content_doc, p.topic_doc)
    return cursor.lastrowid


def _soft_delete(
    conn: sqlite3.Connection, user: UserKey, ids: tuple[str, ...] | None, at: int
) -> list[tuple[str, str]]:
    u = (user.app_name, user.user_id)
    if ids is None:
        rows = conn.execute(sql.SELECT_LIVE_TEXT, u).fetchall()
        if rows:
            prefix = scope_prefix(user)
            conn.execute(sql.FTS_UNINDEX_USER, (prefix, prefix, *u))
            conn.execute(sql.SOFT_DELETE_ALL, (at, *u))
        return [(mid, text) for _, mid, text in rows]
    gone: list[tuple[str, str]] = []
    for memory_id in ids:
        row = conn.execute(sql.SELECT_BY_ID, (*u, memory_id)).fetchone()
        if row is None or row[DELETED] is not None:
            continue
        unindex_row(conn, user, row[0])
        conn.execute(sql.SOFT_DELETE, (at, row[0]))
        gone.append((memory_id, row[2]))
    return gone
