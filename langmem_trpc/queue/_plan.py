"""The enqueue algorithm as a sans-I/O plan, run by a sync and an async driver.

1. read the thread's cursor (from the queue's database, or the given service);
2. build the payload (`_payload.select_messages`); nothing to do: done, nothing written;
3. defer the job: lock = the user (per-user order), queueing lock = the thread (at
   most one waiting job per thread);
4. when the thread already has a waiting job, in one transaction: lock that row
   (`FOR UPDATE`; if a worker took it first, back to 3) and `merge` the payloads: the
   newer one replaces the waiting job's arguments, an older one is dropped, and one
   of a rewritten history is queued as a job of its own (no queueing lock) after it.

A delta over the byte cap is queued as consecutive jobs instead (`_chunks`); a message
that cannot fit in a job is queued as a placeholder, reported by an `Omit` step. Steps 1
and 3 are single autocommit statements (two round trips, one commit), and every write
has committed when `enqueue` returns: a queued job is durable.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..errors import BackendError
from ..types import ExtractionCursor, UserKey
from ._payload import (
    JobPayload,
    Merge,
    Omitted,
    app_queue,
    decode,
    lock_keys,
    merge,
    select_messages,
)

DEFER_ATTEMPTS = 5
"""Rounds of defer / waiting-job lookup before giving up (each round lost a race to a worker)."""


class EnqueueOutcome(str, Enum):
    """What `PostgresJobQueue.enqueue` did."""

    QUEUED = "queued"
    """A new job is waiting."""
    COLLAPSED = "collapsed"
    """The thread's waiting job now carries these messages (or already covered them)."""
    NOTHING_NEW = "nothing_new"
    """The cursor covers every message: nothing was queued."""


@dataclass(frozen=True)
class ReadCursor:
    user: UserKey
    thread_id: str


@dataclass(frozen=True)
class SubmitJob:
    """Defer a job; the driver answers False when the queueing lock is taken."""

    queue_name: str
    """The procrastinate queue, the app's (`app_queue`)."""
    args: str
    """The task arguments as JSON text."""
    lock: str
    queueing_lock: str | None


@dataclass(frozen=True)
class Collapse:
    """In one transaction: lock the thread's waiting job, `merge` with it, and on REPLACE
    write `args` into it. The driver answers the `Merge`, or None when no job waits (a
    worker took it meanwhile)."""

    queueing_lock: str
    args: str
    messages: tuple[Any, ...]


@dataclass(frozen=True)
class Omit:
    """Report (log, count; no I/O) the messages queued as placeholders, over the cap."""

    user: UserKey
    thread_id: str
    omitted: tuple[Omitted, ...]
    cap: int


PlanStep = ReadCursor | SubmitJob | Collapse | Omit
Plan = Generator[PlanStep, Any, EnqueueOutcome]


def enqueue_plan(queue: str, payload: JobPayload, cap: int) -> Plan:
    """The steps of one enqueue (see the module docstring); `payload` holds the whole thread."""
    user, thread_id = payload.user, payload.thread_id
    cursor: ExtractionCursor | None = yield ReadCursor(user, thread_id)
    job = select_messages(payload, cursor)
    if job is None:
        return EnqueueOutcome.NOTHING_NEW
    chunks = job.split(cap)
    if chunks.omitted:
        yield Omit(user, thread_id, chunks.omitted, cap)
    texts = chunks.texts
    name, (lock, queueing) = app_queue(queue, user.app_name), lock_keys(queue, user, thread_id)
    if len(texts) > 1:
        return (yield from _chunks(texts, name, lock, queueing))
    args = texts[0]
    for _ in range(DEFER_ATTEMPTS):
        if (yield SubmitJob(name, args, lock, queueing)):
            return EnqueueOutcome.QUEUED
        decision = yield Collapse(queueing, args, job.messages)
        if decision is None:
            continue  # a worker took the waiting job meanwhile: defer again
        if decision == Merge.SEPARATE:
            yield SubmitJob(name, args, lock, None)
            return EnqueueOutcome.QUEUED
        return EnqueueOutcome.COLLAPSED
    raise BackendError(
        f"could not enqueue for {user} thread {thread_id!r}: its waiting job kept being "
        f"taken by workers ({DEFER_ATTEMPTS} rounds)"
    )


def collapse_decision(step: Collapse, waiting: dict[str, Any] | None) -> Merge | None:
    """How the thread's locked waiting job (its row) merges with `step` (None: no job
    waits). A waiting job whose arguments cannot be decoded is replaced."""
    if waiting is None:
        return None
    try:
        pending = decode(waiting["args"]).messages
    except Exception:
        return Merge.REPLACE
    return merge(pending, step.messages)


def _chunks(texts: list[str], name: str, lock: str, queueing: str) -> Plan:
    """Queue a delta too big for one job as consecutive jobs (see `chunked_json`).

    They never collapse into the thread's waiting job: that one is older and runs first,
    and a chunk anchored on the chunk before it must not run ahead of it. The last chunk
    takes the queueing lock when it is free, so later enqueues collapse into it.
    """
    for text in texts[:-1]:
        yield SubmitJob(name, text, lock, None)
    if not (yield SubmitJob(name, texts[-1], lock, queueing)):
        yield SubmitJob(name, texts[-1], lock, None)
    return EnqueueOutcome.QUEUED
