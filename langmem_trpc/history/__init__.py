"""Bring your history: extract memories from past threads and transcripts, on their own clocks.

Each thread goes through the live write path (`AutoMemoryWorker.process`, i.e.
`run_job`): the same delta against the same durable cursor, claims, checkers,
extractor, reconcile and dead letters as `MemoryCheckpointer`'s jobs. So a second
backfill extracts nothing, a live run after a backfill only what is new (and the
other way round), and a killed backfill started again resumes after the last batch
it finished. What differs is the clock: every message carries its time (its own,
else the first checkpoint that holds it), batches end at idle gaps, and each batch's
reference date ("today" for "last week") is its latest message time.

This layer sits above `extraction`, `queue` and `integration`; nothing below imports it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._time import ensure_utc
from ..errors import ConfigurationError
from ..extraction.checkers import Checker
from ..extraction.extractor import Extractor
from ..extraction.worker import AutoMemoryWorker
from ..service.protocol import MemoryService
from ._report import BackfillProgress, BackfillReport, Tally
from ._run import Selection, by_user, enqueue_all, plan_all, run_users
from ._threads import (
    HistoryThread,
    IdentityMap,
    SkippedThread,
    stored_thread_ids,
    thread_config,
    thread_from_history,
    thread_ids,
)
from ._transcripts import TranscriptError, read_file, read_messages_dump, read_transcript_lines

if TYPE_CHECKING:
    from ..queue import PostgresJobQueue

__all__ = [
    "DEFAULT_IDLE_GAP",
    "BackfillProgress",
    "BackfillReport",
    "HistoryThread",
    "IdentityMap",
    "SkippedThread",
    "TranscriptError",
    "abackfill",
    "aread_checkpointer",
    "backfill",
    "read_checkpointer",
    "read_messages_dump",
    "read_transcript_lines",
    "read_transcripts",
]

DEFAULT_IDLE_GAP = timedelta(hours=6)
Source = Any
"""A checkpointer (`BaseCheckpointSaver`), a transcript file path, or `HistoryThread`s."""


def read_checkpointer(
    saver: Any,
    *,
    identity: IdentityMap | None = None,
    app_name: str | None = None,
    messages_key: str = "messages",
) -> list[HistoryThread | SkippedThread]:
    """Every thread of `saver` (`list(None)`), from its latest root-graph state."""
    return [
        thread_from_history(
            tid,
            list(saver.list(thread_config(tid))),
            identity=identity,
            app_name=app_name,
            messages_key=messages_key,
        )
        for tid in stored_thread_ids(saver) or thread_ids(saver.list(None))
    ]


async def aread_checkpointer(
    saver: Any,
    *,
    identity: IdentityMap | None = None,
    app_name: str | None = None,
    messages_key: str = "messages",
) -> list[HistoryThread | SkippedThread]:
    """`read_checkpointer` through `alist` (a sync-only saver is read in a thread)."""
    try:
        ids = thread_ids([item async for item in saver.alist(None)])
    except NotImplementedError:
        return await asyncio.to_thread(
            read_checkpointer,
            saver,
            identity=identity,
            app_name=app_name,
            messages_key=messages_key,
        )
    threads: list[HistoryThread | SkippedThread] = []
    for tid in ids:
        history = [item async for item in saver.alist(thread_config(tid))]
        threads.append(
            thread_from_history(
                tid, history, identity=identity, app_name=app_name, messages_key=messages_key
            )
        )
    return threads


def read_transcripts(path: str | Path, **dump: Any) -> list[HistoryThread]:
    """A JSONL transcript, or a `messages_to_dict` dump with `user=` and `thread_id=`;
    `TranscriptError` (nothing read) lists every malformed line as `line N: field: problem`."""
    return read_file(path, **dump)


def _options(
    idle_gap: timedelta | float | None,
    since: datetime | None,
    until: datetime | None,
    users: Collection[str] | None,
    concurrency: int,
) -> tuple[float | None, Selection]:
    if concurrency < 1:
        raise ConfigurationError("concurrency must be >= 1")
    gap = idle_gap.total_seconds() if isinstance(idle_gap, timedelta) else idle_gap
    if gap is not None and gap <= 0:
        raise ConfigurationError("idle_gap must be > 0 (or None: batches end at batch_messages)")
    window = [
        None if t is None else ensure_utc(t, name)
        for t, name in ((since, "since"), (until, "until"))
    ]
    chosen = None if users is None else frozenset(users)
    return gap, Selection(chosen, window[0], window[1])


def backfill(
    source: Source,
    service: MemoryService | None = None,
    extractor: Extractor | None = None,
    *,
    queue: PostgresJobQueue | None = None,
    identity: IdentityMap | None = None,
    app_name: str | None = None,
    users: Collection[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    idle_gap: timedelta | float | None = DEFAULT_IDLE_GAP,
    batch_messages: int = 50,
    concurrency: int = 4,
    dry_run: bool = False,
    job_timeout: float | None = 300.0,
    claim_ttl: float | None = None,
    max_attempts: int = 3,
    policy: str = "merge_similar",
    checkers: Sequence[Checker] = (),
    messages_key: str = "messages",
    progress: Callable[[BackfillProgress], None] | None = None,
) -> BackfillReport:
    """Extract memories from past conversations through the live write path.

    Args:
        source: a LangGraph checkpointer, a transcript file (JSONL), or `HistoryThread`s.
        service: where memories and cursors live (dry run: read only; may be None).
        extractor: what the live worker uses (`LLMExtractor`, `VerbatimExtractor`, ...).
        queue: a `PostgresJobQueue`: the threads are queued for `langmem-trpc worker`
            processes instead of extracted here.
        identity: maps (thread id, newest checkpoint metadata) to a `UserKey`, for
            checkpoints whose runs carried no `user_id`; default: the hook's resolver.
        app_name: the app of threads whose runs named none (as the hook's `app_name`).
        users: only these users (`user_id` or `app/user`).
        since, until: only threads whose last message is in [since, until).
        idle_gap: a batch ends where two messages are further apart (one sitting per call).
        batch_messages, job_timeout, claim_ttl, max_attempts, policy, checkers: as for
            `AutoMemoryWorker`.
        concurrency: users processed at once (one user's threads run oldest first).
        dry_run: count threads, batches, messages, model calls and tokens; write nothing.
        progress: called after each thread with the running totals.

    Returns a `BackfillReport`; `report.ok` is False when a batch failed.
    """
    gap, selection = _options(idle_gap, since, until, users, concurrency)
    threads = _threads(source, identity, app_name, messages_key)
    settings = {
        "idle_gap": gap,
        "batch_messages": batch_messages,
        "job_timeout": job_timeout,
        "claim_ttl": claim_ttl,
        "max_attempts": max_attempts,
        "policy": policy,
        "checkers": checkers,
    }
    run = _Run(service, extractor, queue, selection, dry_run, progress, concurrency, settings)
    return run.run(threads)


def _threads(
    source: Source, identity: IdentityMap | None, app_name: str | None, messages_key: str
) -> list[HistoryThread | SkippedThread]:
    """`backfill`'s source as threads: a transcript file read, a checkpointer listed."""
    if isinstance(source, (str, Path)):
        return list(read_transcripts(source))
    if callable(getattr(source, "list", None)) and callable(getattr(source, "get_tuple", None)):
        return read_checkpointer(
            source, identity=identity, app_name=app_name, messages_key=messages_key
        )
    return list(source)


async def abackfill(
    source: Source,
    service: MemoryService | None = None,
    extractor: Extractor | None = None,
    **options: Any,
) -> BackfillReport:
    """`backfill` for async callers: an async checkpointer is read with `alist`; the
    extraction runs in worker threads, never on the event loop."""
    if callable(getattr(source, "alist", None)) and callable(getattr(source, "aget_tuple", None)):
        source = await aread_checkpointer(
            source,
            identity=options.get("identity"),
            app_name=options.get("app_name"),
            messages_key=options.get("messages_key", "messages"),
        )
    return await asyncio.to_thread(backfill, source, service, extractor, **options)


@dataclass
class _Run:
    """One backfill's inputs, once checked."""

    service: MemoryService | None
    extractor: Extractor | None
    queue: Any
    selection: Selection
    dry_run: bool
    progress: Callable[[BackfillProgress], None] | None
    concurrency: int
    settings: dict[str, Any]

    def run(self, items: Iterable[HistoryThread | SkippedThread]) -> BackfillReport:
        started = time.perf_counter()
        report = BackfillReport(dry_run=self.dry_run)
        threads: list[HistoryThread] = []
        for item in items:
            if isinstance(item, SkippedThread):
                report.skipped.append(item)
            elif self.selection.takes(item):
                threads.append(item)
        report.threads = len(threads)
        groups = by_user(threads)
        tally = Tally(report, self.progress)
        if self.queue is not None and not self.dry_run:
            enqueue_all(self.queue, groups, tally)
        else:
            self._extract(groups, tally)
        report.seconds = time.perf_counter() - started
        return report

    def _extract(self, groups: list[list[HistoryThread]], tally: Tally) -> None:
        if self.service is None and not self.dry_run:
            raise ConfigurationError("backfill needs a service (or queue=, or dry_run=True)")
        if self.extractor is None:
            raise ConfigurationError("backfill needs an extractor (what the live worker uses)")
        worker = _worker(self.service, self.extractor, self.settings)
        try:
            if self.dry_run:
                plan_all(self.service, worker, [t for g in groups for t in g], tally)
            else:
                run_users(worker, groups, tally, self.concurrency)
        finally:
            worker.close()


def _worker(
    service: MemoryService | None, extractor: Extractor, settings: dict[str, Any]
) -> AutoMemoryWorker:
    if service is None:  # a dry run without a store: nothing is covered yet
        from ..backends.memory import InMemoryMemoryService

        service = InMemoryMemoryService()
    return AutoMemoryWorker(service, extractor, **settings)
