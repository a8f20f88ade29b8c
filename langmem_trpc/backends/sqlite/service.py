"""`SQLiteMemoryService`: the embedded default backend (standard-library `sqlite3`).

One file holds every user's memories, history and cursors. Keyword search
runs on FTS5 over the package tokenizer's tokens and is scored with the
shared BM25F keyword relevance; vector search scores a per-user float32 matrix
with numpy. The semantics are `InMemoryMemoryService`'s, checked by the same
conformance suite.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import CapacityExceededError, MemoryConflictError, MemoryNotFoundError
from ...service._core import (
    UPDATE_ATTEMPTS,
    Limits,
    build_memory,
    check_app_filter,
    check_memory_id,
    check_restorable,
    check_source,
    check_user,
    embedding_text,
    fingerprint,
    memory_from,
    new_memory_id,
    new_memory_ids,
    patch_memory,
    resolve_options,
    unexpired,
    utcnow,
)
from ...service._language import Language, resolve_language
from ...service.protocol import SyncMemoryService
from ...types import (
    Entry,
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
from ._claims import SQLiteClaims, purge_claims
from ._connection import Database
from ._expiry import ExpiryMixin, restore_expiry
from ._keyword import (
    scope_prefix,
    topics_document,
)
from ._locks import FileClaims
from ._query import SearchCaches, SearchRun
from ._rows import (
    CONTENT_DOC,
    DELETED,
    ID,
    KEEP,
    KEYED,
    TEXT,
    Keep,
    Prepared,
    Row,
    count_inserted,
    index_row,
    insert_new,
    known_fingerprints,
    note_appended,
    record_history,
    soft_delete,
    to_entry,
    unindex_row,
    user_state,
    write_content,
)
from ._vectors import Appended, to_blob, unit_vector

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["SQLiteMemoryService"]

logger = logging.getLogger(__name__)

_EMBED_BATCH = 256


class SQLiteMemoryService(SQLiteClaims, ExpiryMixin, SyncMemoryService):
    """Durable memories in one SQLite file, safe for several threads and processes.

    Args:
        path: database file (parent folders are created), or ":memory:".
        embeddings: optional LangChain `Embeddings`; without one search is keyword-only.
        limits: text, topic and capacity limits (see `Limits`).
        vector_cache_bytes: bound on the per-user embedding matrices kept in memory.
        keyword_candidates: how many FTS5 candidates (best BM25 first) the
            keyword leg rescores with the shared keyword relevance; None means
            max(1.5 x pool, 90) (150 for the default pool of 100); every match
            is scored when fewer match. The one approximation of the backend:
            a document BM25 ranks below that cut is not scored.
        busy_timeout_ms: how long SQLite waits for another process's write.
        synchronous: SQLite `synchronous` pragma ("NORMAL" by default: WAL
            keeps the file consistent; a power cut may lose the last commits).
        language: the tokenizer's language (a Snowball name such as "german", or a
            `Language`; English by default). A new file records it; opening a file
            recorded under another language raises `ConfigurationError`.

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
        language: str | Language = "english",
    ) -> None:
        self.language = resolve_language(language)
        self._db = Database(
            path, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous, language=self.language
        )
        self._file_claims = FileClaims(None if self._db.memory else self._db.path)
        self._embeddings = embeddings
        self._limits = limits or Limits()
        self._caches = SearchCaches(vector_cache_bytes, self._db.read_detached, self.language)
        self._keyword_candidates = keyword_candidates
        self._clock_lock = threading.Lock()
        self._last_us = 0
        self.supports_vectors = embeddings is not None

    @property
    def path(self) -> str:
        return self._db.path

    def __repr__(self) -> str:
        return f"SQLiteMemoryService({self._db.path!r}, vectors={self.supports_vectors})"

    def close(self) -> None:
        """Stop the search threads (vector side scan, keyword index builder), then close
        the database and drop every cache."""
        self._caches.close()
        self._db.close()
        self._file_claims.close()

    # -- helpers ----------------------------------------------------------------

    def _now(self, wall_us: int | None = None) -> datetime:
        """UTC now, strictly increasing within this service so orders stay stable.

        A batch passes the wall clock it read once (`wall_us`): its items then
        get consecutive microseconds, still after anything stamped before.
        """
        if wall_us is None:
            wall_us = sql.to_us(utcnow()) or 0
        with self._clock_lock:
            us = self._last_us = max(wall_us, self._last_us + 1)
        return sql.from_us_required(us)

    def _embed(self, texts: Sequence[str]) -> list[bytes | None]:
        if self._embeddings is None:
            return [None] * len(texts)
        blobs: list[bytes | None] = []
        for start in range(0, len(texts), _EMBED_BATCH):
            chunk = list(texts[start : start + _EMBED_BATCH])
            blobs.extend(_unit_blobs(self._embeddings.embed_documents(chunk)))
        return blobs

    def _make_room(self, conn: sqlite3.Connection, user: UserKey, at: int) -> None:
        capacity = self._limits.capacity
        if capacity is None:
            return
        state = user_state(conn, user)
        if state is None or state[2] < capacity:
            return
        if self._limits.on_capacity == "error":
            raise CapacityExceededError(capacity)
        oldest = conn.execute(sql.SELECT_OLDEST_LIVE, (user.app_name, user.user_id)).fetchone()
        soft_delete(
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
        check_source(source)
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
        prepared = Prepared.of(memory, fingerprint(memory, memory_id), self.language)
        (blob,) = self._embed([embedding_text(memory.text, memory.participants)])
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
        check_source(source)
        prepared: list[Prepared] = []
        for item in memories:
            memory = memory_from(item, limits=self._limits)
            prepared.append(Prepared.of(memory, fingerprint(memory), self.language))
        blobs = self._embed(
            [embedding_text(p.memory.text, p.memory.participants) for p in prepared]
        )
        appended: list[Appended] = []
        entries = self._db.write(
            lambda conn: self._add_many_in(conn, user, prepared, blobs, source, appended)
        )
        if appended:  # committed: the next search extends the cached matrix
            self._caches.vectors.append(user, appended[0])
        return entries

    def _add_many_in(
        self,
        conn: sqlite3.Connection,
        user: UserKey,
        prepared: list[Prepared],
        blobs: list[bytes | None],
        source: Source | None,
        appended: list[Appended],
    ) -> list[Entry]:
        """`_add_in` for each item, with a fast path for content the user does not have yet.

        New content needs no lookups and no capacity action, so those rows are
        written with executemany; anything else (a duplicate, a revival, a full
        store) goes through `_add_in` after the pending rows are flushed, so
        the result is the same as adding one by one. When every item took the
        fast path, the new rows go into `appended` for the vector cache.
        """
        known = known_fingerprints(conn, user, {p.fingerprint for p in prepared})
        capacity = self._limits.capacity
        state = user_state(conn, user)
        before = None if state is None else (state[0], state[1])
        live = 0 if state is None else int(state[2])
        new_rows: list[tuple[int, str, int | None, bytes | None]] = []
        append_only = True
        encoded = sql.source_json(source)
        pending: list[tuple[Prepared, bytes | None, Entry]] = []

        def flush() -> None:
            new_rows.extend(insert_new(conn, user, pending, encoded))
            pending.clear()

        entries: list[Entry] = []
        ids = iter(new_memory_ids(len(prepared)))
        wall_us = sql.to_us(utcnow())
        for p, blob in zip(prepared, blobs, strict=True):
            if p.fingerprint in known or (capacity is not None and live >= capacity):
                flush()
                append_only = False
                entries.append(self._add_in(conn, user, p, blob, None, source))
                state = user_state(conn, user)
                live = 0 if state is None else int(state[2])
                continue
            known.add(p.fingerprint)
            now = self._now(wall_us)
            entry = Entry.model_construct(
                id=next(ids), app_name=user.app_name, user_id=user.user_id,
                memory=p.memory, created_at=now, updated_at=now, score=None, rrf_score=None,
            )  # fmt: skip
            pending.append((p, blob, entry))
            entries.append(entry)
            live += 1
        flush()
        if append_only:
            note_appended(conn, user, before, new_rows, appended)
        return entries

    def _add_in(
        self,
        conn: sqlite3.Connection,
        user: UserKey,
        p: Prepared,
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
        if row is not None and row[DELETED] is None:  # explicit id, live: upsert in place
            write_content(conn, user, row[0], p, blob, at)
            record_history(
                conn, user, row[ID], Operation.UPDATE, row[TEXT], p.memory.text, source, at
            )
            return to_entry(row, user, p.memory, updated_at=now)
        self._make_room(conn, user, at)
        if row is not None:  # revive a soft-deleted memory under its old id
            write_content(conn, user, row[0], p, blob, at)
            entry = to_entry(row, user, p.memory, updated_at=now)
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
            count_inserted(conn, user, 1, p.content_len, p.topic_len)
            index_row(conn, user, cursor.lastrowid, p.content_doc, p.topic_doc)
        record_history(conn, user, entry.id, Operation.ADD, None, p.memory.text, source, at)
        return entry

    def _refresh_topics(
        self, conn: sqlite3.Connection, user: UserKey, row: Row, topics: Sequence[str]
    ) -> Entry:
        """Idempotent re-add: merge the new topics into the existing memory."""
        entry = to_entry(row, user)
        merged = canonical_topics([*entry.memory.topics, *topics])
        if merged == entry.memory.topics:
            return entry
        now = self._now()
        topic_doc = topics_document(merged, self.language)
        unindex_row(conn, user, row[0])
        conn.execute(
            sql.UPDATE_TOPICS,
            (sql.list_json(merged), topic_doc, len(topic_doc.split()), sql.to_us(now), row[0]),
        )
        index_row(conn, user, row[0], row[CONTENT_DOC], topic_doc)
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
        check_source(source)
        fields = {
            "topics": topics,
            "kind": kind,
            "event_time": event_time,
            "participants": participants,
            "location": location,
            "metadata": metadata,
        }
        u = (user.app_name, user.user_id)
        for _ in range(UPDATE_ATTEMPTS):
            seen = self._db.read(
                lambda conn: conn.execute(sql.SELECT_BY_ID, (*u, memory_id)).fetchone()
            )
            if seen is None or seen[DELETED] is not None:
                raise MemoryNotFoundError(memory_id)
            current = to_entry(seen, user)
            memory = patch_memory(current.memory, text, limits=self._limits, **fields)
            p = Prepared.of(
                memory, fingerprint(memory, memory_id if seen[KEYED] else None), self.language
            )
            blob: bytes | None | Keep = KEEP
            embedded = embedding_text(memory.text, memory.participants)
            if embedded != embedding_text(current.memory.text, current.memory.participants):
                (blob,) = self._embed([embedded])
            entry = self._db.write(
                lambda conn: self._update_in(conn, user, seen, p, blob, source)  # noqa: B023
            )
            if entry is not None:
                return entry
        raise MemoryConflictError(memory_id, memory_id, concurrent=True)

    def _update_in(
        self,
        conn: sqlite3.Connection,
        user: UserKey,
        seen: Row,
        p: Prepared,
        blob: bytes | None | Keep,
        source: Source | None,
    ) -> Entry | None:
        """Write `p` over the row read as `seen`, compare-and-set: None (nothing
        written) when the row changed since, so the caller re-reads and patches again."""
        memory_id = seen[ID]
        row = conn.execute(sql.SELECT_BY_ID, (user.app_name, user.user_id, memory_id)).fetchone()
        if row is None or row[DELETED] is not None:
            raise MemoryNotFoundError(memory_id)
        if tuple(row) != tuple(seen):
            return None
        clash = conn.execute(
            sql.SELECT_LIVE_CLASH, (user.app_name, user.user_id, p.fingerprint, row[0])
        ).fetchone()
        if clash is not None:
            raise MemoryConflictError(memory_id, clash[0])
        now = self._now()
        at = sql.to_us(now)
        assert at is not None
        write_content(conn, user, row[0], p, blob, at)
        record_history(
            conn, user, memory_id, Operation.UPDATE, row[TEXT], p.memory.text, source, at
        )
        return to_entry(row, user, p.memory, updated_at=now)

    def delete(self, user: UserKey, memory_id: str, *, source: Source | None = None) -> bool:
        user = check_user(user)
        check_memory_id(memory_id)
        check_source(source)

        def work(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                sql.SELECT_BY_ID, (user.app_name, user.user_id, memory_id)
            ).fetchone()
            if row is None or row[DELETED] is not None:
                return False
            at = sql.to_us(self._now())
            assert at is not None
            soft_delete(conn, user, row[0], memory_id, row[TEXT], Operation.DELETE, source, at)
            return True

        return self._db.write(work)

    def clear(self, user: UserKey, *, source: Source | None = None) -> int:
        user = check_user(user)
        check_source(source)
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
                unindex_row(conn, user, row[0])
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
            purge_claims(conn, user)
            self._file_claims.purge(user.app_name, user.user_id)
            conn.execute(sql.DELETE_STATE, u)
            return count

        removed = self._db.write(purge_user)
        self._caches.drop(user)
        return removed

    def restore(self, user: UserKey, entry: Entry, history: Sequence[HistoryEvent] = ()) -> Entry:
        user = check_user(user)
        entry = check_restorable(entry, history).model_copy(
            update={
                "app_name": user.app_name,
                "user_id": user.user_id,
                "score": None,
                "rrf_score": None,
            }
        )
        u = (user.app_name, user.user_id)
        plain = Prepared.of(entry.memory, fingerprint(entry.memory), self.language)
        keyed = Prepared.of(entry.memory, fingerprint(entry.memory, entry.id), self.language)
        (blob,) = self._embed([embedding_text(entry.text, entry.memory.participants)])
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
                unindex_row(conn, user, old[0])
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
            count_inserted(conn, user, 1, p.content_len, p.topic_len)
            index_row(conn, user, cursor.lastrowid, p.content_doc, p.topic_doc)
            conn.execute(sql.DELETE_HISTORY, (*u, entry.id))
            conn.executemany(sql.INSERT_HISTORY, events)
            restore_expiry(conn, u, entry)
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
        if row is None or row[DELETED] is not None:
            return None
        return next(iter(unexpired([to_entry(row, user)])), None)

    def read(self, user: UserKey, limit: int | None = None) -> list[Entry]:
        user = check_user(user)
        u: tuple[Any, ...] = (user.app_name, user.user_id)
        query = sql.SELECT_READ
        if limit is not None and limit > 0:
            query += " LIMIT ?"
            u = (*u, limit)
        rows = self._db.read(lambda conn: conn.execute(query, u).fetchall())
        return unexpired(to_entry(row, user) for row in rows)

    def count(self, user: UserKey) -> int:
        user = check_user(user)
        state = self._db.read(lambda conn: user_state(conn, user))
        return 0 if state is None else int(state[2])

    def users(self, app_name: str | None = None) -> list[UserKey]:
        app_name = check_app_filter(app_name)
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
        search = SearchRun(
            self._caches, user, options, query_vector, self._keyword_candidates, self.language
        )
        results = self._db.read(search.run)
        if search.missing_vectors:
            self._backfill_embeddings(user, search.missing_vectors)
            search = SearchRun(
                self._caches, user, options, query_vector, self._keyword_candidates, self.language
            )
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
            blobs = self._embed([embedding_text(text, json.loads(who)) for _, text, who in rows])
            if any(b is None or len(b) != dim * 4 for b in blobs):
                logger.warning("embedder returned vectors of another dimension; not backfilling")
                return
            updates = [
                (blob, rid, text, who) for (rid, text, who), blob in zip(rows, blobs, strict=True)
            ]
            self._db.write(_executemany(sql.UPDATE_EMBEDDING, updates))
            logger.info("backfilled %d embeddings for %s", len(rows), user)


def _unit_blobs(vectors: Sequence[Sequence[float]]) -> list[bytes | None]:
    """Each vector L2-normalised as a float32 blob; one numpy pass for the whole batch
    (per-vector conversion was a tenth of `add_many`'s time)."""
    try:
        matrix = np.asarray(vectors, dtype=np.float32)
    except ValueError:  # ragged: vectors of different sizes
        matrix = None
    if matrix is None or matrix.ndim != 2:
        return [to_blob(unit_vector(v)) for v in vectors]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = np.divide(matrix, norms, out=matrix.copy(), where=norms > 0)
    return [row.tobytes() for row in matrix]


def _executemany(
    statement: str, params: list[tuple[Any, ...]]
) -> Callable[[sqlite3.Connection], object]:
    return lambda conn: conn.executemany(statement, params)
