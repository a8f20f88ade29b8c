"""Running the threads through the live write path, or planning them (dry run), or queueing them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..extraction.delta import compute_delta, message_text
from ..extraction.extractor import LLMExtractor, VerbatimExtractor
from ..extraction.job import JobReport, JobStatus, split_batches
from ..extraction.prompts import DEFAULT_PROMPT
from ..extraction.worker import AutoMemoryWorker
from ..service.protocol import MemoryService
from ..types import UserKey
from ._report import Tally
from ._threads import HistoryThread

logger = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4
TOOLS_CHARS = 2_000
"""About the size of the memory tools' JSON schemas in a request."""
MESSAGE_OVERHEAD_CHARS = 40
"""A message's role and `[name, time]` label."""


@dataclass(frozen=True)
class Selection:
    """Which threads to take: users (`user_id` or `app/user`) and a window on their last message."""

    users: frozenset[str] | None = None
    since: datetime | None = None
    until: datetime | None = None

    def takes(self, thread: HistoryThread) -> bool:
        user = thread.user
        if (
            self.users is not None
            and not {user.user_id, f"{user.app_name}/{user.user_id}"} & self.users
        ):
            return False
        if self.since is None and self.until is None:
            return True
        ended = thread.ended
        if ended is None:
            return False
        return (self.since is None or ended >= self.since) and (
            self.until is None or ended < self.until
        )


def by_user(threads: Sequence[HistoryThread]) -> list[list[HistoryThread]]:
    """Each user's threads, oldest first (undated last, in source order)."""
    groups: dict[UserKey, list[HistoryThread]] = {}
    for thread in threads:
        groups.setdefault(thread.user, []).append(thread)
    late = datetime.max.replace(tzinfo=timezone.utc)
    return [sorted(group, key=lambda t: t.started or late) for group in groups.values()]


def run_thread(worker: AutoMemoryWorker, thread: HistoryThread) -> list[JobReport]:
    """The thread's jobs: one, repeated while it progresses (PARTIAL: time ran out) or
    fails (up to `max_attempts`, after which the failing batch is dead-lettered and the
    job goes on past it), so a backfill leaves no thread half done when it can help it."""
    settings = worker.settings
    reports: list[JobReport] = []
    failed = 0
    while True:
        report = worker.process(thread.user, thread.thread_id, thread.messages)
        reports.append(report)
        failed += report.status == JobStatus.FAILED
        if report.status == JobStatus.PARTIAL and len(reports) < len(thread.messages) + 2:
            continue
        if report.status == JobStatus.FAILED and failed < settings.max_attempts:
            continue
        return reports


def run_users(
    worker: AutoMemoryWorker, groups: list[list[HistoryThread]], tally: Tally, concurrency: int
) -> None:
    """Each user's threads in order, `concurrency` users at once. An interrupt (Ctrl-C)
    lets the running threads' jobs finish and starts no other thread."""
    stop = threading.Event()

    def one_user(threads: list[HistoryThread]) -> None:
        for thread in threads:
            if stop.is_set():
                return
            tally.add(thread, run_thread(worker, thread))

    pool = ThreadPoolExecutor(max(1, min(concurrency, len(groups))), "langmem-backfill")
    try:
        for done in [pool.submit(one_user, group) for group in groups]:
            done.result()
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def plan_thread(
    service: MemoryService | None, worker: AutoMemoryWorker, thread: HistoryThread
) -> tuple[int, int, int, int]:
    """(new messages, batches, estimated input tokens, estimated model calls); reads the cursor only."""
    cursor = None if service is None else service.get_cursor(thread.user, thread.thread_id)
    delta = compute_delta(thread.messages, cursor)
    if not delta.messages:
        return 0, 0, 0, 0
    settings = worker.settings
    batches = split_batches(thread.messages, delta, settings.batch_messages, settings.idle_gap)
    batches = [b for b in batches if b[1]]
    fixed = len(DEFAULT_PROMPT) + TOOLS_CHARS
    chars = sum(
        fixed + sum(len(message_text(m)) + MESSAGE_OVERHEAD_CHARS for m in b) for _, b in batches
    )
    calls = 0 if _no_model(worker.extractor) else len(batches)
    tokens = chars // CHARS_PER_TOKEN if calls else 0
    return len(delta.messages), len(batches), tokens, calls


def _no_model(extractor: Any) -> bool:
    return isinstance(extractor, VerbatimExtractor) or (
        not isinstance(extractor, LLMExtractor) and getattr(extractor, "uses_model", True) is False
    )


def plan_all(
    service: MemoryService | None,
    worker: AutoMemoryWorker,
    threads: Sequence[HistoryThread],
    tally: Tally,
) -> None:
    for thread in threads:
        tally.planned(thread, *plan_thread(service, worker, thread))


def enqueue_all(queue: Any, groups: list[list[HistoryThread]], tally: Tally) -> None:
    """Hand each thread to the job queue, a user's oldest first (the queue keeps that order)."""
    for group in groups:
        for thread in group:
            outcome = queue.enqueue(thread.user, thread.thread_id, thread.messages)
            tally.enqueued(thread, getattr(outcome, "value", outcome) != "nothing_new")
