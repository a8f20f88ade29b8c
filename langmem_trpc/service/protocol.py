"""The contract every backend implements, sync and async.

`MemoryService` is the port the write path, the LangGraph integration and
the CLI talk to. Every method takes the caller's `UserKey` first and never
reaches another user's rows. The write methods and the cursor, claim and
dead-letter methods and the reads are defined here once, sync and async: each
validates its arguments into a write plan of `plans.py` (run by `run_plan`, the
backend's step executor), a read plan of `reads.py` (run by `run_read`) or a
`ClaimOp` of `claims.py` (run by `run_claim_op`), and its `a*` twin does the
same through `arun_plan` / `arun_read` / `arun_claim_op`. `SyncMemoryService`
is the base for backends whose driver is blocking (in-memory, SQLite,
LanceDB): it runs those three in a worker thread (`asyncio.to_thread`), so the
event loop never blocks.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

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
from . import claims as c
from . import plans, reads, validity
from .capabilities import Capability
from .claims import ClaimOp
from .language import ENGLISH, Language
from .periods import TimeMentions
from .reads import ReadPlan
from .rules import (
    Limits,
    MemoryPatch,
    check_app_filter,
    check_cursor,
    check_memory_id,
    check_read_limit,
    check_thread_id,
    check_user,
    resolve_options,
)
from .steps import Plan

T = TypeVar("T")

__all__ = ["MemoryService", "SyncMemoryService"]


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

    # -- writes: each validates into a plan of `plans.py` and runs it ----------

    @abstractmethod
    def run_plan(self, plan: Plan[T]) -> T:
        """Run a write plan with this backend's step executor; returns its result."""

    @abstractmethod
    async def arun_plan(self, plan: Plan[T]) -> T:
        """Async twin of `run_plan`."""

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
        valid_from: datetime | str | None = None,
        valid_until: datetime | str | None = None,
    ) -> Entry:
        """Store a memory; idempotent for the same content, which refreshes topics.

        With `memory_id` the call is an upsert under that caller-chosen id. Content
        the user deleted comes back under its old id. With a capacity, a full store
        evicts its least recently written memory (history source actor "capacity")
        or, with `on_capacity="error"`, raises `CapacityExceededError`.

        Business time (`service.validity`): `valid_from` (when it became true)
        defaults to `event_time`, else now; `valid_until` (when it stops being true,
        after `valid_from`) becomes `valid_to`. Both read like `event_time`, but a
        bare date as `valid_until` means through its end ("2030-07-24": until the
        midnight after), as the extractor's tools read it. Adding
        content whose held version has lapsed adds a new version that supersedes it.
        """
        plan = plans.add(
            user,
            text,
            limits=self.limits,
            memory_id=memory_id,
            source=source,
            valid_from=valid_from,
            valid_until=valid_until,
            topics=topics,
            kind=kind,
            event_time=event_time,
            participants=participants,
            location=location,
            metadata=metadata,
        )
        return self.run_plan(plan)

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
        valid_from: datetime | str | None = None,
        valid_until: datetime | str | None = None,
    ) -> Entry:
        """Async twin of `add`."""
        plan = plans.add(
            user,
            text,
            limits=self.limits,
            memory_id=memory_id,
            source=source,
            valid_from=valid_from,
            valid_until=valid_until,
            topics=topics,
            kind=kind,
            event_time=event_time,
            participants=participants,
            location=location,
            metadata=metadata,
        )
        return await self.arun_plan(plan)

    def add_many(
        self, user: UserKey, items: Sequence[str | Memory], *, source: Source | None = None
    ) -> list[Entry]:
        """`add` of each item (a text, or a `Memory`), in order, as one transaction.

        Returns the entries in input order, as `add` would have returned them
        (a duplicate's merged entry, a revived one under its old id). Every item is
        validated first: a bad one raises naming its field and nothing is stored;
        the capacity policy raising also leaves nothing stored.
        """
        return self.run_plan(plans.add_many(user, items, limits=self.limits, source=source))

    async def aadd_many(
        self, user: UserKey, items: Sequence[str | Memory], *, source: Source | None = None
    ) -> list[Entry]:
        """Async twin of `add_many`."""
        plan = plans.add_many(user, items, limits=self.limits, source=source)
        return await self.arun_plan(plan)

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
        supersede: bool = False,
        valid_from: datetime | str | None = None,
        valid_until: datetime | str | None = None,
    ) -> Entry:
        """Change a memory in place; the id never changes. None keeps a field.

        Compare-and-set: if the memory changed between this call's read and its
        write, the call applies its own fields to the newer version under the
        user's write lock (so concurrent updates of different fields all land).
        New content that another current memory already holds raises
        `MemoryConflictError`. `valid_until` sets when the memory stops being true
        (a bare date: through its end, as on `add`).

        `supersede=True` (facts only: an episode raises `InvalidInputError`) keeps
        the old version when the content changes: the new content becomes a new
        memory (a new id, returned) valid from `valid_from` (else a new
        `event_time`, else now), and the old one is closed (`valid_to`,
        `superseded_by`), found again by `as_of`, `versions` and `get`. Superseding
        a superseded version raises `MemoryConflictError` naming the current one;
        superseding a keyed memory (added with `memory_id=`) raises
        `InvalidInputError`: its key would name the closed version, so it is
        updated in place. Without a content change it is an update in place.
        """
        patch = MemoryPatch(text, topics, kind, event_time, participants, location, metadata)
        plan = plans.update(
            user,
            memory_id,
            patch,
            limits=self.limits,
            source=source,
            supersede=supersede,
            valid_from=valid_from,
            valid_until=valid_until,
        )
        return self.run_plan(plan)

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
        supersede: bool = False,
        valid_from: datetime | str | None = None,
        valid_until: datetime | str | None = None,
    ) -> Entry:
        """Async twin of `update`."""
        patch = MemoryPatch(text, topics, kind, event_time, participants, location, metadata)
        plan = plans.update(
            user,
            memory_id,
            patch,
            limits=self.limits,
            source=source,
            supersede=supersede,
            valid_from=valid_from,
            valid_until=valid_until,
        )
        return await self.arun_plan(plan)

    def delete(self, user: UserKey, memory_id: str, *, source: Source | None = None) -> bool:
        """Soft-delete; False when there was no live memory with that id."""
        return self.run_plan(plans.delete(user, memory_id, source=source))

    async def adelete(self, user: UserKey, memory_id: str, *, source: Source | None = None) -> bool:
        """Async twin of `delete`."""
        return await self.arun_plan(plans.delete(user, memory_id, source=source))

    def clear(self, user: UserKey, *, source: Source | None = None) -> int:
        """Soft-delete every live memory of the user; returns how many."""
        return self.run_plan(plans.clear(user, source=source))

    async def aclear(self, user: UserKey, *, source: Source | None = None) -> int:
        """Async twin of `clear`."""
        return await self.arun_plan(plans.clear(user, source=source))

    def purge(self, user: UserKey, memory_id: str | None = None) -> int:
        """Remove rows and their history for good (right to be forgotten)."""
        return self.run_plan(plans.purge(user, memory_id))

    async def apurge(self, user: UserKey, memory_id: str | None = None) -> int:
        """Async twin of `purge`."""
        return await self.arun_plan(plans.purge(user, memory_id))

    def restore(self, user: UserKey, entry: Entry, history: Sequence[HistoryEvent] = ()) -> Entry:
        """Write an exported entry back exactly (id, timestamps, content, expiry,
        validity and supersede link) with its history.

        Used by `langmem-trpc import` for a lossless round trip. An existing
        memory with the same id is replaced.
        """
        return self.run_plan(plans.restore(user, entry, history))

    async def arestore(
        self, user: UserKey, entry: Entry, history: Sequence[HistoryEvent] = ()
    ) -> Entry:
        """Async twin of `restore`."""
        return await self.arun_plan(plans.restore(user, entry, history))

    def undelete(self, user: UserKey, memory_id: str, *, source: Source | None = None) -> Entry:
        """Bring a soft-deleted memory back as it was: same id, every field, a
        `restore` history event. A live memory is returned unchanged; a purged or
        unknown id raises `MemoryNotFoundError`; content another live memory holds
        raises `MemoryConflictError`; the capacity policy applies as for an add.
        """
        return self.run_plan(plans.undelete(user, memory_id, limits=self.limits, source=source))

    async def aundelete(
        self, user: UserKey, memory_id: str, *, source: Source | None = None
    ) -> Entry:
        """Async twin of `undelete`."""
        plan = plans.undelete(user, memory_id, limits=self.limits, source=source)
        return await self.arun_plan(plan)

    def restore_version(
        self, user: UserKey, memory_id: str, *, source: Source | None = None
    ) -> Entry:
        """Make a superseded version current again, undoing the supersede: the
        chain's current version is closed as never true (`valid_to` = its
        `valid_from`, `superseded_by` = this id), so is each version between
        them (keeping its link), and this one reopened (history: SUPERSEDE on
        each closed one, RESTORE on this one). A current id is returned
        unchanged; an unknown or deleted id raises `MemoryNotFoundError`; content
        another current memory holds raises `MemoryConflictError`.
        """
        return self.run_plan(plans.restore_version(user, memory_id, source=source))

    async def arestore_version(
        self, user: UserKey, memory_id: str, *, source: Source | None = None
    ) -> Entry:
        """Async twin of `restore_version`."""
        return await self.arun_plan(plans.restore_version(user, memory_id, source=source))

    def versions(self, user: UserKey, memory_id: str) -> list[Entry]:
        """Every version of the memory, from any version's id, oldest first (in
        supersede order, the current one last); [] for an unknown or deleted id."""
        return self.run_plan(plans.versions(user, memory_id))

    async def aversions(self, user: UserKey, memory_id: str) -> list[Entry]:
        """Async twin of `versions`."""
        return await self.arun_plan(plans.versions(user, memory_id))

    # -- reads: each validates into a read plan of `reads.py` and runs it ------

    @abstractmethod
    def run_read(self, plan: ReadPlan) -> Any:
        """Run a read plan (`service.reads`) with this backend's read executor; returns
        its result."""

    @abstractmethod
    async def arun_read(self, plan: ReadPlan) -> Any:
        """Async twin of `run_read`."""

    @property
    def time_mentions(self) -> TimeMentions | None:
        """This instance's cache of which memory texts say a time (search ranking reads
        it); None: ranking tests each text again."""
        return None

    def get(self, user: UserKey, memory_id: str) -> Entry | None:
        """The memory with this id, or None (unknown, deleted, or past its expiry).
        A superseded or lapsed version is returned too, marked by its fields
        (`superseded_by`, `valid_to`): the caller asked for it by id."""
        found: Entry | None = self.run_read(reads.get(check_user(user), check_memory_id(memory_id)))
        return found

    async def aget(self, user: UserKey, memory_id: str) -> Entry | None:
        """Async twin of `get`."""
        plan = reads.get(check_user(user), check_memory_id(memory_id))
        found: Entry | None = await self.arun_read(plan)
        return found

    def read(
        self,
        user: UserKey,
        limit: int | None = None,
        *,
        as_of: datetime | str | None = None,
        include_superseded: bool = False,
    ) -> list[Entry]:
        """Current memories, most recently updated first: at most `limit` (an integer,
        `rules.check_read_limit`; None or 0 and less: all of them). `as_of` returns
        what was true then, `include_superseded` every version (`validity.check_view`)."""
        view = validity.check_view(as_of, include_superseded)
        rows: list[Entry] = self.run_read(
            reads.read(check_user(user), check_read_limit(limit), view)
        )
        return rows

    async def aread(
        self,
        user: UserKey,
        limit: int | None = None,
        *,
        as_of: datetime | str | None = None,
        include_superseded: bool = False,
    ) -> list[Entry]:
        """Async twin of `read`."""
        view = validity.check_view(as_of, include_superseded)
        plan = reads.read(check_user(user), check_read_limit(limit), view)
        rows: list[Entry] = await self.arun_read(plan)
        return rows

    def deleted(self, user: UserKey, limit: int | None = None) -> list[Entry]:
        """Soft-deleted (not purged) memories, most recently deleted first, as they were
        when deleted (what `undelete` brings back); `limit` as for `read`."""
        rows: list[Entry] = self.run_read(reads.deleted(check_user(user), check_read_limit(limit)))
        return rows

    async def adeleted(self, user: UserKey, limit: int | None = None) -> list[Entry]:
        """Async twin of `deleted`."""
        plan = reads.deleted(check_user(user), check_read_limit(limit))
        rows: list[Entry] = await self.arun_read(plan)
        return rows

    def search(
        self, user: UserKey, query: str | None = None, options: SearchOptions | None = None
    ) -> list[Entry]:
        """Ranked current memories (`SearchOptions.as_of` and `include_superseded`
        choose other versions); an empty query returns nothing."""
        user = check_user(user)
        resolved = resolve_options(query, options)
        plan = reads.search(user, resolved, self.language, self.time_mentions)
        found: list[Entry] = self.run_read(plan)
        return found

    async def asearch(
        self, user: UserKey, query: str | None = None, options: SearchOptions | None = None
    ) -> list[Entry]:
        """Async twin of `search`."""
        user = check_user(user)
        resolved = resolve_options(query, options)
        plan = reads.search(user, resolved, self.language, self.time_mentions)
        found: list[Entry] = await self.arun_read(plan)
        return found

    def history(self, user: UserKey, memory_id: str) -> list[HistoryEvent]:
        """Every change to the memory, oldest first (empty for unknown ids)."""
        plan = reads.history(check_user(user), check_memory_id(memory_id))
        events: list[HistoryEvent] = self.run_read(plan)
        return events

    async def ahistory(self, user: UserKey, memory_id: str) -> list[HistoryEvent]:
        """Async twin of `history`."""
        plan = reads.history(check_user(user), check_memory_id(memory_id))
        events: list[HistoryEvent] = await self.arun_read(plan)
        return events

    def count(self, user: UserKey) -> int:
        """Live memories of the user that no newer version superseded (a lapsed or
        expired one still counts until it is superseded or deleted)."""
        found: int = self.run_read(reads.count(check_user(user)))
        return found

    async def acount(self, user: UserKey) -> int:
        """Async twin of `count`."""
        found: int = await self.arun_read(reads.count(check_user(user)))
        return found

    def users(self, app_name: str | None = None) -> list[UserKey]:
        """Users with at least one live memory that is not superseded (admin and
        BaseStore namespaces)."""
        found: list[UserKey] = self.run_read(reads.users(check_app_filter(app_name)))
        return found

    async def ausers(self, app_name: str | None = None) -> list[UserKey]:
        """Async twin of `users`."""
        found: list[UserKey] = await self.arun_read(reads.users(check_app_filter(app_name)))
        return found

    # -- cursors, claims and dead letters: each validates into a `ClaimOp` ------

    @abstractmethod
    def run_claim_op(self, op: ClaimOp[T]) -> T:
        """Run a validated cursor, claim or dead-letter op; returns its method's result."""

    @abstractmethod
    async def arun_claim_op(self, op: ClaimOp[T]) -> T:
        """Async twin of `run_claim_op`."""

    def get_cursor(self, user: UserKey, thread_id: str) -> ExtractionCursor | None:
        """The thread's extraction cursor (`pending_retries` counted now); None if unset."""
        return self.run_claim_op(c.GetCursor(check_user(user), check_thread_id(thread_id)))

    async def aget_cursor(self, user: UserKey, thread_id: str) -> ExtractionCursor | None:
        """Async twin of `get_cursor`."""
        op = c.GetCursor(check_user(user), check_thread_id(thread_id))
        return await self.arun_claim_op(op)

    def set_cursor(self, user: UserKey, cursor: ExtractionCursor) -> None:
        """Write the thread's cursor outside any claim (stamped with `updated_at` now)."""
        return self.run_claim_op(c.SetCursor(check_user(user), check_cursor(cursor)))

    async def aset_cursor(self, user: UserKey, cursor: ExtractionCursor) -> None:
        """Async twin of `set_cursor`."""
        return await self.arun_claim_op(c.SetCursor(check_user(user), check_cursor(cursor)))

    def claim_thread(
        self, user: UserKey, thread_id: str, owner: str, ttl: float
    ) -> ThreadClaim | None:
        """Take the thread's claim for `ttl` s (free, expired or `owner`'s); None if busy."""
        op = c.ClaimThread(*c.check_claim(user, thread_id, owner), c.check_ttl(ttl))
        return self.run_claim_op(op)

    async def aclaim_thread(
        self, user: UserKey, thread_id: str, owner: str, ttl: float
    ) -> ThreadClaim | None:
        """Async twin of `claim_thread`."""
        op = c.ClaimThread(*c.check_claim(user, thread_id, owner), c.check_ttl(ttl))
        return await self.arun_claim_op(op)

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
        op = _progress(user, thread_id, owner, cursor, ttl, dead_letter, resolved)
        return self.run_claim_op(op)

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
        """Async twin of `save_progress`."""
        op = _progress(user, thread_id, owner, cursor, ttl, dead_letter, resolved)
        return await self.arun_claim_op(op)

    def record_failure(
        self, user: UserKey, thread_id: str, owner: str, batch: str, error: str
    ) -> int:
        """Count a failed attempt on `batch` (another batch restarts at 1); the count."""
        owned = c.check_claim(user, thread_id, owner)
        return self.run_claim_op(c.RecordFailure(*owned, str(batch), str(error)[: c.MAX_ERROR]))

    async def arecord_failure(
        self, user: UserKey, thread_id: str, owner: str, batch: str, error: str
    ) -> int:
        """Async twin of `record_failure`."""
        owned = c.check_claim(user, thread_id, owner)
        op = c.RecordFailure(*owned, str(batch), str(error)[: c.MAX_ERROR])
        return await self.arun_claim_op(op)

    def release_thread(self, user: UserKey, thread_id: str, owner: str) -> None:
        """Give up `owner`'s claim, if it still holds it."""
        return self.run_claim_op(c.ReleaseThread(*c.check_claim(user, thread_id, owner)))

    async def arelease_thread(self, user: UserKey, thread_id: str, owner: str) -> None:
        """Async twin of `release_thread`."""
        op = c.ReleaseThread(*c.check_claim(user, thread_id, owner))
        return await self.arun_claim_op(op)

    def dead_letters(
        self,
        app_name: str | None = None,
        *,
        status: DeadLetterStatus | str | None = None,
        limit: int | None = None,
    ) -> list[DeadLetter]:
        """Dead letters of every user (admin), oldest first."""
        app = check_app_filter(app_name)
        op = c.ListDeadLetters(app, c.check_status(status), c.check_limit(limit))
        return self.run_claim_op(op)

    async def adead_letters(
        self,
        app_name: str | None = None,
        *,
        status: DeadLetterStatus | str | None = None,
        limit: int | None = None,
    ) -> list[DeadLetter]:
        """Async twin of `dead_letters`."""
        app = check_app_filter(app_name)
        op = c.ListDeadLetters(app, c.check_status(status), c.check_limit(limit))
        return await self.arun_claim_op(op)

    def retry_dead_letter(self, letter_id: str) -> DeadLetter | None:
        """Queue a dead letter for retry by its thread's next job; None if unknown or done."""
        return self.run_claim_op(c.RetryDeadLetter(c.check_letter_id(letter_id)))

    async def aretry_dead_letter(self, letter_id: str) -> DeadLetter | None:
        """Async twin of `retry_dead_letter`."""
        return await self.arun_claim_op(c.RetryDeadLetter(c.check_letter_id(letter_id)))

    # -- expiry (MemoryStore's TTL) -----------------------------------------

    def set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | str | None) -> bool:
        """Set (or clear, with None) when a live memory expires; False when there is none.

        `expires_at` is an aware datetime or a date string, read like `event_time`
        (zone-less means UTC); anything else, a blank string or an instant outside
        years 1-9999 in UTC is an `InvalidTimeError`. From `expires_at` on, get, read
        and search hide the memory (count and users still include it) until a sweep
        soft-deletes it. The memory's content, `updated_at` and history are untouched.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support set_expiry()")

    async def aset_expiry(
        self, user: UserKey, memory_id: str, expires_at: datetime | str | None
    ) -> bool:
        """Async twin of `set_expiry` (runs it in a worker thread)."""
        return await asyncio.to_thread(self.set_expiry, user, memory_id, expires_at)

    def expired(self, user: UserKey, limit: int | None = None) -> list[str]:
        """Ids of live memories whose expiry has passed (for a TTL sweep), oldest expiry first."""
        raise NotImplementedError(f"{type(self).__name__} does not support expired()")

    async def aexpired(self, user: UserKey, limit: int | None = None) -> list[str]:
        """Async twin of `expired` (runs it in a worker thread)."""
        return await asyncio.to_thread(self.expired, user, limit)

    # -- lifecycle -------------------------------------------------------------

    def setup(self) -> None:  # noqa: B027 - optional hook
        """Create or migrate what the store needs; idempotent, safe to run concurrently.

        `langmem_trpc.open()` runs it. The default needs nothing (in-memory);
        SQLite applies pending migrations (it also does when opened);
        PostgreSQL creates the extension and applies pending migrations.
        """

    async def asetup(self) -> None:
        """Async twin of `setup` (runs it in a worker thread)."""
        await asyncio.to_thread(self.setup)

    def index_pending(self, user: UserKey | None = None) -> int:
        """Run the background index step for writes not yet indexed (of `user`, or of
        every user); returns how many it indexed. Only backends that declare
        `Capability.DEFERRED_INDEXING` defer any; the default has none to index."""
        return 0

    async def aindex_pending(self, user: UserKey | None = None) -> int:
        """Async twin of `index_pending` (runs it in a worker thread)."""
        return await asyncio.to_thread(self.index_pending, user)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what this service holds (connections, pools, threads); idempotent.

        The default holds none. `with service:` and `async with service:` call
        `close()` / `aclose()` on exit.
        """

    # -- async twins --------------------------------------------------------

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


def _progress(
    user: UserKey,
    thread_id: str,
    owner: str,
    cursor: ExtractionCursor | None,
    ttl: float | None,
    dead_letter: DeadLetter | None,
    resolved: Sequence[str],
) -> c.SaveProgress:
    """`save_progress`'s arguments, validated into its op."""
    user, thread_id, owner = c.check_claim(user, thread_id, owner)
    seconds = None if ttl is None else c.check_ttl(ttl)
    checked, letter, done = c.check_progress(user, thread_id, cursor, dead_letter, resolved)
    return c.SaveProgress(user, thread_id, owner, checked, seconds, letter, done)


class SyncMemoryService(MemoryService, ABC):
    """Base for blocking backends: each `a*` twin runs its sync method (a subclass's
    override of it) in a worker thread, so the event loop never blocks."""

    async def arun_plan(self, plan: Plan[T]) -> T:
        """Async twin of `run_plan` (runs it in a worker thread)."""
        return await asyncio.to_thread(self.run_plan, plan)

    async def arun_claim_op(self, op: ClaimOp[T]) -> T:
        """Async twin of `run_claim_op` (runs it in a worker thread)."""
        return await asyncio.to_thread(self.run_claim_op, op)

    async def arun_read(self, plan: ReadPlan) -> Any:
        """Async twin of `run_read` (runs it in a worker thread)."""
        return await asyncio.to_thread(self.run_read, plan)

    async def aclose(self) -> None:
        """Async twin of `close` (runs it in a worker thread)."""
        await asyncio.to_thread(self.close)
