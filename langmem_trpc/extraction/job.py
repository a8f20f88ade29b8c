"""One extraction job, start to finish, and the report it returns.

Read the cursor (nothing new: done, no write); claim the thread and compute the
delta again under the claim (`claims.py`); retry the dead letters queued for
retry; run the checkers; then per batch of at most `batch_messages` messages:
existing memories, extractor, update policy, execute, and move the cursor past
the batch. A failure leaves the cursor after the last finished batch and counts
a failed attempt; after `max_attempts` in a row the batch is dead-lettered (its
messages and error kept in the backend) and the cursor moves past it, so a
poison delta never blocks its thread. Batches bound one extractor call, so a
10,000-message import progresses within the job timeout instead of timing out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

from langchain_core.messages import BaseMessage, messages_from_dict

from ..errors import ExtractorBusyError, LangmemTrpcError, error_text
from ..service.protocol import MemoryService
from ..service.rules import utcnow
from ..types import DeadLetter, DeadLetterStatus, Entry, ExtractionCursor, Source, UserKey
from .checkers import Checker, ExtractionContext
from .claims import HeldClaim, batch_key, dead_letter_for
from .delta import (
    KEY_BYTES,
    Delta,
    advance_cursor,
    compute_delta,
    is_memorable,
    message_keys,
    message_time,
)
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
    DEAD_LETTERED = "dead_lettered"
    """No batch finished, but one failed `max_attempts` times: it was dead-lettered and
    the cursor moved past it."""


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
    max_attempts: int = 3
    """Failed attempts in a row on one batch before it is dead-lettered."""
    claim_ttl: float | None = None
    """Seconds a job's claim on its thread lasts unless renewed (after each batch);
    None: twice the timeout, at least 60 s (600 s without a timeout)."""
    peek_cursor: bool = True
    """Read the cursor before claiming, so a job with nothing new writes nothing. False:
    claim at once and read the cursor under the claim only (one round trip less), for
    jobs whose producer already read the cursor (`QueueWorker`); a job with nothing new
    then takes and gives back the claim."""
    idle_gap: float | None = None
    """Seconds between two messages' own times past which a batch ends, so one extractor
    call sees one sitting (a backfill sets it; None: batches end at `batch_messages` only)."""

    @property
    def claim_seconds(self) -> float:
        if self.claim_ttl is not None:
            return self.claim_ttl
        return 600.0 if self.timeout is None else max(60.0, 2 * self.timeout)


@dataclass
class JobReport:
    """What one job did. The cursor covers the whole delta on COMPLETED / NOTHING_NEW /
    DEAD_LETTERED, the finished or dead-lettered batches on PARTIAL (and on FAILED
    after a first finished batch)."""

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
    dead_lettered: list[str] = field(default_factory=list)
    """Ids of the dead letters this job wrote (the cursor moved past each batch)."""
    retried: int = 0
    """Dead letters queued for retry that this job extracted successfully."""
    model_calls: int = 0
    """Model calls its extractor made (`ModelUsage`), failed ones included."""
    input_tokens: int = 0
    output_tokens: int = 0
    """Tokens of those calls, as the provider reported them (0 when it reports none)."""

    def count(self, result: str) -> int:
        return sum(o.count for o in self.outcomes if o.result == result)

    @property
    def added(self) -> int:
        return self.count("added")

    @property
    def updated(self) -> int:
        """Memories updated in place or superseded by a new version."""
        return self.count("updated") + self.count("superseded")

    @property
    def superseded(self) -> int:
        """Facts closed by a new version (`update(..., supersede=True)`)."""
        return self.count("superseded")

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
    offset: int = 0,
) -> JobReport:
    """Run one job synchronously; never raises for job failures (see `JobReport.status`).

    `offset`: the index of `messages[0]` in the thread (a queued job's payload), for the
    cursor's `message_count`."""
    started = time.perf_counter()
    report = JobReport(user, thread_id, JobStatus.FAILED)
    try:
        deadline = _Deadline(settings.timeout)
        _Run(service, extractor, settings, report, messages, run_extractor, offset, deadline).run()
    except JobTimeoutError as exc:
        # Batches that finished before the deadline stay done; the cursor is past them.
        progressed = report.batches or report.dead_lettered
        report.status = JobStatus.PARTIAL if progressed else JobStatus.FAILED
        report.error, report.timed_out = str(exc), True
    except Exception as exc:  # every failure leaves the cursor where it was
        report.status, report.error = JobStatus.FAILED, error_text(exc)
        logger.debug("auto_memory: job failure traceback", exc_info=True)
    report.seconds = time.perf_counter() - started
    if report.status == JobStatus.FAILED:
        logger.warning(
            "auto_memory: job failed for %s thread %r: %s", user, thread_id, report.error
        )
    return report


def _has_work(
    messages: Sequence[BaseMessage], delta: Delta, cursor: ExtractionCursor | None
) -> bool:
    """New messages, unread tool traffic to move past, or dead letters queued for retry."""
    if cursor is not None and cursor.pending_retries:
        return True
    return bool(delta.messages) or (not delta.covered and delta.start < len(messages))


@dataclass
class _Run:
    """One run of a job: its steps share its inputs, deadline and report."""

    service: MemoryService
    extractor: Extractor
    settings: JobSettings
    report: JobReport
    messages: Sequence[BaseMessage]
    run_extractor: RunExtractor
    offset: int
    deadline: _Deadline
    keys: bytes = b""
    """The messages' cursor keys, hashed once."""

    def run(self) -> None:
        user, thread_id = self.report.user, self.report.thread_id
        peek = self.settings.peek_cursor
        peeked = self.service.get_cursor(user, thread_id) if peek else None
        self.keys = message_keys(self.messages)
        delta = compute_delta(self.messages, peeked, self.keys)
        if peek and not _has_work(self.messages, delta, peeked):
            self.report.status, self.report.anchor = JobStatus.NOTHING_NEW, delta.anchor
            return
        seconds, wait = self.settings.claim_seconds, self.deadline.remaining()
        held = HeldClaim.take(self.service, user, thread_id, seconds, wait)
        try:
            self._run_claimed(held, peeked, delta)
        finally:
            held.release()

    def _run_claimed(self, held: HeldClaim, peeked: ExtractionCursor | None, delta: Delta) -> None:
        report, messages = self.report, self.messages
        cursor = held.claim.cursor  # read under the claim: nobody moves it while we hold it
        if cursor != peeked:  # another job moved it between the peek and the claim
            delta = compute_delta(messages, cursor, self.keys)
        report.messages, report.anchor = len(delta.messages), delta.anchor
        for letter in held.claim.retries:
            self._retry(held, letter)
        if not delta.messages:
            report.status = JobStatus.COMPLETED if report.retried else JobStatus.NOTHING_NEW
            if not delta.covered and delta.start < len(messages):  # only tool traffic: move past it
                report.cursor = self._cursor(held, len(messages))
                held.save(cursor=report.cursor, final=True)
            return
        last_extracted = cursor.last_extracted_at if cursor else None
        context = ExtractionContext(report.user, delta.messages, last_extracted)
        if not all(check(context) for check in self.settings.checkers):
            report.status = JobStatus.SKIPPED_BY_CHECKER
            return
        settings = self.settings
        batches = split_batches(messages, delta, settings.batch_messages, settings.idle_gap)
        for end, batch in batches:
            if (report.batches or report.dead_lettered) and not self.deadline.ok():
                report.status = JobStatus.PARTIAL
                report.error = f"time ran out after {report.batches} of {len(batches)} batches"
                return
            try:
                self._run_batch(batch)
            except ExtractorBusyError:
                raise  # the batch was never attempted: no failed attempt to count
            except Exception as exc:
                if not self._dead_letter(held, end, batch, exc):
                    raise
                continue
            report.cursor = self._cursor(held, end, utcnow())
            held.save(cursor=report.cursor, final=end == len(messages))
            report.batches += 1
        done = report.batches or not report.dead_lettered
        report.status = JobStatus.COMPLETED if done else JobStatus.DEAD_LETTERED

    def _cursor(self, held: HeldClaim, end: int, now: datetime | None = None) -> ExtractionCursor:
        """The cursor covering `messages[:end]`, after this job's last one, else the claimed one;
        `now`: when they were extracted (None: nothing was, the previous time stays)."""
        previous = self.report.cursor or held.claim.cursor
        if now is None and previous is not None:
            now = previous.last_extracted_at
        keys, thread_id = self.keys[: end * KEY_BYTES], self.report.thread_id
        return advance_cursor(thread_id, self.messages[:end], now, previous, keys, self.offset)

    def _dead_letter(
        self, held: HeldClaim, end: int, batch: tuple[BaseMessage, ...], exc: Exception
    ) -> bool:
        """Count the failed attempt; at `max_attempts`, dead-letter the batch and move past it."""
        report, max_attempts = self.report, self.settings.max_attempts
        error = str(exc) if isinstance(exc, JobTimeoutError) else error_text(exc)
        attempts = held.fail(batch_key(batch), error)
        if attempts < max_attempts:
            logger.warning(
                "auto_memory: batch of %d message(s) failed for %s thread %r (attempt %d of %d): %s",
                len(batch),
                report.user,
                report.thread_id,
                attempts,
                max_attempts,
                error,
            )
            return False
        letter = dead_letter_for(report.user, report.thread_id, batch, error, attempts)
        past = self._cursor(held, end)
        held.save(cursor=past, dead_letter=letter, final=end == len(self.messages))
        report.cursor = past
        report.dead_lettered.append(letter.id)
        report.error = error
        logger.error(
            "auto_memory: dead-lettered %d message(s) of %s thread %r after %d attempts as %s: %s",
            len(batch),
            report.user,
            report.thread_id,
            attempts,
            letter.id,
            error,
        )
        return True

    def _retry(self, held: HeldClaim, letter: DeadLetter) -> None:
        """Extract one dead letter queued for retry; a failure makes it dead again (one attempt)."""
        self.deadline.check("retrying dead letters")
        batch = tuple(messages_from_dict(letter.messages))
        try:
            self._run_batch(batch)
        except Exception as exc:
            error = error_text(exc)
            attempts = letter.attempts + 1
            update = {"status": DeadLetterStatus.DEAD, "attempts": attempts, "error": error}
            held.save(dead_letter=letter.model_copy(update=update))
            logger.error("auto_memory: retry of dead letter %s failed: %s", letter.id, error)
            return
        held.save(resolved=[letter.id])
        self.report.retried += 1

    def _run_batch(self, batch: tuple[BaseMessage, ...]) -> None:
        service, report, deadline = self.service, self.report, self.deadline
        user, thread_id = report.user, report.thread_id
        policy, actions = self.settings.policy, self.settings.actions
        existing: list[Entry] = []
        if getattr(self.extractor, "uses_existing", True):
            existing = load_existing(service, user, existing_query(batch, policy))
        deadline.check("loading existing memories")
        when = batch_time(batch) or utcnow()  # the batch's clock, not today, for a backfill
        request = ExtractionRequest(user, thread_id, batch, existing, policy, actions, when)
        extract_started = time.perf_counter()
        try:
            ops = self.run_extractor(self.extractor, request, deadline.remaining())
        finally:
            report.extract_seconds += time.perf_counter() - extract_started
            usage = request.usage
            report.model_calls += usage.calls
            report.input_tokens += usage.input_tokens
            report.output_tokens += usage.output_tokens
        report.proposed += len(ops)
        deadline.check("extracting")
        decided = apply_policy(
            policy,
            ops,
            probe=lambda text: service.search(user, text, PROBE_OPTIONS),
            existing=existing,
            actions=actions,
            language=service.language,
        )
        report.duplicates_dropped += len(decided.duplicates)
        deadline.check("reconciling")
        ids = [m.id for m in batch if m.id]
        source = Source(thread_id=thread_id, message_ids=ids, actor="worker")
        outcomes, finished = execute_ops(
            service,
            user,
            decided.ops,
            actions=actions,
            source=source,
            keep_going=deadline.ok,
            when=batch_time(batch),  # business time: when it was said, not when extracted
        )
        report.outcomes.extend(outcomes)
        deadline.check("executing")
        if not finished or any(o.retry for o in outcomes):
            raise LangmemTrpcError("storage failed during execution; the delta will be retried")


def batch_time(batch: Sequence[BaseMessage]) -> datetime | None:
    """The latest of the batch's own message times (`message_time`), if any has one."""
    times = [t for t in map(message_time, batch) if t is not None]
    return max(times) if times else None


def split_batches(
    messages: Sequence[BaseMessage], delta: Delta, size: int, idle_gap: float | None = None
) -> list[tuple[int, tuple[BaseMessage, ...]]]:
    """Cut the delta after every `size` memorable messages, and before a memorable message
    more than `idle_gap` seconds after the previous one (by their own times; a message
    without one never starts a batch): (end index in `messages`, batch)."""
    batches: list[tuple[int, tuple[BaseMessage, ...]]] = []
    current: list[BaseMessage] = []
    last: datetime | None = None
    for index in range(delta.start, len(messages)):
        message = messages[index]
        if not is_memorable(message):
            continue
        when = message_time(message) if idle_gap is not None else None
        if current and when and last and (when - last).total_seconds() > (idle_gap or 0):
            batches.append((index, tuple(current)))
            current = []
        last = when or last
        current.append(message)
        if len(current) == size:
            batches.append((index + 1, tuple(current)))
            current = []
    if current or not batches:
        batches.append((len(messages), tuple(current)))
    else:  # trailing tool traffic after the last full batch belongs to it
        batches[-1] = (len(messages), batches[-1][1])
    return batches
