"""Counters for the worker (`AutoMemoryWorker.stats()`); nothing is sent anywhere."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, fields
from typing import Any

from ..types import UserKey
from .job import JobReport, JobStatus

__all__ = ["Counters", "WorkerStats"]


@dataclass(frozen=True)
class WorkerStats:
    """A snapshot of the worker's counters since it was created."""

    state: str
    jobs_enqueued: int = 0
    """Jobs accepted into a queue."""
    jobs_run: int = 0
    """Jobs that completed and moved the cursor."""
    jobs_nothing_new: int = 0
    jobs_skipped_by_checker: int = 0
    jobs_partial: int = 0
    """Jobs that finished some batches of a long delta before time ran out."""
    jobs_failed: int = 0
    jobs_dead_lettered: int = 0
    """Jobs whose only progress was dead-lettering a batch (see batches_dead_lettered)."""
    batches_dead_lettered: int = 0
    """Batches dead-lettered after `max_attempts` failures (`langmem-trpc jobs failed`)."""
    dead_letters_retried: int = 0
    """Dead letters queued for retry that a job then extracted successfully."""
    jobs_timed_out: int = 0
    """Jobs that hit the timeout (counted in jobs_failed, or jobs_partial when a batch finished)."""
    jobs_sync: int = 0
    """Jobs run in the caller because the queue was full or not running."""
    jobs_overflow: int = 0
    """Jobs run in a background thread because the caller was an event loop thread."""
    jobs_deferred: int = 0
    """Deltas left for the next run of the thread (on_full="defer")."""
    jobs_skipped_cancelled: int = 0
    memories_added: int = 0
    memories_updated: int = 0
    memories_deleted: int = 0
    memories_skipped_duplicate: int = 0
    memories_failed: int = 0
    model_calls: int = 0
    """Model calls the extractor made (cost accounting; 0 for an extractor without a model)."""
    input_tokens: int = 0
    output_tokens: int = 0
    """Tokens of those calls, as the provider reported them (`usage_metadata`)."""
    queue_depth: int = 0
    queue_depths: tuple[int, ...] = ()
    cursor_lag: int = 0
    """Messages seen by enqueue/process that no cursor covers yet, over all threads."""
    calls_in_flight: int = 0
    """Extractor calls running now, including timed-out ones that have not returned."""
    calls_abandoned: int = 0
    """Timed-out calls still running, each holding a thread and one of its user's slots."""
    calls_cancelled: int = 0
    """Async extractor calls cancelled at their job's deadline."""
    jobs_user_busy: int = 0
    """Jobs not attempted (`ExtractorBusyError`, in jobs_failed): their user's slots stayed
    busy for the whole timeout, or one of the calls holding them had timed out."""
    jobs_extractor_stuck: int = 0
    """Jobs failed at once (`ExtractorBusyError`, in jobs_failed): `MAX_STUCK_CALLS` (256)
    timed-out blocking calls were still running."""

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Counters:
    """Thread-safe counters plus the per-thread bookkeeping behind `cursor_lag`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._seen: dict[tuple[UserKey, str], int] = {}
        self._covered: dict[tuple[UserKey, str], int] = {}

    def bump(self, name: str, by: int = 1) -> None:
        with self._lock:
            self._counts[name] += by

    def seen(self, user: UserKey, thread_id: str, length: int) -> None:
        with self._lock:
            self._seen[(user, thread_id)] = length

    def record(self, report: JobReport) -> None:
        key = (report.user, report.thread_id)
        status = report.status  # counted as jobs_<status>, but a completed job as jobs_run
        counter = "jobs_run" if status == JobStatus.COMPLETED else f"jobs_{status.value}"
        with self._lock:
            self._counts[counter] += 1
            self._counts.update(
                jobs_timed_out=int(report.timed_out),
                batches_dead_lettered=len(report.dead_lettered),
                dead_letters_retried=report.retried,
                memories_added=report.added,
                memories_updated=report.updated,
                memories_deleted=report.deleted,
                memories_skipped_duplicate=report.duplicates,
                memories_failed=report.failed_ops,
                model_calls=report.model_calls,
                input_tokens=report.input_tokens,
                output_tokens=report.output_tokens,
            )
            if report.cursor is not None:
                self._covered[key] = report.cursor.message_count
                if self._covered[key] >= self._seen.get(key, 0):
                    self._seen.pop(key, None)
                    self._covered.pop(key, None)

    def snapshot(self, state: str, depths: tuple[int, ...], calls: dict[str, int]) -> WorkerStats:
        """The counters, plus `calls` (the extractor-call figures of `ModelCalls.counts`)."""
        with self._lock:
            lag = sum(max(0, n - self._covered.get(k, 0)) for k, n in self._seen.items())
            counts = {**self._counts, **calls}
        return WorkerStats(
            state=state, queue_depth=sum(depths), queue_depths=depths, cursor_lag=lag, **counts
        )
