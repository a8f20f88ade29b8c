"""`SQLiteMemoryService`: the embedded default backend (standard-library `sqlite3`).

One file holds every user's memories, history and cursors. Keyword search
runs on FTS5 over the package tokenizer's tokens and is scored with the
shared absolute composite; vector search scores a per-user float32 matrix
with numpy. The semantics are `InMemoryMemoryService`'s, checked by the same
conformance suite.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import CapacityExceededError, MemoryConflictError, MemoryNotFoundError
from ...service._core import (
    Limits,
    build_memory,
    check_memory_id,
    check_user,
    fingerprint,
    new_memory_id,
    patch_memory,
    resolve_options,
    utcnow,
)
from ...service._search import (
    CorpusStats,
    KeywordDoc,
    Legs,
    QueryTerms,
    execute_search,
    keyword_score,
)
from ...service.protocol import SyncMemoryService
from ...types import (
    Entry,
    ExtractionCursor,
    HistoryEvent,
    Kind,
    Memory,
    Operation,
    SearchOptions,
    Source,
    UserKey,
    canonical_topics,
)
from . import _sql as sql
from ._connection import Database
from ._keyword import (
    fts_document,
    keyword_doc,
    match_any,
    scope_prefix,
    scoped,
    topics_document,
)
from ._vectors import KIND_CODES, UserVectors, VectorCache, to_blob, unit_vector

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["SQLiteMemoryService"]

logger = logging.getLogger(__name__)

Row = tuple[Any, ...]
_ID, _TEXT, _TOPICS = 1, 2, 3
_CREATED, _UPDATED, _DELETED, _KEYED = 9, 10, 11, 12
_CONTENT_DOC, _TOPIC_DOC = 11, 12
_EMBED_BATCH = 256
_DF_CACHE_USERS = 256
_DF_CACHE_TOKENS = 4096


@dataclass(frozen=True)
class _Prepared:
    """A validated memory with everything its row needs, computed outside the transaction."""

    memory: Memory
    fingerprint: bytes
    columns: tuple[Any, ...]
    """topics, kind, event_time, participants, location, metadata as stored."""
    content_doc: str
    topic_doc: str

    @classmethod
    def of(cls, memory: Memory, fp: str) -> _Prepared:
        return cls(
            memory=memory,
            fingerprint=bytes.fromhex(fp),
            columns=sql.memory_params(memory),
            content_doc=fts_document(memory.text),
            topic_doc=topics_document(memory.topics),
        )

    @property
    def content_len(self) -> int:
        return len(self.content_doc.split())

    @property
    def topic_len(self) -> int:
        return len(self.topic_doc.split())


class _Keep:
    """Sentinel: leave the stored embedding as it is."""


_KEEP = _Keep()


class SQLiteMemoryService(SyncMemoryService):
    """Durable memories in one SQLite file, safe for several threads and processes.

    Args:
        path: database file (parent folders are created), or ":memory:".
        embeddings: optional LangChain `Embeddings`; without one search is keyword-only.
        limits: text, topic and capacity limits (see `Limits`).
        vector_cache_bytes: bound on the per-user embedding matrices kept in memory.
        keyword_candidates: how many FTS5 candidates (best BM25 first) the
            keyword leg rescores with the shared composite; None means
            max(3 x pool, 90). Every match is scored when fewer match.
        busy_timeout_ms: how long SQLite waits for another process's write.
        synchronous: SQLite `synchronous` pragma ("NORMAL" by default: WAL
            keeps the file consistent; a power cut may lose the last commits).

    Example:
        ```python
        svc = SQLiteMemoryService("memories.db", embeddings=HashingEmbeddings())
        alice = UserKey("support", "alice")
        svc.add(alice, "Prefers dark mode", topics=["ui"])
        svc.search(alice, "dark mode?", SearchOptions(hybrid=True))
        ```
    """

    def __init__(
        self,
        path: str | Path,
        embeddings: Embeddings | None = None,
        *,
        limits: Limits | None = None,
        vector_cache_bytes: int = 1 << 30,
        keyword_candidates: int | None = None,
        busy_timeout_ms: int = 5_000,
        synchronous: str = "NORMAL",
    ) -> None:
        self._db = Database(path, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous)
        self._embeddings = embeddings
        self._limits = limits or Limits()
        self._vectors = VectorCache(vector_cache_bytes)
        self._keyword_candidates = keyword_candidates
        self._df: OrderedDict[UserKey, tuple[tuple[str, int], dict[str, int]]] = OrderedDict()
        self._df_lock = threading.Lock()
        self._clock_lock = threading.Lock()
        self._last_us = 0
        self.supports_vectors = embeddings is not None

    @property
    def path(self) -> str:
        return self._db.path

    def __repr__(self) -> str:
        return f"SQLiteMemoryService({self._db.path!r}, vectors={self.supports_vectors})"

    def close(self) -> None:
        self._db.close()
        self._vectors.clear()

    # -- helpers ----------------------------------------------------------------

    def _now(self) -> datetime:
        """UTC now, strictly increasing within this service so orders stay stable."""
        with self._clock_lock:
            us = max(sql.to_us(utcnow()) or 0, self._last_us + 1)
            self._last_us = us
        now = sql.from_us(us)
        assert now is not None
        return now

    def _embed(self, texts: Sequence[str]) -> list[bytes | None]:
        if self._embeddings is None:
            return [None] * len(texts)
        blobs: list[bytes | None] = []
        for start in range(0, len(texts), _EMBED_BATCH):
            chunk = list(texts[start : start + _EMBED_BATCH])
            blobs.extend(to_blob(unit_vector(v)) for v in self._embeddings.embed_documents(chunk))
        return blobs

    @staticmethod
    def _history(
        conn: sqlite3.Connection,
        user: UserKey,
        memory_id: str,
        op: Operation,
        before: str | None,
        after: str | None,
        source: Source | None,
        at: int,
    ) -> None:
        conn.execute(
            sql.INSERT_HISTORY,
            (
                user.app_name,
                user.user_id,
                memory_id,
                op.value,
                before,
                after,
                at,
                sql.source_json(source),
            ),
        )

    @staticmethod
    def _state(conn: sqlite3.Connection, user: UserKey) -> Row | None:
        row: Row | None = conn.execute(sql.SELECT_STATE, (user.app_name, user.user_id)).fetchone()
        return row

    @staticmethod
    def _entry(row: Row, user: UserKey, memory: Memory | None = None, **update: Any) -> Entry:
        entry = sql.row_to_entry(row, user.app_name, user.user_id)
        if memory is not None:
            update["memory"] = memory
        return entry.model_copy(update=update) if update else entry

    @staticmethod
    def _index(
        conn: sqlite3.Connection, user: UserKey, rid: int, content: str, topics: str
    ) -> None:
        prefix = scope_prefix(user)
        conn.execute(sql.FTS_INSERT, (rid, scoped(prefix, content), scoped(prefix, topics)))

    @staticmethod
    def _unindex(conn: sqlite3.Connection, user: UserKey, rid: int) -> None:
        """Drop a live row from FTS; call before its documents change (no-op if deleted)."""
        prefix = scope_prefix(user)
        conn.execute(sql.FTS_UNINDEX, (prefix, prefix, rid))

    def _write_content(
        self,
        conn: sqlite3.Connection,
        rid: int,
        p: _Prepared,
        blob: bytes | None | _Keep,
        at: int,
        *,
        user: UserKey,
    ) -> None:
        """Replace a row's content (reviving it if deleted) and its FTS document."""
        self._unindex(conn, user, rid)
        docs = (p.content_doc, p.topic_doc, p.content_len, p.topic_len)
        if isinstance(blob, _Keep):
            conn.execute(
                sql.UPDATE_CONTENT_KEEP_EMBEDDING,
                (p.memory.text, p.fingerprint, *p.columns, *docs, at, rid),
            )
        else:
            conn.execute(
                sql.UPDATE_CONTENT,
                (p.memory.text, p.fingerprint, *p.columns, blob, *docs, at, rid),
            )
        self._index(conn, user, rid, p.content_doc, p.topic_doc)

    def _soft_delete(
        self,
        conn: sqlite3.Connection,
        user: UserKey,
        rid: int,
        memory_id: str,
        text: str,
        op: Operation,
        source: Source | None,
        at: int,
    ) -> None:
        self._unindex(conn, user, rid)
        conn.execute(sql.SOFT_DELETE, (at, rid))
        self._history(conn, user, memory_id, op, text, None, source, at)

    def _make_room(self, conn: sqlite3.Connection, user: UserKey, at: int) -> None:
        capacity = self._limits.capacity
        if capacity is None:
            return
        state = self._state(conn, user)
        if state is None or state[2] < capacity:
            return
        if self._limits.on_capacity == "error":
            raise CapacityExceededError(capacity)
        oldest = conn.execute(sql.SELECT_OLDEST_LIVE, (user.app_name, user.user_id)).fetchone()
        self._soft_delete(
            conn,
            user,
            oldest[0],
            oldest[1],
            oldest[2],
            Operation.DELETE,
            Source(actor="capacity"),
            at,
        )

    # -- writes -----------------------------------------------------------------

    def add(
        self,
        user: UserKey,
        text: str,
        *,
        topics: Sequence[str] | None = None,
        kind: Kind | str = Kind.FACT,
        event_time: datetime | str | None = None,
        participants: Sequence[str] | None = None,
        location: str | None = None,
        metadata: dict[str, Any] | None = None,
        memory_id: str | None = None,
        source: Source | None = None,
    ) -> Entry:
        user = check_user(user)
        if memory_id is not None:
            check_memory_id(memory_id)
        memory = build_memory(
            text,
            limits=self._limits,
            topics=topics,
            kind=kind,
            event_time=event_time,
            participants=participants,
            location=location,
            metadata=metadata,
        )
        prepared = _Prepared.of(memory, fingerprint(memory, memory_id))
        (blob,) = self._embed([memory.text])
        return self._db.write(
            lambda conn: self._add_in(conn, user, prepared, blob, memory_id, source)
        )

    def add_many(
        self,
        user: UserKey,
        memories: Sequence[str | Memory],
        *,
        source: Source | None = None,
    ) -> list[Entry]:
        """Add many memories in one transaction: the bulk-import path.

        Each item behaves exactly like `add()` in order (idempotent, capacity
        policy, history), but the batch is atomic: if any item is invalid or
        the capacity policy raises, nothing is written. Embeddings are
        computed in batches before the transaction.
        """
        user = check_user(user)
        prepared: list[_Prepared] = []
        for item in memories:
            if isinstance(item, Memory):
                memory = build_memory(
                    item.text,
                    limits=self._limits,
                    topics=item.topics,
                    kind=item.kind,
                    event_time=item.event_time,
                    participants=item.participants,
                    location=item.location,
                    metadata=item.metadata,
                )
            else:
                memory = build_memory(item, limits=self._limits)
            prepared.append(_Prepared.of(memory, fingerprint(memory)))
        blobs = self._embed([p.memory.text for p in prepared])

        return self._db.write(lambda conn: self._add_many_in(conn, user, prepared, blobs, source))

    def _add_many_in(
        self,
        conn: sqlite3.Connection,
        user: UserKey,
        prepared: list[_Prepared],
        blobs: list[bytes | None],
        source: Source | None,
    ) -> list[Entry]:
        """`_add_in` for each item, with a fast path for content the user does not have yet.

        New content needs no lookups and no capacity action, so those rows are
        written with executemany; anything else (a duplicate, a revival, a full
        store) goes through `_add_in` after the pending rows are flushed, so
        the result is the same as adding one by one.
        """
        u = (user.app_name, user.user_id)
        known: set[bytes] = set()
        fingerprints = list({p.fingerprint for p in prepared})
        for start in range(0, len(fingerprints), 500):
            chunk = fingerprints[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            rows = conn.execute(sql.KNOWN_FINGERPRINTS + f"({marks})", (*u, *chunk))
            known.update(fp for (fp,) in rows)
        capacity = self._limits.capacity
        state = self._state(conn, user)
        live = 0 if state is None else int(state[2])
        prefix = scope_prefix(user)
        encoded = sql.source_json(source)
        pending: list[tuple[_Prepared, bytes | None, Entry]] = []

        def flush() -> None:
            if not pending:
                return
            rid = int(conn.execute(sql.NEXT_RID).fetchone()[0])
            memories, index, history = [], [], []
            for offset, (p, blob, entry) in enumerate(pending):
                at = sql.to_us(entry.created_at)
                memories.append(
                    (rid + offset, *u, entry.id, p.memory.text, p.fingerprint, False, *p.columns,
                     blob, p.content_doc, p.topic_doc, p.content_len, p.topic_len, at, at)
                )  # fmt: skip
                index.append(
                    (rid + offset, scoped(prefix, p.content_doc), scoped(prefix, p.topic_doc))
                )
                history.append(
                    (*u, entry.id, Operation.ADD.value, None, p.memory.text, at, encoded)
                )
            conn.executemany(sql.INSERT_MEMORY_WITH_RID, memories)
            conn.executemany(sql.FTS_INSERT, index)
            conn.executemany(sql.INSERT_HISTORY, history)
            pending.clear()

        entries: list[Entry] = []
        for p, blob in zip(prepared, blobs, strict=True):
            if p.fingerprint in known or (capacity is not None and live >= capacity):
                flush()
                entries.append(self._add_in(conn, user, p, blob, None, source))
                state = self._state(conn, user)
                live = 0 if state is None else int(state[2])
                continue
            known.add(p.fingerprint)
            now = self._now()
            entry = Entry.model_construct(
                id=new_memory_id(), app_name=user.app_name, user_id=user.user_id,
                memory=p.memory, created_at=now, updated_at=now, score=None, rrf_score=None,
            )  # fmt: skip
            pending.append((p, blob, entry))
            entries.append(entry)
            live += 1
        flush()
        return entries

    def _add_in(
        self,
        conn: sqlite3.Connection,
        user: UserKey,
        p: _Prepared,
        blob: bytes | None,
        memory_id: str | None,
        source: Source | None,
    ) -> Entry:
        u = (user.app_name, user.user_id)
        row: Row | None = None
        if memory_id is not None:
            row = conn.execute(sql.SELECT_BY_ID, (*u, memory_id)).fetchone()
        if row is None:
            live = conn.execute(sql.SELECT_LIVE_BY_FINGERPRINT, (*u, p.fingerprint)).fetchone()
            if live is not None:
                return self._refresh_topics(conn, user, live, p.memory.topics)
            row = conn.execute(sql.SELECT_ANY_BY_FINGERPRINT, (*u, p.fingerprint)).fetchone()
        now = self._now()
        at = sql.to_us(now)
        assert at is not None
        if row is not None and row[_DELETED] is None:  # explicit id, live: upsert in place
            self._write_content(conn, row[0], p, blob, at, user=user)
            self._history(
                conn, user, row[_ID], Operation.UPDATE, row[_TEXT], p.memory.text, source, at
            )
            return self._entry(row, user, p.memory, updated_at=now)
        self._make_room(conn, user, at)
        if row is not None:  # revive a soft-deleted memory under its old id
            self._write_content(conn, row[0], p, blob, at, user=user)
            entry = self._entry(row, user, p.memory, updated_at=now)
        else:
            entry = Entry(
                id=memory_id or new_memory_id(),
                app_name=user.app_name,
                user_id=user.user_id,
                memory=p.memory,
                created_at=now,
                updated_at=now,
            )
            cursor = conn.execute(
                sql.INSERT_MEMORY,
                (
                    *u,
                    entry.id,
                    p.memory.text,
                    p.fingerprint,
                    memory_id is not None,
                    *p.columns,
                    blob,
                    p.content_doc,
                    p.topic_doc,
                    p.content_len,
                    p.topic_len,
                    at,
                    at,
                ),
            )
            assert cursor.lastrowid is not None
            self._index(conn, user, cursor.lastrowid, p.content_doc, p.topic_doc)
        self._history(conn, user, entry.id, Operation.ADD, None, p.memory.text, source, at)
        return entry

    def _refresh_topics(
        self, conn: sqlite3.Connection, user: UserKey, row: Row, topics: Sequence[str]
    ) -> Entry:
        """Idempotent re-add: merge the new topics into the existing memory."""
        entry = self._entry(row, user)
        merged = canonical_topics([*entry.memory.topics, *topics])
        if merged == entry.memory.topics:
            return entry
        now = self._now()
        topic_doc = topics_document(merged)
        self._unindex(conn, user, row[0])
        conn.execute(
            sql.UPDATE_TOPICS,
            (sql.list_json(merged), topic_doc, len(topic_doc.split()), sql.to_us(now), row[0]),
        )
        self._index(conn, user, row[0], row[_CONTENT_DOC], topic_doc)
        memory = entry.memory.model_copy(update={"topics": merged})
        return entry.model_copy(update={"memory": memory, "updated_at": now})

    def update(
        self,
        user: UserKey,
        memory_id: str,
        text: str,
        *,
        topics: Sequence[str] | None = None,
        kind: Kind | str | None = None,
        event_time: datetime | str | None = None,
        participants: Sequence[str] | None = None,
        location: str | None = None,
        metadata: dict[str, Any] | None = None,
        source: Source | None = None,
    ) -> Entry:
        user = check_user(user)
        check_memory_id(memory_id)
        u = (user.app_name, user.user_id)
        current_row = self._db.read(
            lambda conn: conn.execute(sql.SELECT_BY_ID, (*u, memory_id)).fetchone()
        )
        if current_row is None or current_row[_DELETED] is not None:
            raise MemoryNotFoundError(memory_id)
        current = self._entry(current_row, user)
        memory = patch_memory(
            current.memory,
            text,
            limits=self._limits,
            topics=topics,
            kind=kind,
            event_time=event_time,
            participants=participants,
            location=location,
            metadata=metadata,
        )
        p = _Prepared.of(memory, fingerprint(memory, memory_id if current_row[_KEYED] else None))
        blob: bytes | None | _Keep = _KEEP
        if memory.text != current.text:
            (blob,) = self._embed([memory.text])

        def work(conn: sqlite3.Connection) -> Entry:
            row = conn.execute(sql.SELECT_BY_ID, (*u, memory_id)).fetchone()
            if row is None or row[_DELETED] is not None:
                raise MemoryNotFoundError(memory_id)
            clash = conn.execute(sql.SELECT_LIVE_CLASH, (*u, p.fingerprint, row[0])).fetchone()
            if clash is not None:
                raise MemoryConflictError(memory_id, clash[0])
            now = self._now()
            at = sql.to_us(now)
            assert at is not None
            self._write_content(conn, row[0], p, blob, at, user=user)
            self._history(
                conn, user, memory_id, Operation.UPDATE, row[_TEXT], memory.text, source, at
            )
            return self._entry(row, user, memory, updated_at=now)

        return self._db.write(work)

    def delete(self, user: UserKey, memory_id: str, *, source: Source | None = None) -> bool:
        user = check_user(user)
        check_memory_id(memory_id)

        def work(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                sql.SELECT_BY_ID, (user.app_name, user.user_id, memory_id)
            ).fetchone()
            if row is None or row[_DELETED] is not None:
                return False
            at = sql.to_us(self._now())
            assert at is not None
            self._soft_delete(
                conn, user, row[0], memory_id, row[_TEXT], Operation.DELETE, source, at
            )
            return True

        return self._db.write(work)

    def clear(self, user: UserKey, *, source: Source | None = None) -> int:
        user = check_user(user)
        u = (user.app_name, user.user_id)

        def work(conn: sqlite3.Connection) -> int:
            rows = conn.execute(sql.SELECT_LIVE_TEXT, u).fetchall()
            if not rows:
                return 0
            at = sql.to_us(self._now())
            prefix = scope_prefix(user)
            conn.execute(sql.FTS_UNINDEX_USER, (prefix, prefix, *u))
            conn.execute(sql.SOFT_DELETE_ALL, (at, *u))
            encoded = sql.source_json(source)
            conn.executemany(
                sql.INSERT_HISTORY,
                [
                    (*u, mid, Operation.CLEAR.value, text, None, at, encoded)
                    for _, mid, text in rows
                ],
            )
            return len(rows)

        return self._db.write(work)

    def purge(self, user: UserKey, memory_id: str | None = None) -> int:
        user = check_user(user)
        u = (user.app_name, user.user_id)
        if memory_id is not None:
            check_memory_id(memory_id)

            def purge_one(conn: sqlite3.Connection) -> int:
                row = conn.execute(sql.SELECT_RID_BY_ID, (*u, memory_id)).fetchone()
                conn.execute(sql.DELETE_HISTORY, (*u, memory_id))
                if row is None:
                    return 0
                self._unindex(conn, user, row[0])
                conn.execute(sql.DELETE_BY_RID, (row[0],))
                return 1

            return self._db.write(purge_one)

        def purge_user(conn: sqlite3.Connection) -> int:
            count: int = conn.execute(sql.COUNT_USER_ROWS, u).fetchone()[0]
            prefix = scope_prefix(user)
            conn.execute(sql.FTS_UNINDEX_USER, (prefix, prefix, *u))
            conn.execute(sql.DELETE_USER, u)
            conn.execute(sql.DELETE_USER_HISTORY, u)
            conn.execute(sql.DELETE_USER_CURSORS, u)
            conn.execute(sql.DELETE_STATE, u)
            return count

        removed = self._db.write(purge_user)
        self._vectors.drop(user)
        return removed

    def restore(self, user: UserKey, entry: Entry, history: Sequence[HistoryEvent] = ()) -> Entry:
        user = check_user(user)
        check_memory_id(entry.id)
        entry = entry.model_copy(
            update={
                "app_name": user.app_name,
                "user_id": user.user_id,
                "score": None,
                "rrf_score": None,
            }
        )
        u = (user.app_name, user.user_id)
        plain = _Prepared.of(entry.memory, fingerprint(entry.memory))
        keyed = _Prepared.of(entry.memory, fingerprint(entry.memory, entry.id))
        (blob,) = self._embed([entry.text])
        events = [
            (
                *u,
                entry.id,
                h.operation.value,
                h.text_before,
                h.text_after,
                sql.to_us(h.at),
                sql.source_json(h.source),
            )
            for h in history
        ]

        def work(conn: sqlite3.Connection) -> Entry:
            old = conn.execute(sql.SELECT_RID_BY_ID, (*u, entry.id)).fetchone()
            if old is not None:
                self._unindex(conn, user, old[0])
                conn.execute(sql.DELETE_BY_RID, (old[0],))
            clash = conn.execute(sql.SELECT_LIVE_BY_FINGERPRINT, (*u, plain.fingerprint)).fetchone()
            p = keyed if clash is not None else plain
            cursor = conn.execute(
                sql.INSERT_MEMORY,
                (
                    *u,
                    entry.id,
                    p.memory.text,
                    p.fingerprint,
                    clash is not None,
                    *p.columns,
                    blob,
                    p.content_doc,
                    p.topic_doc,
                    p.content_len,
                    p.topic_len,
                    sql.to_us(entry.created_at),
                    sql.to_us(entry.updated_at),
                ),
            )
            assert cursor.lastrowid is not None
            self._index(conn, user, cursor.lastrowid, p.content_doc, p.topic_doc)
            conn.execute(sql.DELETE_HISTORY, (*u, entry.id))
            conn.executemany(sql.INSERT_HISTORY, events)
            return entry

        return self._db.write(work)

    # -- reads ------------------------------------------------------------------

    def get(self, user: UserKey, memory_id: str) -> Entry | None:
        user = check_user(user)
        check_memory_id(memory_id)
        row = self._db.read(
            lambda conn: conn.execute(
                sql.SELECT_BY_ID, (user.app_name, user.user_id, memory_id)
            ).fetchone()
        )
        return None if row is None or row[_DELETED] is not None else self._entry(row, user)

    def read(self, user: UserKey, limit: int | None = None) -> list[Entry]:
        user = check_user(user)
        u: tuple[Any, ...] = (user.app_name, user.user_id)
        query = sql.SELECT_READ
        if limit is not None and limit > 0:
            query += " LIMIT ?"
            u = (*u, limit)
        rows = self._db.read(lambda conn: conn.execute(query, u).fetchall())
        return [self._entry(row, user) for row in rows]

    def count(self, user: UserKey) -> int:
        user = check_user(user)
        state = self._db.read(lambda conn: self._state(conn, user))
        return 0 if state is None else int(state[2])

    def users(self, app_name: str | None = None) -> list[UserKey]:
        query, params = sql.SELECT_USERS, tuple[str, ...]()
        if app_name is not None:
            query, params = query + " AND app_name = ?", (app_name,)
        rows = self._db.read(
            lambda conn: conn.execute(query + " ORDER BY app_name, user_id", params).fetchall()
        )
        return [UserKey(app, uid) for app, uid in rows]

    def history(self, user: UserKey, memory_id: str) -> list[HistoryEvent]:
        user = check_user(user)
        check_memory_id(memory_id)
        rows = self._db.read(
            lambda conn: conn.execute(
                sql.SELECT_HISTORY, (user.app_name, user.user_id, memory_id)
            ).fetchall()
        )
        return [sql.row_to_event(row) for row in rows]

    # -- search -----------------------------------------------------------------

    def search(
        self, user: UserKey, query: str | None = None, options: SearchOptions | None = None
    ) -> list[Entry]:
        user = check_user(user)
        options = resolve_options(query, options)
        if not options.query.strip():
            return []
        query_vector: np.ndarray | None = None
        if self._embeddings is not None:
            query_vector = unit_vector(self._embeddings.embed_query(options.query))
        search = _Search(self, user, options, query_vector)
        results = self._db.read(search.run)
        if search.missing_vectors:
            self._backfill_embeddings(user, search.missing_vectors)
            search = _Search(self, user, options, query_vector)
            results = self._db.read(search.run)
        return results

    def _backfill_embeddings(self, user: UserKey, dim: int) -> None:
        """Embed live memories stored without a vector (or with another dimension)."""
        u = (user.app_name, user.user_id)
        while True:
            rows = self._db.read(
                lambda conn: conn.execute(
                    sql.SELECT_MISSING_VECTORS, (*u, dim * 4, _EMBED_BATCH)
                ).fetchall()
            )
            if not rows:
                return
            blobs = self._embed([text for _, text in rows])
            if any(b is None or len(b) != dim * 4 for b in blobs):
                logger.warning("embedder returned vectors of another dimension; not backfilling")
                return
            updates = [(blob, rid, text) for (rid, text), blob in zip(rows, blobs, strict=True)]
            self._db.write(_executemany(sql.UPDATE_EMBEDDING, updates))
            logger.info("backfilled %d embeddings for %s", len(rows), user)

    def _user_vectors(
        self, conn: sqlite3.Connection, user: UserKey, stamp: tuple[str, int], dim: int
    ) -> UserVectors:
        cached = self._vectors.get(user, stamp)
        if cached is not None and cached.matrix.shape[1] == dim:
            return cached
        u = (user.app_name, user.user_id)
        n = conn.execute(sql.COUNT_VECTORS, (*u, dim * 4)).fetchone()[0]
        rids = np.empty(n, dtype=np.int64)
        matrix = np.empty((n, dim), dtype=np.float32)
        kinds = np.empty(n, dtype=np.int8)
        events = np.full(n, np.nan, dtype=np.float64)
        i = 0
        for rid, kind, event_time, blob in conn.execute(sql.SELECT_VECTORS, (*u, dim * 4)):
            if i == n:  # pragma: no cover - same snapshot, cannot grow
                break
            rids[i] = rid
            matrix[i] = np.frombuffer(blob, dtype=np.float32)
            kinds[i] = KIND_CODES[kind]
            if event_time is not None:
                events[i] = event_time
            i += 1
        vectors = UserVectors(stamp, rids[:i], matrix[:i], kinds[:i], events[:i])
        self._vectors.put(user, vectors)
        return vectors

    def _document_frequencies(
        self, conn: sqlite3.Connection, user: UserKey, stamp: tuple[str, int], tokens: list[str]
    ) -> dict[str, int]:
        """Per-user document frequency of each token, cached for this state of the user."""
        with self._df_lock:
            cached = self._df.get(user)
            known = cached[1] if cached is not None and cached[0] == stamp else {}
        prefix = scope_prefix(user)
        missing = {
            t: conn.execute(sql.FTS_COUNT, (match_any(prefix, [t]),)).fetchone()[0]
            for t in tokens
            if t not in known
        }
        if missing:
            with self._df_lock:
                cached = self._df.get(user)
                table = cached[1] if cached is not None and cached[0] == stamp else {}
                if len(table) > _DF_CACHE_TOKENS:
                    table = {}
                table.update(missing)
                self._df[user] = (stamp, table)
                self._df.move_to_end(user)
                while len(self._df) > _DF_CACHE_USERS:
                    self._df.popitem(last=False)
        return {t: known.get(t, missing.get(t, 0)) for t in tokens}

    # -- cursors ----------------------------------------------------------------

    def get_cursor(self, user: UserKey, thread_id: str) -> ExtractionCursor | None:
        user = check_user(user)
        row = self._db.read(
            lambda conn: conn.execute(
                sql.SELECT_CURSOR, (user.app_name, user.user_id, thread_id)
            ).fetchone()
        )
        return None if row is None else sql.row_to_cursor(row)

    def set_cursor(self, user: UserKey, cursor: ExtractionCursor) -> None:
        user = check_user(user)
        params = (
            user.app_name,
            user.user_id,
            cursor.thread_id,
            cursor.last_message_id,
            cursor.last_message_digest,
            cursor.message_count,
            sql.to_us(cursor.last_extracted_at),
            sql.to_us(self._now()),
        )
        self._db.write(lambda conn: conn.execute(sql.UPSERT_CURSOR, params))


class _Search:
    """One search over one read snapshot: the `fetch` that `execute_search` calls."""

    def __init__(
        self,
        service: SQLiteMemoryService,
        user: UserKey,
        options: SearchOptions,
        query_vector: np.ndarray | None,
    ) -> None:
        self.service = service
        self.user = user
        self.options = options
        self.query_vector = query_vector
        self.terms = QueryTerms.build(options.query)
        self.after_us = sql.to_us(options.time_after)
        self.before_us = sql.to_us(options.time_before)
        self.missing_vectors = 0
        """Set to the query dimension when live memories lack a vector of that size."""
        self._entries: dict[int, Entry] = {}
        self._conn: sqlite3.Connection | None = None
        self._state: Row | None = None
        self._stats: CorpusStats | None = None

    def run(self, conn: sqlite3.Connection) -> list[Entry]:
        self._conn = conn
        self._state = self.service._state(conn, self.user)
        if self._state is None or self._state[2] == 0:
            return []
        return execute_search(self.options, self.fetch)

    @property
    def stamp(self) -> tuple[str, int]:
        assert self._state is not None
        return (self._state[0], self._state[1])

    def fetch(self, kind: Kind | None, pool: int) -> Legs:
        vector: list[tuple[Entry, float]] | None = None
        if self.query_vector is not None:
            vector = self._vector_leg(kind, pool)
            if not self.options.hybrid:  # the shared ranking uses the vector leg alone
                return Legs(vector=vector, keyword=[])
        return Legs(vector=vector, keyword=self._keyword_leg(kind, pool))

    # -- shared pieces ------------------------------------------------------------

    def _filters(self, kind: Kind | None, prefix: str) -> tuple[str, list[Any]]:
        clauses, params = "", list[Any]()
        if kind is not None:
            clauses += f" AND {prefix}kind = ?"
            params.append(kind.value)
        if self.after_us is not None:
            clauses += f" AND ({prefix}event_time IS NULL OR {prefix}event_time >= ?)"
            params.append(self.after_us)
        if self.before_us is not None:
            clauses += f" AND ({prefix}event_time IS NULL OR {prefix}event_time <= ?)"
            params.append(self.before_us)
        return clauses, params

    def _entry(self, row: Row) -> Entry:
        entry = self._entries.get(row[0])
        if entry is None:
            entry = sql.row_to_entry(row, self.user.app_name, self.user.user_id)
            self._entries[row[0]] = entry
        return entry

    def _entries_for(self, rids: list[int]) -> dict[int, Entry]:
        assert self._conn is not None
        missing = [rid for rid in rids if rid not in self._entries]
        if missing:
            marks = ", ".join("?" * len(missing))
            rows = self._conn.execute(
                sql.SELECT_BY_RIDS + f"({marks})",
                (self.user.app_name, self.user.user_id, *missing),
            ).fetchall()
            for row in rows:
                self._entry(row)
        return self._entries

    # -- legs ---------------------------------------------------------------------

    def _vector_leg(self, kind: Kind | None, pool: int) -> list[tuple[Entry, float]]:
        assert self._conn is not None and self.query_vector is not None and self._state
        dim = int(self.query_vector.shape[0])
        vectors = self.service._user_vectors(self._conn, self.user, self.stamp, dim)
        if len(vectors.rids) < self._state[2]:
            self.missing_vectors = dim
        hits = vectors.top(self.query_vector, pool, kind, self.after_us, self.before_us)
        entries = self._entries_for([rid for rid, _ in hits])
        return [(entries[rid], score) for rid, score in hits if rid in entries]

    def _corpus_stats(self) -> CorpusStats:
        assert self._conn is not None and self._state is not None
        if self._stats is None:
            n, content, topic = self._state[2], self._state[3], self._state[4]
            df = self.service._document_frequencies(
                self._conn, self.user, self.stamp, self.terms.tokens
            )
            self._stats = CorpusStats(
                n_docs=n,
                df=df,
                avg_content_len=max(content / n, 1.0) if n else 1.0,
                avg_topic_len=max(topic / n, 1.0) if n else 1.0,
            )
        return self._stats

    def _keyword_leg(self, kind: Kind | None, pool: int) -> list[tuple[Entry, float]]:
        """FTS5 ranks candidates by BM25; the shared composite scores them."""
        assert self._conn is not None
        if not self.terms.tokens:
            return self._phrase_scan(kind, pool)
        stats = self._corpus_stats()
        prefix = scope_prefix(self.user)
        limit = self.service._keyword_candidates or max(pool * 3, 90)
        match = match_any(prefix, self.terms.tokens)
        if kind is None and self.after_us is None and self.before_us is None:
            ranked = self._conn.execute(sql.FTS_RANK + sql.FTS_ORDER, (match, limit))
        else:
            clauses, params = self._filters(kind, "m.")
            ranked = self._conn.execute(
                sql.FTS_RANK_FILTERED + clauses + sql.FTS_ORDER, (match, *params, limit)
            )
        rids = [rid for (rid,) in ranked]
        if not rids:
            return []
        rows = self._conn.execute(
            sql.SELECT_CANDIDATES + f"({', '.join('?' * len(rids))})",
            (self.user.app_name, self.user.user_id, *rids),
        ).fetchall()
        scored: list[tuple[float, int, Row]] = []
        for row in rows:
            doc = keyword_doc(row[_CONTENT_DOC], row[_TOPIC_DOC])
            score = keyword_score(self.terms, doc, stats)
            if score <= 0:  # cannot happen for a token match; score it the long way to be sure
                score = keyword_score(self.terms, self._full_doc(row), stats)
            if score > 0:
                scored.append((score, row[0], row))
        scored.sort(key=lambda hit: (-hit[0], hit[1]))
        return [(self._entry(row), score) for score, _, row in scored[:pool]]

    @staticmethod
    def _full_doc(row: Row) -> KeywordDoc:
        return KeywordDoc.build(row[_TEXT], json.loads(row[_TOPICS]))

    def _phrase_scan(self, kind: Kind | None, pool: int) -> list[tuple[Entry, float]]:
        """A query with no tokens ("C#"): the shared literal fallback over a filtered scan."""
        assert self._conn is not None
        words = _alnum_runs(self.options.query.lower())
        if not words:
            return []
        clauses, params = self._filters(kind, "")
        stats = CorpusStats(n_docs=0, df={}, avg_content_len=1.0, avg_topic_len=1.0)
        scored: list[tuple[float, int, Row]] = []
        for row in self._conn.execute(
            sql.SELECT_SCAN + clauses + " ORDER BY rid",
            (self.user.app_name, self.user.user_id, *params),
        ):
            text, topics = row[_TEXT].lower(), row[_TOPICS].lower()
            if not (all(w in text for w in words) or all(w in topics for w in words)):
                continue  # cheap prefilter: the literal needle cannot occur
            score = keyword_score(self.terms, self._full_doc(row), stats)
            if score > 0:
                scored.append((score, row[0], row))
        scored.sort(key=lambda hit: (-hit[0], hit[1]))
        return [(self._entry(row), score) for score, _, row in scored[:pool]]


def _executemany(
    statement: str, params: list[tuple[Any, ...]]
) -> Callable[[sqlite3.Connection], object]:
    return lambda conn: conn.executemany(statement, params)


def _alnum_runs(text: str) -> list[str]:
    return "".join(c if c.isalnum() else " " for c in text).split()
