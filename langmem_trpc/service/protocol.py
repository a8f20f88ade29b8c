"""The contract every backend implements, sync and async.

`MemoryService` is the port the write path, the LangGraph integration and
the CLI talk to. Every method takes the caller's `UserKey` first and never
reaches another user's rows. `SyncMemoryService` is the base for backends
whose driver is blocking (in-memory, SQLite): its `a*` twins run the sync
method in a worker thread, so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..types import (
    DeadLetter,
    DeadLetterStatus,
    Entry,
    ExtractionCursor,
    HistoryEvent,
    Kind,
    SearchOptions,
    Source,
    ThreadClaim,
    UserKey,
)
from ._core import Limits
from ._language import ENGLISH, Language

__all__ = ["MemoryService", "SyncMemoryService"]


class MemoryService(ABC):
    """Durable, per-user memory with hybrid search, history and extraction cursors.

    Example:
        ```python
        svc = SQLiteMemoryService("memories.db")
        alice = UserKey("support", "alice")
        entry = svc.add(alice, "Prefers dark mode", topics=["ui"])
        svc.update(alice, entry.id, "Prefers light mode")  # same id
        svc.search(alice, "dark or light mode?")
        ```
    """

    #: True when the backend has an embedder and can run the vector leg.
    supports_vectors: bool = False
    #: The tokenizer's language (stemmer, stopwords, search cues); reconcile's
    #: token comparisons use it too. Each backend sets its own (English default).
    language: Language = ENGLISH

    @property
    def limits(self) -> Limits:
        """The text, topic and capacity limits this service enforces."""
        limits = getattr(self, "_limits", None)
        return limits if isinstance(limits, Limits) else Limits()

    # -- writes -------------------------------------------------------------

    @abstractmethod
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
        """Store a memory; idempotent for the same content, which refreshes topics.

        With `memory_id` the call is an upsert under that caller-chosen id.
        """

    @abstractmethod
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
        """Change a memory in place; the id never changes. None keeps a field.

        Compare-and-set: if the memory changed between this call's read and its
        write, the call re-reads it and applies its own fields to the newer
        version (so concurrent updates of different fields all land); after
        `UPDATE_ATTEMPTS` lost rounds it raises `MemoryConflictError(concurrent=True)`
        (PostgreSQL re-reads under its per-user lock, so it never loses a round).
        """

    @abstractmethod
    def delete(self, user: UserKey, memory_id: str, *, source: Source | None = None) -> bool:
        """Soft-delete; False when there was no live memory with that id."""

    @abstractmethod
    def clear(self, user: UserKey, *, source: Source | None = None) -> int:
        """Soft-delete every live memory of the user; returns how many."""

    @abstractmethod
    def purge(self, user: UserKey, memory_id: str | None = None) -> int:
        """Remove rows and their history for good (right to be forgotten)."""

    # -- reads --------------------------------------------------------------

    @abstractmethod
    def get(self, user: UserKey, memory_id: str) -> Entry | None: ...

    @abstractmethod
    def read(self, user: UserKey, limit: int | None = None) -> list[Entry]:
        """Live memories, most recently updated first."""

    @abstractmethod
    def search(
        self, user: UserKey, query: str | None = None, options: SearchOptions | None = None
    ) -> list[Entry]:
        """Ranked live memories; an empty query returns nothing."""

    @abstractmethod
    def history(self, user: UserKey, memory_id: str) -> list[HistoryEvent]:
        """Every change to the memory, oldest first (empty for unknown ids)."""

    @abstractmethod
    def count(self, user: UserKey) -> int:
        """Live memories of the user."""

    @abstractmethod
    def users(self, app_name: str | None = None) -> list[UserKey]:
        """Users with at least one live memory (admin and BaseStore namespaces)."""

    # -- write-path bookkeeping --------------------------------------------

    @abstractmethod
    def get_cursor(self, user: UserKey, thread_id: str) -> ExtractionCursor | None: ...

    @abstractmethod
    def set_cursor(self, user: UserKey, cursor: ExtractionCursor) -> None: ...

    # -- claims and dead letters (see service/_claims.py for the contract) ---

    @abstractmethod
    def claim_thread(
        self, user: UserKey, thread_id: str, owner: str, ttl: float
    ) -> ThreadClaim | None:
        """Take the thread's claim for `ttl` s (free, expired or `owner`'s); None if busy."""

    @abstractmethod
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
        """Under `owner`'s claim, in one transaction: write the cursor (clearing failed
        attempts), the dead letter and the resolved retries; renew the claim for `ttl`
        s, or release it (None). False, with nothing written, if the claim was lost."""

    @abstractmethod
    def record_failure(
        self, user: UserKey, thread_id: str, owner: str, batch: str, error: str
    ) -> int:
        """Count a failed attempt on `batch` (another batch restarts at 1); the count."""

    @abstractmethod
    def release_thread(self, user: UserKey, thread_id: str, owner: str) -> None:
        """Give up `owner`'s claim, if it still holds it."""

    @abstractmethod
    def dead_letters(
        self,
        app_name: str | None = None,
        *,
        status: DeadLetterStatus | str | None = None,
        limit: int | None = None,
    ) -> list[DeadLetter]:
        """Dead letters of every user (admin), oldest first."""

    @abstractmethod
    def retry_dead_letter(self, letter_id: str) -> DeadLetter | None:
        """Queue a dead letter for retry by its thread's next job; None if unknown or done."""

    def restore(self, user: UserKey, entry: Entry, history: Sequence[HistoryEvent] = ()) -> Entry:
        """Write an exported entry back exactly (id, timestamps, content) with its history.

        Used by `langmem-trpc import` for a lossless round trip. An existing
        memory with the same id is replaced.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support restore()")

    async def arestore(
        self, user: UserKey, entry: Entry, history: Sequence[HistoryEvent] = ()
    ) -> Entry:
        return await asyncio.to_thread(self.restore, user, entry, history)

    # -- expiry (MemoryStore's TTL) -----------------------------------------

    def set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | None) -> bool:
        """Set (or clear, with None) when a live memory expires; False when there is none.

        From `expires_at` on, get, read and search hide the memory (count and
        users still include it) until a sweep soft-deletes it. The memory's
        content, `updated_at` and history are untouched.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support set_expiry()")

    async def aset_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | None) -> bool:
        return await asyncio.to_thread(self.set_expiry, user, memory_id, expires_at)

    def expired(self, user: UserKey, limit: int | None = None) -> list[str]:
        """Ids of live memories whose expiry has passed (for a TTL sweep), oldest expiry first."""
        raise NotImplementedError(f"{type(self).__name__} does not support expired()")

    async def aexpired(self, user: UserKey, limit: int | None = None) -> list[str]:
        return await asyncio.to_thread(self.expired, user, limit)

    def as_retriever(self, user: UserKey, **kwargs: Any) -> Any:
        """A LangChain `BaseRetriever` over `user`'s memories, scope fixed.

        Keyword arguments (`k`, `kind`, `time_after`, ...) are those of
        `langmem_trpc.integration.retriever.create_retriever`.
        """
        from ..integration.retriever import create_retriever

        return create_retriever(self, user, **kwargs)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default holds none."""

    # -- async twins --------------------------------------------------------

    @abstractmethod
    async def aadd(
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
    ) -> Entry: ...

    @abstractmethod
    async def aupdate(
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
    ) -> Entry: ...

    @abstractmethod
    async def adelete(
        self, user: UserKey, memory_id: str, *, source: Source | None = None
    ) -> bool: ...

    @abstractmethod
    async def aclear(self, user: UserKey, *, source: Source | None = None) -> int: ...

    @abstractmethod
    async def apurge(self, user: UserKey, memory_id: str | None = None) -> int: ...

    @abstractmethod
    async def aget(self, user: UserKey, memory_id: str) -> Entry | None: ...

    @abstractmethod
    async def aread(self, user: UserKey, limit: int | None = None) -> list[Entry]: ...

    @abstractmethod
    async def asearch(
        self, user: UserKey, query: str | None = None, options: SearchOptions | None = None
    ) -> list[Entry]: ...

    @abstractmethod
    async def ahistory(self, user: UserKey, memory_id: str) -> list[HistoryEvent]: ...

    @abstractmethod
    async def acount(self, user: UserKey) -> int: ...

    @abstractmethod
    async def ausers(self, app_name: str | None = None) -> list[UserKey]: ...

    @abstractmethod
    async def aget_cursor(self, user: UserKey, thread_id: str) -> ExtractionCursor | None: ...

    @abstractmethod
    async def aset_cursor(self, user: UserKey, cursor: ExtractionCursor) -> None: ...

    @abstractmethod
    async def aclaim_thread(
        self, user: UserKey, thread_id: str, owner: str, ttl: float
    ) -> ThreadClaim | None: ...

    @abstractmethod
    async def asave_progress(
        self,
        user: UserKey,
        thread_id: str,
        owner: str,
        *,
        cursor: ExtractionCursor | None = None,
        ttl: float | None = None,
        dead_letter: DeadLetter | None = None,
        resolved: Sequence[str] = (),
    ) -> bool: ...

    @abstractmethod
    async def arecord_failure(
        self, user: UserKey, thread_id: str, owner: str, batch: str, error: str
    ) -> int: ...

    @abstractmethod
    async def arelease_thread(self, user: UserKey, thread_id: str, owner: str) -> None: ...

    @abstractmethod
    async def adead_letters(
        self,
        app_name: str | None = None,
        *,
        status: DeadLetterStatus | str | None = None,
        limit: int | None = None,
    ) -> list[DeadLetter]: ...

    @abstractmethod
    async def aretry_dead_letter(self, letter_id: str) -> DeadLetter | None: ...

    async def aclose(self) -> None:
        self.close()

    async def arelease_loop(self) -> None:  # noqa: B027 - optional hook
        """Close what this service holds bound to the running event loop (an async
        connection pool) and stay usable: the next async call opens afresh. Call it
        before a loop that served the service ends (an app's lifespan shutdown): a
        pool left open on a closing loop can keep it from finishing. Default: none held.
        """

    def __enter__(self) -> MemoryService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> MemoryService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class SyncMemoryService(MemoryService, ABC):
    """Base for blocking backends: each `a*` twin runs its sync method in a thread."""

    async def aadd(self, user: UserKey, text: str, **kwargs: Any) -> Entry:  # type: ignore[override]
        return await asyncio.to_thread(lambda: self.add(user, text, **kwargs))

    async def aupdate(self, user: UserKey, memory_id: str, text: str, **kwargs: Any) -> Entry:  # type: ignore[override]
        return await asyncio.to_thread(lambda: self.update(user, memory_id, text, **kwargs))

    async def adelete(self, user: UserKey, memory_id: str, *, source: Source | None = None) -> bool:
        return await asyncio.to_thread(lambda: self.delete(user, memory_id, source=source))

    async def aclear(self, user: UserKey, *, source: Source | None = None) -> int:
        return await asyncio.to_thread(lambda: self.clear(user, source=source))

    async def apurge(self, user: UserKey, memory_id: str | None = None) -> int:
        return await asyncio.to_thread(self.purge, user, memory_id)

    async def aget(self, user: UserKey, memory_id: str) -> Entry | None:
        return await asyncio.to_thread(self.get, user, memory_id)

    async def aread(self, user: UserKey, limit: int | None = None) -> list[Entry]:
        return await asyncio.to_thread(self.read, user, limit)

    async def asearch(
        self, user: UserKey, query: str | None = None, options: SearchOptions | None = None
    ) -> list[Entry]:
        return await asyncio.to_thread(self.search, user, query, options)

    async def ahistory(self, user: UserKey, memory_id: str) -> list[HistoryEvent]:
        return await asyncio.to_thread(self.history, user, memory_id)

    async def acount(self, user: UserKey) -> int:
        return await asyncio.to_thread(self.count, user)

    async def ausers(self, app_name: str | None = None) -> list[UserKey]:
        return await asyncio.to_thread(self.users, app_name)

    async def aget_cursor(self, user: UserKey, thread_id: str) -> ExtractionCursor | None:
        return await asyncio.to_thread(self.get_cursor, user, thread_id)

    async def aset_cursor(self, user: UserKey, cursor: ExtractionCursor) -> None:
        await asyncio.to_thread(self.set_cursor, user, cursor)

    async def aclaim_thread(
        self, user: UserKey, thread_id: str, owner: str, ttl: float
    ) -> ThreadClaim | None:
        return await asyncio.to_thread(self.claim_thread, user, thread_id, owner, ttl)

    async def asave_progress(
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
        return await asyncio.to_thread(
            lambda: self.save_progress(
                user,
                thread_id,
                owner,
                cursor=cursor,
                ttl=ttl,
                dead_letter=dead_letter,
                resolved=resolved,
            )
        )

    async def arecord_failure(
        self, user: UserKey, thread_id: str, owner: str, batch: str, error: str
    ) -> int:
        return await asyncio.to_thread(self.record_failure, user, thread_id, owner, batch, error)

    async def arelease_thread(self, user: UserKey, thread_id: str, owner: str) -> None:
        await asyncio.to_thread(self.release_thread, user, thread_id, owner)

    async def adead_letters(
        self,
        app_name: str | None = None,
        *,
        status: DeadLetterStatus | str | None = None,
        limit: int | None = None,
    ) -> list[DeadLetter]:
        return await asyncio.to_thread(
            lambda: self.dead_letters(app_name, status=status, limit=limit)
        )

    async def aretry_dead_letter(self, letter_id: str) -> DeadLetter | None:
        return await asyncio.to_thread(self.retry_dead_letter, letter_id)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)
