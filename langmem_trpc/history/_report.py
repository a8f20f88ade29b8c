"""What a backfill did (or, dry, would do): counts, costs and failures, summed over threads."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..extraction.job import JobReport, JobStatus
from ._threads import HistoryThread, SkippedThread


@dataclass
class BackfillReport:
    """A backfill's totals. `ok` is False when a batch failed or was dead-lettered."""

    dry_run: bool = False
    threads: int = 0
    """Threads taken (after `users`, `since`, `until`)."""
    threads_done: int = 0
    threads_nothing_new: int = 0
    """Threads whose cursor already covered every message (an earlier backfill or live run)."""
    skipped: list[SkippedThread] = field(default_factory=list)
    """Threads that could not be taken (no identity, no message list), with the reason."""
    messages: int = 0
    """New user and assistant messages after the threads' cursors."""
    batches: int = 0
    """Batches extracted (dry run: that would be)."""
    added: int = 0
    updated: int = 0
    deleted: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    """Batches that failed every attempt; kept as dead letters (`langmem-trpc jobs failed`)."""
    failures: list[str] = field(default_factory=list)
    """One line per thread whose last job failed (its cursor stays: a re-run retries it)."""
    skipped_by_checker: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    estimated_model_calls: int = 0
    """Dry run: one per batch for a model-backed extractor, 0 for the verbatim one."""
    estimated_input_tokens: int = 0
    """Dry run: about 4 characters a token, the prompt included, existing memories not."""
    enqueued: int = 0
    """Threads handed to the job queue (`queue=`), instead of extracted here."""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures and not self.dead_lettered

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["skipped"] = [f"{s.thread_id}: {s.reason}" for s in self.skipped]
        data["ok"] = self.ok
        return data


@dataclass(frozen=True)
class BackfillProgress:
    """What the progress callback sees after each thread."""

    threads_total: int
    threads_done: int
    batches: int
    messages: int
    input_tokens: int
    output_tokens: int
    failures: int
    thread: HistoryThread


class Tally:
    """Thread-safe sums over the threads' job reports, and the progress callback."""

    def __init__(
        self, report: BackfillReport, progress: Callable[[BackfillProgress], None] | None
    ) -> None:
        self.report = report
        self.progress = progress
        self._lock = threading.Lock()

    def add(self, thread: HistoryThread, jobs: Sequence[JobReport]) -> None:
        """Sum one thread's jobs (one, or more after a PARTIAL or failed one)."""
        r, last = self.report, jobs[-1]
        with self._lock:
            r.threads_done += 1
            r.messages += max(j.messages for j in jobs)
            r.threads_nothing_new += all(j.status == JobStatus.NOTHING_NEW for j in jobs)
            r.skipped_by_checker += last.status == JobStatus.SKIPPED_BY_CHECKER
            for job in jobs:
                r.batches += job.batches
                r.added, r.updated = r.added + job.added, r.updated + job.updated
                r.deleted, r.duplicates = r.deleted + job.deleted, r.duplicates + job.duplicates
                r.dead_lettered += len(job.dead_lettered)
                r.model_calls += job.model_calls
                r.input_tokens += job.input_tokens
                r.output_tokens += job.output_tokens
            if last.status in (JobStatus.FAILED, JobStatus.PARTIAL):
                r.failures.append(f"{thread.user} thread {thread.thread_id!r}: {last.error}")
            self._notify(thread)

    def planned(
        self, thread: HistoryThread, messages: int, batches: int, tokens: int, calls: int
    ) -> None:
        r = self.report
        with self._lock:
            r.threads_done += 1
            r.messages += messages
            r.batches += batches
            r.threads_nothing_new += messages == 0
            r.estimated_input_tokens += tokens
            r.estimated_model_calls += calls
            self._notify(thread)

    def enqueued(self, thread: HistoryThread, queued: bool) -> None:
        with self._lock:
            self.report.threads_done += 1
            self.report.enqueued += queued
            self.report.threads_nothing_new += not queued
            self._notify(thread)

    def _notify(self, thread: HistoryThread) -> None:
        if self.progress is None:
            return
        r = self.report
        tokens = r.input_tokens or r.estimated_input_tokens
        failures = len(r.failures) + r.dead_lettered
        snapshot = BackfillProgress(
            r.threads,
            r.threads_done,
            r.batches,
            r.messages,
            tokens,
            r.output_tokens,
            failures,
            thread,
        )
        self.progress(snapshot)
