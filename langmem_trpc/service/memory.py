"""`InMemoryMemoryService`: the reference backend, for tests and notebooks.

Everything lives in dicts guarded by one lock; nothing survives the process.
Its behaviour is the specification the SQL backends are tested against.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from .._time import ensure_utc
from ..errors import CapacityExceededError, MemoryConflictError, MemoryNotFoundError
from ..types import (
    DeadLetter,
    DeadLetterStatus,
    Entry,
    ExtractionCursor,
    HistoryEvent,
    Kind,
    Memory,
    Operation,
    SearchOptions,
    Source,
    ThreadClaim,
    UserKey,
    canonical_topics,
)
from ._claims import (
    ClaimTable,
    check_claim,
    check_letter_id,
    check_limit,
    check_progress,
    check_status,
    check_ttl,
)
from ._core import (
    UPDATE_ATTEMPTS,
    Limits,
    build_memory,
    check_app_filter,
    check_cursor,
    check_memory_id,
    check_restorable,
    check_source,
    check_thread_id,
    check_user,
    embedding_text,
    fingerprint,
    is_expired,
    new_memory_id,
    patch_memory,
    resolve_options,
    unexpired,
    utcnow,
)
from ._language import Language, resolve_language
from ._periods import TimeMentions
from ._search import (
    CorpusStats,
    KeywordDoc,
    KeywordScorer,
    Legs,
    QueryTerms,
    execute_search,
    passes_time,
)
from .protocol import SyncMemoryService

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["InMemoryMemoryService"]


@dataclass
class _Row:
    entry: Entry
    fingerprint: str
    deleted_at: datetime | None = None
    vector: np.ndarray | None = None
    doc: KeywordDoc | None = None
    keyed: bool = False
    """Added under a caller-chosen id: its fingerprint includes the id."""
    seq: int = 0
    """Write order within the service (`_touch`): eviction takes the lowest, whatever the clock did."""

    @property
    def live(self) -> bool:
        return self.deleted_at is None


@dataclass
class _UserData:
    rows: dict[str, _Row] = field(default_factory=dict)
    history: list[HistoryEvent] = field(default_factory=list)
    cursors: dict[str, ExtractionCursor] = field(default_factory=dict)


def unit_vector(values: Sequence[float]) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


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
        self.supports_vectors = embeddings is not None

    # -- helpers ------------------------------------------------------------

    def _data(self, user: UserKey) -> _UserData:
        return self._users.setdefault(user, _UserData())

    def _embed(self, memory: Memory) -> np.ndarray | None:
        if self._embeddings is None:
            return None
        return unit_vector(
            self._embeddings.embed_documents([embedding_text(memory.text, memory.participants)])[0]
        )

    def _record(
        self,
        data: _UserData,
        memory_id: str,
        op: Operation,
        before: str | None,
        after: str | None,
        source: Source | None,
        at: datetime,
    ) -> None:
        data.history.append(
            HistoryEvent(
                memory_id=memory_id,
                operation=op,
                text_before=before,
                text_after=after,
                at=at,
                source=source,
            )
        )

    def _touch(self, row: _Row, entry: Entry) -> Entry:
        """Store `entry` in `row` as its newest write (under the lock); returns it."""
        row.entry, row.seq = entry, next(self._writes)
        return entry

    def _live(self, data: _UserData) -> list[_Row]:
        return [r for r in data.rows.values() if r.live]

    def _make_room(self, user: UserKey, data: _UserData, now: datetime) -> None:
        capacity = self._limits.capacity
        live = self._live(data)
        if capacity is None or len(live) < capacity:
            return
        if self._limits.on_capacity == "error":
            raise CapacityExceededError(capacity)
        oldest = min(live, key=lambda r: r.seq)
        oldest.deleted_at = now
        self._record(
            data,
            oldest.entry.id,
            Operation.DELETE,
            oldest.entry.text,
            None,
            Source(actor="capacity"),
            now,
        )

    # -- writes -------------------------------------------------------------

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
        fp = fingerprint(memory, memory_id)
        vector = self._embed(memory)
        with self._lock:
            data = self._data(user)
            now = utcnow()
            row = data.rows.get(memory_id) if memory_id is not None else None
            if row is None:
                row = next((r for r in data.rows.values() if r.fingerprint == fp and r.live), None)
                if row is not None:
                    merged = canonical_topics([*row.entry.memory.topics, *memory.topics])
                    new_memory = row.entry.memory.model_copy(update={"topics": merged})
                    if new_memory != row.entry.memory:
                        self._touch(
                            row,
                            row.entry.model_copy(update={"memory": new_memory, "updated_at": now}),
                        )
                        row.doc = None
                    return row.entry
                row = next((r for r in data.rows.values() if r.fingerprint == fp), None)
            if row is not None and row.live:  # explicit id, live: upsert in place
                before = row.entry.text
                self._touch(row, row.entry.model_copy(update={"memory": memory, "updated_at": now}))
                row.fingerprint, row.vector, row.doc = fp, vector, None
                self._record(data, row.entry.id, Operation.UPDATE, before, memory.text, source, now)
                return row.entry
            self._make_room(user, data, now)
            if row is not None:  # revive a soft-deleted memory under its old id
                self._touch(row, row.entry.model_copy(update={"memory": memory, "updated_at": now}))
                row.fingerprint, row.vector, row.doc, row.deleted_at = fp, vector, None, None
            else:
                entry = Entry(
                    id=memory_id or new_memory_id(),
                    app_name=user.app_name,
                    user_id=user.user_id,
                    memory=memory,
                    created_at=now,
                    updated_at=now,
                )
                row = _Row(entry=entry, fingerprint=fp, vector=vector, keyed=memory_id is not None)
                self._touch(row, entry)
                data.rows[entry.id] = row
            self._record(data, row.entry.id, Operation.ADD, None, memory.text, source, now)
            return row.entry

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
        for _ in range(UPDATE_ATTEMPTS):
            with self._lock:
                row = self._users.get(user, _UserData()).rows.get(memory_id)
                if row is None or not row.live:
                    raise MemoryNotFoundError(memory_id)
                current, vector = row.entry, row.vector
            memory = patch_memory(current.memory, text, limits=self._limits, **fields)
            fp = fingerprint(memory, memory_id if row.keyed else None)
            if embedding_text(memory.text, memory.participants) != embedding_text(
                current.memory.text, current.memory.participants
            ):
                vector = self._embed(memory)
            with self._lock:
                data = self._data(user)
                if data.rows.get(memory_id) is not row or row.entry is not current or not row.live:
                    continue  # compare-and-set lost: re-read and patch the newer version
                clash = next(
                    (
                        r
                        for r in data.rows.values()
                        if r.fingerprint == fp and r.live and r is not row
                    ),
                    None,
                )
                if clash is not None:
                    raise MemoryConflictError(memory_id, clash.entry.id)
                now = utcnow()
                self._touch(row, current.model_copy(update={"memory": memory, "updated_at": now}))
                row.fingerprint, row.vector, row.doc = fp, vector, None
                self._record(
                    data, memory_id, Operation.UPDATE, current.text, memory.text, source, now
                )
                return row.entry
        raise MemoryConflictError(memory_id, memory_id, concurrent=True)

    def delete(self, user: UserKey, memory_id: str, *, source: Source | None = None) -> bool:
        user = check_user(user)
        check_memory_id(memory_id)
        check_source(source)
        with self._lock:
            data = self._users.get(user)
            row = data.rows.get(memory_id) if data else None
            if data is None or row is None or not row.live:
                return False
            now = utcnow()
            row.deleted_at = now
            self._record(data, memory_id, Operation.DELETE, row.entry.text, None, source, now)
            return True

    def clear(self, user: UserKey, *, source: Source | None = None) -> int:
        user = check_user(user)
        check_source(source)
        with self._lock:
            data = self._users.get(user)
            if data is None:
                return 0
            now = utcnow()
            live = self._live(data)
            for row in live:
                row.deleted_at = now
                self._record(data, row.entry.id, Operation.CLEAR, row.entry.text, None, source, now)
            return len(live)

    def purge(self, user: UserKey, memory_id: str | None = None) -> int:
        user = check_user(user)
        with self._lock:
            if memory_id is None:
                self._claims.purge(user)
            data = self._users.get(user)
            if data is None:
                return 0
            if memory_id is None:
                del self._users[user]
                return len(data.rows)
            check_memory_id(memory_id)
            removed = data.rows.pop(memory_id, None)
            data.history = [h for h in data.history if h.memory_id != memory_id]
            return 1 if removed else 0

    # -- reads --------------------------------------------------------------

    def get(self, user: UserKey, memory_id: str) -> Entry | None:
        user = check_user(user)
        check_memory_id(memory_id)
        with self._lock:
            data = self._users.get(user)
            row = data.rows.get(memory_id) if data else None
            live = row is not None and row.live and not is_expired(row.entry)
            return row.entry if row is not None and live else None

    def read(self, user: UserKey, limit: int | None = None) -> list[Entry]:
        user = check_user(user)
        with self._lock:
            data = self._users.get(user)
            entries = unexpired(r.entry for r in self._live(data)) if data else []
        entries.sort(key=lambda e: (e.updated_at, e.created_at, e.id), reverse=True)
        return entries[:limit] if limit is not None and limit > 0 else entries

    def count(self, user: UserKey) -> int:
        user = check_user(user)
        with self._lock:
            data = self._users.get(user)
            return len(self._live(data)) if data else 0

    def users(self, app_name: str | None = None) -> list[UserKey]:
        app_name = check_app_filter(app_name)
        with self._lock:
            keys = [k for k, d in self._users.items() if self._live(d)]
        return sorted(
            (k for k in keys if app_name is None or k.app_name == app_name),
            key=lambda k: (k.app_name, k.user_id),
        )

    def history(self, user: UserKey, memory_id: str) -> list[HistoryEvent]:
        user = check_user(user)
        check_memory_id(memory_id)
        with self._lock:
            data = self._users.get(user)
            return [h for h in data.history if h.memory_id == memory_id] if data else []

    def search(
        self, user: UserKey, query: str | None = None, options: SearchOptions | None = None
    ) -> list[Entry]:
        user = check_user(user)
        options = resolve_options(query, options)
        if not options.query.strip():
            return []
        query_vector = None
        if self._embeddings is not None:
            query_vector = unit_vector(self._embeddings.embed_query(options.query))
        with self._lock:
            data = self._users.get(user)
            rows = self._live(data) if data else []
            for row in rows:
                if row.doc is None:
                    row.doc = KeywordDoc.build(
                        row.entry.text, row.entry.memory.topics, self.language
                    )
            snapshot = [(r.entry, r.vector, r.doc) for r in rows if r.doc is not None]
        scorer = KeywordScorer.of(
            QueryTerms.of(options, self.language),
            CorpusStats.from_docs(doc for _, _, doc in snapshot),
        )

        def fetch(kind: Kind | None, pool: int) -> Legs:
            pick = [
                (entry, vector, doc)
                for entry, vector, doc in snapshot
                if (kind is None or entry.memory.kind == kind)
                and passes_time(entry.memory.event_time, options.time_after, options.time_before)
            ]
            keyword = [(entry, scorer.score(doc)) for entry, _, doc in pick]
            keyword = sorted((h for h in keyword if h[1] > 0), key=lambda h: -h[1])[:pool]
            if query_vector is None:
                return Legs(vector=None, keyword=keyword)
            vector = [(e, max(0.0, float(v @ query_vector))) for e, v, _ in pick if v is not None]
            return Legs(vector=sorted(vector, key=lambda h: -h[1])[:pool], keyword=keyword)

        return execute_search(options, fetch, self.language, self._time_mentions)

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
        with self._lock:
            data = self._data(user)
            data.rows.pop(entry.id, None)
            fp = fingerprint(entry.memory)
            keyed = any(r.fingerprint == fp and r.live for r in data.rows.values())
            if keyed:
                fp = fingerprint(entry.memory, entry.id)
            row = _Row(entry=entry, fingerprint=fp, vector=self._embed(entry.memory), keyed=keyed)
            data.rows[entry.id] = row
            self._touch(row, entry)
            data.history = [h for h in data.history if h.memory_id != entry.id]
            data.history.extend(h.model_copy(update={"memory_id": entry.id}) for h in history)
            return entry

    # -- expiry -------------------------------------------------------------

    def set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | None) -> bool:
        user = check_user(user)
        check_memory_id(memory_id)
        at = ensure_utc(expires_at, "expires_at") if expires_at is not None else None
        with self._lock:
            data = self._users.get(user)
            row = data.rows.get(memory_id) if data else None
            if row is None or not row.live:
                return False
            row.entry = row.entry.model_copy(update={"expires_at": at})
            return True

    def expired(self, user: UserKey, limit: int | None = None) -> list[str]:
        user = check_user(user)
        now = utcnow()
        with self._lock:
            data = self._users.get(user)
            rows = [r for r in self._live(data) if is_expired(r.entry, now)] if data else []
        rows.sort(key=lambda r: (r.entry.expires_at, r.entry.id))
        return [r.entry.id for r in rows][: limit if limit and limit > 0 else None]

    # -- cursors ------------------------------------------------------------

    def get_cursor(self, user: UserKey, thread_id: str) -> ExtractionCursor | None:
        user = check_user(user)
        check_thread_id(thread_id)
        with self._lock:
            data = self._users.get(user)
            cursor = data.cursors.get(thread_id) if data else None
            if cursor is not None and self._claims.letters:
                pending = len(self._claims.retries(user, thread_id))
                cursor = cursor.model_copy(update={"pending_retries": pending})
            return cursor

    def set_cursor(self, user: UserKey, cursor: ExtractionCursor) -> None:
        user = check_user(user)
        check_cursor(cursor)
        with self._lock:
            self._data(user).cursors[cursor.thread_id] = cursor.model_copy(
                update={"updated_at": utcnow()}
            )

    # -- claims and dead letters ----------------------------------------------

    def claim_thread(
        self, user: UserKey, thread_id: str, owner: str, ttl: float
    ) -> ThreadClaim | None:
        user = check_user(user)
        thread_id, owner = check_claim(thread_id, owner)
        seconds = check_ttl(ttl)
        assert seconds is not None
        with self._lock:
            return self._claims.claim(
                user, thread_id, owner, seconds, self.get_cursor(user, thread_id)
            )

    def save_progress(
        self,
        user: UserKey,
        thread_id: str,
        owner: str,
        *,
        cursor: ExtractionCursor | None = None,
        ttl: float | None = None,
        dead_letter: DeadLetter | None = None,
        resolved: Sequence[str] = (),
    ) -> bool:
        user = check_user(user)
        thread_id, owner = check_claim(thread_id, owner)
        seconds = check_ttl(ttl, optional=True)
        cursor, letter, done = check_progress(user, thread_id, cursor, dead_letter, resolved)
        with self._lock:
            if not self._claims.holds(user, thread_id, owner):
                return False
            if cursor is not None:
                self.set_cursor(user, cursor)
            self._claims.progress(user, thread_id, owner, seconds, letter, done, cursor is not None)
            return True

    def record_failure(
        self, user: UserKey, thread_id: str, owner: str, batch: str, error: str
    ) -> int:
        user = check_user(user)
        thread_id, owner = check_claim(thread_id, owner)
        return self._claims.failure(user, thread_id, str(batch), str(error))

    def release_thread(self, user: UserKey, thread_id: str, owner: str) -> None:
        user = check_user(user)
        thread_id, owner = check_claim(thread_id, owner)
        self._claims.release(user, thread_id, owner)

    def dead_letters(
        self,
        app_name: str | None = None,
        *,
        status: DeadLetterStatus | str | None = None,
        limit: int | None = None,
    ) -> list[DeadLetter]:
        return self._claims.listing(app_name, check_status(status), check_limit(limit))

    def retry_dead_letter(self, letter_id: str) -> DeadLetter | None:
        return self._claims.retry(check_letter_id(letter_id), utcnow())
