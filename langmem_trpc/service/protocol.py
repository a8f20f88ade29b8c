"""The contract every backend implements, sync and async.

`MemoryService` is the port the write path, the LangGraph integration and
the CLI talk to. Every method takes the caller's `UserKey` first and never
reaches another user's rows. `SyncMemoryService` is the base for backends
whose driver is blocking (in-memory, SQLite): its `a*` twins run the sync
method in a worker thread, so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from typing_extensions import Self

from ..types import (
    DeadLetter,
    DeadLetterStatus,
    Entry,
    ExtractionCursor,
    HistoryEvent,
    Kind,
    Memory,
    SearchOptions,
    Source,
    ThreadClaim,
    UserKey,
)
from . import _plans
from ._core import Limits, MemoryPatch
from ._language import ENGLISH, Language
from ._steps import Plan
from .capabilities import Capability

T = TypeVar("T")
P = ParamSpec("P")

__all__ = ["MemoryService", "SyncMemoryService"]


def _runs(
    build: Callable[Concatenate[MemoryService, P], Plan[T]],
) -> Callable[Concatenate[MemoryService, P], T]:
    """The write method that runs the plan `build` returns (its signature and docs)."""

    def method(self: MemoryService, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.run_plan(build(self, *args, **kwargs))

    functools.update_wrapper(method, build)
    method.__name__ = build.__name__.lstrip("_")
    method.__qualname__ = method.__qualname__.replace(build.__name__, method.__name__)
    return method


def _aruns(
    build: Callable[Concatenate[MemoryService, P], Plan[T]],
) -> Callable[Concatenate[MemoryService, P], Coroutine[Any, Any, T]]:
    """The async twin of `_runs(build)`: same parameters, `arun_plan`."""

    async def method(self: MemoryService, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.arun_plan(build(self, *args, **kwargs))

    functools.update_wrapper(method, build)
    method.__name__ = "a" + build.__name__.lstrip("_")
    method.__qualname__ = method.__qualname__.replace(build.__name__, method.__name__)
    method.__doc__ = f"Async twin of `{build.__name__.lstrip('_')}`."
    return method


class MemoryService(ABC):
    """Durable, per-user memory with hybrid search, history and extraction cursors.

    Example:
        ```python
        svc = langmem_trpc.open("memories.db")  # a SQLiteMemoryService, set up
        alice = UserKey("support", "alice")
        entry = svc.add(alice, "Prefers dark mode", topics=["ui"])
        svc.update(alice, entry.id, "Prefers light mode")  # same id
        svc.search(alice, "dark or light mode?")
        ```
    """

    #: The tokenizer's language (stemmer, stopwords, search cues); reconcile's
    #: token comparisons use it too. Each backend sets its own (English default).
    language: Language = ENGLISH

    @property
    def capabilities(self) -> frozenset[Capability]:
        """What this instance can do beyond the contract (see `Capability`).

        Each backend declares its own set (the default declares none); the
        conformance suite runs the tests of every declared capability.
        """
        return frozenset()

    @property
    def supports_vectors(self) -> bool:
        """True when an embedder is configured (`Capability.VECTORS`)."""
        return Capability.VECTORS in self.capabilities

    @property
    def limits(self) -> Limits:
        """The text, topic and capacity limits this service enforces."""
        limits = getattr(self, "_limits", None)
        return limits if isinstance(limits, Limits) else Limits()

    # -- writes -------------------------------------------------------------
    #
    # Every write is a plan of `service/_plans.py` (the write rules, once) run by
    # the backend's step executor (`run_plan` / `arun_plan`, see `_steps.py`).

    @abstractmethod
    def run_plan(self, plan: Plan[T]) -> T:
        """Run a write plan with this backend's step executor; returns its result."""

    @abstractmethod
    async def arun_plan(self, plan: Plan[T]) -> T:
        """Async twin of `run_plan`."""

    def _add(
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
    ) -> Plan[Entry]:
        """Store a memory; idempotent for the same content, which refreshes topics.

        With `memory_id` the call is an upsert under that caller-chosen id. Content
        the user deleted comes back under its old id. With a capacity, a full store
        evicts its least recently written memory (history source actor "capacity")
        or, with `on_capacity="error"`, raises `CapacityExceededError`.
        """
        return _plans.add(
            user, text, limits=self.limits, memory_id=memory_id, source=source, topics=topics,
            kind=kind, event_time=event_time, participants=participants, location=location,
            metadata=metadata,
        )  # fmt: skip

    add = _runs(_add)
    aadd = _aruns(_add)

    def add_many(
        self, user: UserKey, items: Sequence[str | Memory], *, source: Source | None = None
    ) -> list[Entry]:
        """`add` of each item (a text, or a `Memory`), in order, as one transaction.

        Returns the entries in input order, as `add` would have returned them
        (a duplicate's merged entry, a revived one under its old id). Every item is
        validated first: a bad one raises naming its field and nothing is stored;
        the capacity policy raising also leaves nothing stored.
        """
        return self.run_plan(_plans.add_many(user, items, limits=self.limits, source=source))

    async def aadd_many(
        self, user: UserKey, items: Sequence[str | Memory], *, source: Source | None = None
    ) -> list[Entry]:
        """Async twin of `add_many`."""
        plan = _plans.add_many(user, items, limits=self.limits, source=source)
        return await self.arun_plan(plan)

    def _update(
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
    ) -> Plan[Entry]:
        """Change a memory in place; the id never changes. None keeps a field.

        Compare-and-set: if the memory changed between this call's read and its
        write, the call applies its own fields to the newer version under the
        user's write lock (so concurrent updates of different fields all land).
        New content that another live memory already holds raises `MemoryConflictError`.
        """
        patch = MemoryPatch(text, topics, kind, event_time, participants, location, metadata)
        return _plans.update(user, memory_id, patch, limits=self.limits, source=source)

    update = _runs(_update)
    aupdate = _aruns(_update)

    def delete(self, user: UserKey, memory_id: str, *, source: Source | None = None) -> bool:
        """Soft-delete; False when there was no live memory with that id."""
        return bool(self.run_plan(_plans.delete(user, memory_id, source=source)))

    async def adelete(self, user: UserKey, memory_id: str, *, source: Source | None = None) -> bool:
        return bool(await self.arun_plan(_plans.delete(user, memory_id, source=source)))

    def clear(self, user: UserKey, *, source: Source | None = None) -> int:
        """Soft-delete every live memory of the user; returns how many."""
        return self.run_plan(_plans.clear(user, source=source))

    async def aclear(self, user: UserKey, *, source: Source | None = None) -> int:
        return await self.arun_plan(_plans.clear(user, source=source))

    def purge(self, user: UserKey, memory_id: str | None = None) -> int:
        """Remove rows and their history for good (right to be forgotten)."""
        return self.run_plan(_plans.purge(user, memory_id))

    async def apurge(self, user: UserKey, memory_id: str | None = None) -> int:
        return await self.arun_plan(_plans.purge(user, memory_id))

    def restore(self, user: UserKey, entry: Entry, history: Sequence[HistoryEvent] = ()) -> Entry:
        """Write an exported entry back exactly (id, timestamps, content, expiry) with its
        history.

        Used by `langmem-trpc import` for a lossless round trip. An existing
        memory with the same id is replaced.
        """
        return self.run_plan(_plans.restore(user, entry, history))

    async def arestore(
        self, user: UserKey, entry: Entry, history: Sequence[HistoryEvent] = ()
    ) -> Entry:
        return await self.arun_plan(_plans.restore(user, entry, history))

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

    # -- lifecycle -------------------------------------------------------------

    def setup(self) -> None:  # noqa: B027 - optional hook
        """Create or migrate what the store needs; idempotent, safe to run concurrently.

        `langmem_trpc.open()` runs it. The default needs nothing (in-memory);
        SQLite applies pending migrations (it also does when opened);
        PostgreSQL creates the extension and applies pending migrations.
        """

    async def asetup(self) -> None:
        """Async twin of `setup()` (the default runs it in a worker thread)."""
        await asyncio.to_thread(self.setup)

    def index_pending(self, user: UserKey | None = None) -> int:
        """Run the background index step for writes not yet indexed (of `user`, or of
        every user); returns how many it indexed. Only backends that declare
        `Capability.DEFERRED_INDEXING` defer any; the default has none to index."""
        return 0

    async def aindex_pending(self, user: UserKey | None = None) -> int:
        """Async twin of `index_pending()`."""
        return await asyncio.to_thread(self.index_pending, user)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what this service holds (connections, pools, threads); idempotent.

        The default holds none. `with service:` and `async with service:` call
        `close()` / `aclose()` on exit.
        """

    # -- async twins --------------------------------------------------------

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
        """Async twin of `close()`; idempotent."""
        self.close()

    async def arelease_loop(self) -> None:  # noqa: B027 - optional hook
        """Close what this service holds bound to the running event loop (an async
        connection pool) and stay usable: the next async call opens afresh. Call it
        before a loop that served the service ends (an app's lifespan shutdown): a
        pool left open on a closing loop can keep it from finishing. Default: none held.
        """

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class SyncMemoryService(MemoryService, ABC):
    """Base for blocking backends: each `a*` twin runs its sync method in a thread."""

    async def arun_plan(self, plan: Plan[T]) -> T:
        return await asyncio.to_thread(self.run_plan, plan)

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
