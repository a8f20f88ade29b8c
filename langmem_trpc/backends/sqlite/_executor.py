"""The SQLite step executor: runs the shared write plans (`service/plans.py`).

Steps before `LockUser` run one at a time (reads in their own read
transaction, embedding with no transaction open); from `LockUser` on, the rest
of the plan runs inside one `BEGIN IMMEDIATE` write transaction, which commits
when the plan returns and rolls back when it raises. A run whose write section
only appended rows tells the vector cache after the commit, so the next search
extends the cached matrix instead of reloading it.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ...errors import BackendError
from ...service import steps
from ...service.documents import memory_keys, topics_document
from ...service.steps import Plan
from ...types import Operation, UserKey
from . import _sql as sql
from ._claims import purge_claims
from ._expiry import restore_expiry, set_row_expiry
from ._keyword import scope_prefix
from ._rows import (
    CONTENT_DOC,
    DELETED,
    FOUND_CONTENT_DOC,
    KEYED,
    Prepared,
    count_inserted,
    index_row,
    insert_new,
    new_row,
    to_entry,
    unindex_row,
    user_state,
    validity_params,
    write_content,
)
from ._vectors import Appended, NewRow

if TYPE_CHECKING:
    from ._host import SQLiteHost

T = TypeVar("T")

_NewRows = list[NewRow]


class SQLiteRun:
    """One plan's run on a `SQLiteMemoryService`: the SQLite `StepExecutor`, each
    step on the connection of its transaction."""

    def __init__(self, service: SQLiteHost) -> None:
        self._svc = service
        self._conn: sqlite3.Connection
        self._entered = False
        self._user: UserKey | None = None
        self._before: tuple[str, int] | None = None
        self._appends: _NewRows = []
        self._cached = False
        """The user's vectors are cached: inserted rows are kept to append to them."""
        self._inserted: tuple[int, steps.Insert] | None = None
        """(first rid, step) of a multi-row `Insert` that was the step just run."""
        self._append_only = True
        self._appended: list[Appended] = []
        self._purged: UserKey | None = None

    def run(self, plan: Plan[T]) -> T:
        """Drive `plan` to its end; after a committed write section, update the caches."""
        reply: object = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as done:
                result: T = done.value
                return result
            if type(step) is steps.LockUser:  # the rest of the plan runs in one transaction
                self._user = step.user
                result = self._svc._db.write(lambda conn: self._locked(plan, conn))
                self._after_commit(step.user)
                return result
            if type(step) is steps.Embed or type(step) is steps.Now:  # no transaction
                reply = steps.dispatch(self, step)
            else:
                reply = self._svc._db.read(lambda conn: self.execute(conn, step))  # noqa: B023

    def _locked(self, plan: Plan[T], conn: sqlite3.Connection) -> T:
        if self._entered:  # a busy retry cannot replay a plan that already ran
            raise BackendError("SQLite write failed: the database was busy mid-transaction")
        self._entered = True
        assert self._user is not None
        self._conn = conn
        self._svc.check_embedder(conn)  # a re-embed's cutover refuses old-model writes
        cached = self._cached = self._svc._caches.vectors.holds(self._user)  # else no append
        if cached:
            state = user_state(conn, self._user)
            self._before = None if state is None else (state[0], state[1])
        reply: object = None
        try:
            while True:
                step = plan.send(reply)
                reply = steps.dispatch(self, step)
                if type(step) is not steps.Insert:
                    self._inserted = None  # `record_history` reads rows of the step before only
        except StopIteration as done:
            result: T = done.value
        if cached and self._append_only and self._appends and self._before is not None:
            after = user_state(conn, self._user)  # the user's stamps around the append
            if after is not None:
                self._appended.append(Appended(self._before, (after[0], after[1]), self._appends))
        return result

    def _after_commit(self, user: UserKey) -> None:
        if self._purged is not None:
            self._svc._caches.drop(self._purged)
        elif self._appended:
            self._svc._caches.vectors.append(user, self._appended[0])

    def execute(self, conn: sqlite3.Connection, step: steps.Step) -> object:
        """Perform one step on `conn` (a read transaction's, before `LockUser`)."""
        self._conn = conn
        return steps.dispatch(self, step)

    def now(self, step: steps.Now) -> datetime:
        return self._svc._now()

    def embed(self, step: steps.Embed) -> list[bytes | None]:
        return self._svc._embed(step.texts)

    def lock_user(self, step: steps.LockUser) -> None:
        """Nothing to do here: `run` opens the write transaction when the plan yields it."""

    def find_by_id(self, step: steps.FindById) -> steps.Stored | None:
        u = (step.user.app_name, step.user.user_id, step.memory_id)
        row = self._conn.execute(sql.SELECT_BY_ID, u).fetchone()
        return _stored(row, step.user, row is not None and row[DELETED] is not None, None)

    def find_live_by_fingerprint(self, step: steps.FindLiveByFingerprint) -> steps.Stored | None:
        query = sql.SELECT_LIVE_BY_FINGERPRINT
        params: tuple[object, ...] = (
            step.user.app_name,
            step.user.user_id,
            bytes.fromhex(step.fingerprint),
        )
        if step.exclude_id is not None:
            query, params = query + " AND id != ?", (*params, step.exclude_id)
        row = self._conn.execute(query, params).fetchone()
        return _stored(row, step.user, False, row[CONTENT_DOC] if row else None)

    def find_by_fingerprint(self, step: steps.FindByFingerprint) -> steps.Stored | None:
        key = (step.user.app_name, step.user.user_id, bytes.fromhex(step.fingerprint))
        row = self._conn.execute(sql.SELECT_BY_FINGERPRINT, key).fetchone()
        if row is None:
            return None
        return _stored(row, step.user, row[DELETED] is not None, row[FOUND_CONTENT_DOC])

    def known_fingerprints(self, step: steps.KnownFingerprints) -> set[str]:
        u = (step.user.app_name, step.user.user_id)
        wanted = [bytes.fromhex(f) for f in step.fingerprints]
        known: set[str] = set()
        for start in range(0, len(wanted), 500):  # at most 500 parameters a statement
            chunk = wanted[start : start + 500]
            query = sql.KNOWN_FINGERPRINTS + f"({', '.join('?' * len(chunk))})"
            known.update(fp.hex() for (fp,) in self._conn.execute(query, (*u, *chunk)))
        return known

    def count_live(self, step: steps.CountLive) -> int:
        state = user_state(self._conn, step.user)
        return 0 if state is None else int(state[2])

    def record_history(self, step: steps.RecordHistory) -> None:
        """One executemany; the ADD events of the rows the step before inserted (what
        an add's batch records) are one statement that reads them from the rows."""
        inserted = self._inserted
        if inserted is not None and _adds_of(step, inserted[1]):
            first, source = inserted[0], sql.source_json(step.events[0].source)
            self._conn.execute(
                sql.HISTORY_OF_INSERTED, (source, first, first + len(step.events) - 1)
            )
            return
        u = (step.user.app_name, step.user.user_id)
        sources: dict[int, str | None] = {}  # a batch's events share one source: one JSON
        rows = []
        for e in step.events:
            if id(e.source) not in sources:
                sources[id(e.source)] = sql.source_json(e.source)
            row = (*u, e.memory_id, e.operation.value, e.text_before, e.text_after)
            rows.append((*row, sql.to_us(e.at), sources[id(e.source)]))
        if len(rows) == 1:
            self._conn.execute(sql.INSERT_HISTORY, rows[0])
        else:
            self._conn.executemany(sql.INSERT_HISTORY, rows)

    def insert(self, step: steps.Insert) -> None:
        conn, user, language = self._conn, step.user, self._svc.language
        rows = [(Prepared.of(r.entry.memory, r.fingerprint, language), r) for r in step.rows]
        self._inserted = None
        if len(rows) == 1:  # one INSERT (`insert_new`'s executemany first reads two counters)
            p, new = rows[0]
            validity = validity_params(new.entry)
            rid = conn.execute(
                sql.INSERT_MEMORY,
                (
                    user.app_name,
                    user.user_id,
                    new.entry.id,
                    p.memory.text,
                    p.fingerprint,
                    new.keyed,
                    *p.columns,
                    new.vector,
                    p.content_doc,
                    p.topic_doc,
                    p.content_len,
                    p.topic_len,
                    sql.to_us(new.entry.created_at),
                    sql.to_us(new.entry.updated_at),
                    *validity,
                ),
            ).lastrowid
            assert rid is not None
            count_inserted(conn, user, [new.entry], p.content_len, p.topic_len)
            index_row(conn, user, rid, p.content_doc, p.topic_doc)
            self._appends.append(new_row(rid, p, _blob(new.vector), validity))
        else:
            pending = [(p, _blob(new.vector), new.entry, new.keyed) for p, new in rows]
            first, appends = insert_new(conn, user, pending, self._cached)
            self._appends.extend(appends)
            self._inserted = (first, step)
        for _, new in rows:
            if new.entry.expires_at is not None:
                restore_expiry(conn, (user.app_name, user.user_id), new.entry)

    def rewrite(self, step: steps.Rewrite) -> None:
        self._append_only = False
        p = Prepared.of(step.memory, step.fingerprint, self._svc.language)
        rid = _handle(step.target)[0]
        write_content(
            self._conn, step.user, rid, p, cast("bytes | None", step.vector), _us(step.at)
        )
        if not isinstance(step.expires_at, steps.Keep):
            set_row_expiry(self._conn, rid, step.expires_at)

    def set_topics(self, step: steps.SetTopics) -> None:
        self._append_only = False
        conn, user = self._conn, step.user
        rid, content_doc = _handle(step.target)
        if content_doc is None:
            content_doc = conn.execute(sql.SELECT_CONTENT_DOC, (rid,)).fetchone()[0]
        memory = step.target.entry.memory
        keys = memory_keys(step.topics, memory.participants, memory.location)
        topic_doc = topics_document(keys, self._svc.language)
        unindex_row(conn, user, rid)
        conn.execute(
            sql.UPDATE_TOPICS,
            (
                sql.list_json(list(step.topics)),
                topic_doc,
                len(topic_doc.split()),
                _us(step.at),
                rid,
            ),
        )
        index_row(conn, user, rid, content_doc, topic_doc)

    def set_validity(self, step: steps.SetValidity) -> None:
        """Both validity columns and `updated_at`; content, documents and vector stay
        (a superseded version stays indexed: `as_of` searches find it)."""
        self._append_only = False
        rid = _handle(step.target)[0]
        at = (sql.to_us(step.valid_to), step.superseded_by, _us(step.at), rid)
        self._conn.execute(sql.SET_VALIDITY, at)

    def find_predecessor(self, step: steps.FindPredecessor) -> steps.Stored | None:
        user, exclude = step.user, json.dumps(sorted(step.exclude))
        key = (user.app_name, user.user_id, step.memory_id, exclude)
        row = self._conn.execute(sql.SELECT_PREDECESSOR, key).fetchone()
        return _stored(row, step.user, False, None)

    def evict_oldest(self, step: steps.EvictOldest) -> tuple[str, str] | None:
        self._append_only = False
        conn, user = self._conn, step.user
        oldest = conn.execute(sql.SELECT_OLDEST_LIVE, (user.app_name, user.user_id)).fetchone()
        if oldest is None:
            return None
        unindex_row(conn, user, oldest[0])
        conn.execute(sql.SOFT_DELETE, (_us(step.at), oldest[0]))
        return (oldest[1], oldest[2])

    def soft_delete(self, step: steps.SoftDelete) -> list[tuple[str, str]]:
        self._append_only = False
        conn, user, at = self._conn, step.user, _us(step.at)
        u = (user.app_name, user.user_id)
        if step.memory_ids is None:
            rows = conn.execute(sql.SELECT_LIVE_TEXT, u).fetchall()
            if rows:
                prefix = scope_prefix(user)
                conn.execute(sql.FTS_UNINDEX_USER, (prefix, prefix, *u))
                conn.execute(sql.SOFT_DELETE_ALL, (at, *u))
            return [(mid, text) for _, mid, text in rows]
        gone: list[tuple[str, str]] = []
        for memory_id in step.memory_ids:
            row = conn.execute(sql.SELECT_BY_ID, (*u, memory_id)).fetchone()
            if row is None or row[DELETED] is not None:
                continue
            unindex_row(conn, user, row[0])
            conn.execute(sql.SOFT_DELETE, (at, row[0]))
            gone.append((memory_id, row[2]))
        return gone

    def purge(self, step: steps.Purge) -> int:
        conn, user = self._conn, step.user
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


def _adds_of(history: steps.RecordHistory, inserted: steps.Insert) -> bool:
    """Whether `history` holds exactly one ADD event per inserted row, in order, each
    stamped with its row's `created_at` and naming its text, all with one source: what
    `HISTORY_OF_INSERTED` writes from the rows."""
    events, rows = history.events, inserted.rows
    if not events or len(events) != len(rows) or history.user != inserted.user:
        return False
    source = events[0].source
    for event, row in zip(events, rows, strict=True):
        entry = row.entry
        if (
            event.memory_id != entry.id
            or event.operation is not Operation.ADD
            or event.text_before is not None
            or event.text_after != entry.memory.text
            or event.at != entry.created_at
            or event.source is not source
        ):
            return False
    return True


def _us(at: datetime) -> int:
    us = sql.to_us(at)
    assert us is not None
    return us


def _blob(vector: object) -> bytes | None:
    """An `Embed` result of this executor: the packed float32 vector, or None."""
    return cast("bytes | None", vector)


def _handle(target: steps.Stored) -> tuple[int, str | None]:
    """(rowid, content document or None) of a row this executor found."""
    return cast("tuple[int, str | None]", target.handle)


def _stored(row: Any, user: UserKey, deleted: bool, content_doc: str | None) -> steps.Stored | None:
    if row is None:
        return None
    return steps.Stored(to_entry(row, user), bool(row[KEYED]), deleted, (row[0], content_doc))
