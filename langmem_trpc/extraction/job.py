"""One extraction job, start to finish, and the report it returns.

Steps: read the cursor -> delta -> checkers -> then, batch by batch of at
most `batch_messages` new messages: existing memories -> extractor -> update
policy -> execute -> advance the cursor past the batch. The cursor moves only
when everything before it succeeded; every failure (cursor read,
existing-memory load, extractor error, timeout, storage error during
execution) leaves it after the last finished batch, so the rest of the delta
is read again next time. Batches bound the work of one extractor call, so a
huge delta (a 10,000-message import) makes steady progress within the job
timeout instead of timing out on every run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum

from langchain_core.messages import BaseMessage

from ..errors import LangmemTrpcError
from ..service.protocol import MemoryService
from ..types import Entry, ExtractionCursor, Source, UserKey
from .checkers import Checker, ExtractionContext
from .delta import Delta, advance_cursor, compute_delta, is_memorable
from .execute import OpOutcome, execute_ops
from .existing import existing_query, load_existing
from .extractor import ExtractionRequest, Extractor
from .ops import Action, MemoryOp
from .policies import Policy, apply_policy
from .reconcile import PROBE_OPTIONS

__all__ = ["JobReport", "JobSettings", "JobStatus", "JobTimeoutError", "run_job"]

logger = logging.getLogger(__name__)


class JobStatus(str, Enum):
    COMPLETED = "completed"
    NOTHING_NEW = "nothing_new"
    SKIPPED_BY_CHECKER = "skipped_by_checker"
    PARTIAL = "partial"
    """Some batches finished (the cursor moved past them); time ran out for the rest."""
    FAILED = "failed"


class JobTimeoutError(LangmemTrpcError):
    """The job ran past its timeout; nothing after that point was written."""


@dataclass(frozen=True)
class JobSettings:
    """What the worker configures once and every job shares."""

    checkers: tuple[Checker, ...] = ()
    policy: Policy = "merge_similar"
    actions: frozenset[Action] = frozenset({Action.ADD, Action.UPDATE, Action.DELETE})
    timeout: float | None = 30.0
    batch_messages: int = 50
    """New messages per extractor call; a longer delta is processed in several batches."""


@dataclass
class JobReport:
    """What one job did. The cursor covers the whole delta on COMPLETED / NOTHING_NEW,
    the finished batches on PARTIAL (and on FAILED after a first finished batch)."""

    user: UserKey
    thread_id: str
    status: JobStatus
    messages: int = 0
    """New user/assistant messages in the delta."""
    proposed: int = 0
    """Operations the extractor proposed."""
    outcomes: list[OpOutcome] = field(default_factory=list)
    duplicates_dropped: int = 0
    """Proposed adds the update policy dropped as duplicates."""
    cursor: ExtractionCursor | None = None
    anchor: str = "none"
    error: str | None = None
    timed_out: bool = False
    seconds: float = 0.0
    extract_seconds: float = 0.0
    batches: int = 0
    """Batches finished (the cursor moved past each)."""

    def count(self, result: str) -> int:
        return sum(o.count for o in self.outcomes if o.result == result)

    @property
    def added(self) -> int:
        return self.count("added")

    @property
    def updated(self) -> int:
        return self.count("updated")

    @property
    def deleted(self) -> int:
        return self.count("deleted") + self.count("cleared")

    @property
    def duplicates(self) -> int:
        return self.duplicates_dropped + self.count("duplicate")

    @property
    def failed_ops(self) -> int:
        return self.count("failed")


RunExtractor = Callable[[Extractor, ExtractionRequest, "float | None"], list[MemoryOp]]


def _direct(
    extractor: Extractor, request: ExtractionRequest, timeout: float | None
) -> list[MemoryOp]:
    return extractor.extract(request)


class _Deadline:
    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self.end = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - time.monotonic())

    def ok(self) -> bool:
        return self.end is None or time.monotonic() < self.end

    def check(self, step: str) -> None:
        if not self.ok():
            raise JobTimeoutError(f"timed out after {self.timeout} s ({step})")


def run_job(
    service: MemoryService,
    extractor: Extractor,
    settings: JobSettings,
    user: UserKey,
    thread_id: str,
    messages: Sequence[BaseMessage],
    *,
    run_extractor: RunExtractor = _direct,
) -> JobReport:
    """Run one job synchronously; never raises for job failures (see `JobReport.status`)."""
    started = time.perf_counter()
    report = JobReport(user, thread_id, JobStatus.FAILED)
    try:
        _run(service, extractor, settings, report, messages, run_extractor)
    except JobTimeoutError as exc:
        # Batches that finished before the deadline stay done; the cursor is past them.
        status = JobStatus.PARTIAL if report.batches else JobStatus.FAILED
        report.status, report.error, report.timed_out = status, str(exc), True
    except Exception as exc:  # every failure leaves the cursor where it was
        report.status, report.error = JobStatus.FAILED, f"{type(exc).__name__}: {exc}"
    report.seconds = time.perf_counter() - started
    if report.status == JobStatus.FAILED:
        logger.warning(
            "auto_memory: job failed for %s thread %r: %s", user, thread_id, report.error
        )
    return report


def _run(
    service: MemoryService,
    extractor: Extractor,
    settings: JobSettings,
    report: JobReport,
    messages: Sequence[BaseMessage],
    run_extractor: RunExtractor,
) -> None:
    deadline = _Deadline(settings.timeout)
    user, thread_id = report.user, report.thread_id
    cursor = service.get_cursor(user, thread_id)
    delta = compute_delta(messages, cursor)
    report.messages, report.anchor = len(delta.messages), delta.anchor
    last_extracted = cursor.last_extracted_at if cursor else None
    if not delta.messages:
        report.status = JobStatus.NOTHING_NEW
        if messages and delta.start < len(messages):  # only tool traffic arrived: move past it
            report.cursor = advance_cursor(thread_id, messages, last_extracted or _utcnow())
            report.cursor = report.cursor.model_copy(update={"last_extracted_at": last_extracted})
            service.set_cursor(user, report.cursor)
        return
    context = ExtractionContext(user, delta.messages, last_extracted)
    if not all(check(context) for check in settings.checkers):
        report.status = JobStatus.SKIPPED_BY_CHECKER
        return
    batches = split_batches(messages, delta, settings.batch_messages)
    for end, batch in batches:
        if report.batches and not deadline.ok():
            report.status = JobStatus.PARTIAL
            report.error = f"time ran out after {report.batches} of {len(batches)} batches"
            return
        _run_batch(service, extractor, settings, report, batch, deadline, run_extractor)
        report.cursor = advance_cursor(thread_id, messages[:end], _utcnow())
        service.set_cursor(user, report.cursor)
        report.batches += 1
    report.status = JobStatus.COMPLETED


def split_batches(
    messages: Sequence[BaseMessage], delta: Delta, size: int
) -> list[tuple[int, tuple[BaseMessage, ...]]]:
    """Cut the delta after every `size` memorable messages: (end index in `messages`, batch)."""
    batches: list[tuple[int, tuple[BaseMessage, ...]]] = []
    current: list[BaseMessage] = []
    for index in range(delta.start, len(messages)):
        if is_memorable(messages[index]):
            current.append(messages[index])
            if len(current) == size:
                batches.append((index + 1, tuple(current)))
                current = []
    if current or not batches:
        batches.append((len(messages), tuple(current)))
    else:  # trailing tool traffic after the last full batch belongs to it
        batches[-1] = (len(messages), batches[-1][1])
    return batches


def _run_batch(
    service: MemoryService,
    extractor: Extractor,
    settings: JobSettings,
    report: JobReport,
    batch: tuple[BaseMessage, ...],
    deadline: _Deadline,
    run_extractor: RunExtractor,
) -> None:
    user, thread_id = report.user, report.thread_id
    existing: list[Entry] = []
    if getattr(extractor, "uses_existing", True):
        existing = load_existing(service, user, existing_query(batch, settings.policy))
    deadline.check("loading existing memories")
    request = ExtractionRequest(
        user, thread_id, batch, existing, settings.policy, settings.actions, _utcnow()
    )
    extract_started = time.perf_counter()
    ops = run_extractor(extractor, request, deadline.remaining())
    report.extract_seconds += time.perf_counter() - extract_started
    report.proposed += len(ops)
    deadline.check("extracting")
    decided = apply_policy(
        settings.policy,
        ops,
        probe=lambda text: service.search(user, text, PROBE_OPTIONS),
        existing=existing,
        actions=settings.actions,
    )
    report.duplicates_dropped += len(decided.duplicates)
    deadline.check("reconciling")
    source = Source(thread_id=thread_id, message_ids=[m.id for m in batch if m.id], actor="worker")
    outcomes, finished = execute_ops(
        service, user, decided.ops, actions=settings.actions, source=source, keep_going=deadline.ok
    )
    report.outcomes.extend(outcomes)
    deadline.check("executing")
    if not finished or any(o.retry for o in outcomes):
        raise LangmemTrpcError("storage failed during execution; the delta will be retried")


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)
