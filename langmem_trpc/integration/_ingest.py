"""What the write-path triggers (checkpointer wrapper, `after_agent` middleware) share:
the worker interface and a hand-off that never raises into the graph."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from langchain_core.messages import BaseMessage

from ..types import UserKey

logger = logging.getLogger(__name__)


@runtime_checkable
class IngestWorker(Protocol):
    """What the triggers need of a worker: `enqueue` (and, when present, `aenqueue`),
    as `AutoMemoryWorker` and `queue.PostgresJobQueue` have; results are ignored."""

    def enqueue(self, user: UserKey, thread_id: str, messages: Sequence[BaseMessage]) -> Any: ...


Job = tuple[UserKey, str, list[BaseMessage]]
"""What a finished run hands the worker: the user, the thread id and its messages."""


def job(user: UserKey | None, thread_id: object, value: object) -> Job | None:
    """The job of a finished run, or None (logged) without identity, thread id or messages
    (`value`, the message channel, is a sentinel for a `DeltaChannel`: no messages)."""
    messages = None
    if isinstance(value, Sequence) and not isinstance(value, str):
        messages = [m for m in value if isinstance(m, BaseMessage)] or None
    if user is None or not thread_id or messages is None:
        logger.debug("run ended without identity, thread id or messages; nothing to remember")
        return None
    return user, str(thread_id), messages


def hand_off(worker: IngestWorker, job: Job | None) -> None:
    """Enqueue `job` (if any); log and swallow any failure (a run never fails for memory)."""
    if job is not None:
        try:
            worker.enqueue(*job)
        except Exception:
            _failed(job)


def _failed(job: Job) -> None:
    logger.warning("could not enqueue memory job for %s thread %s", *job[:2], exc_info=True)


async def ahand_off(worker: IngestWorker, job: Job | None) -> None:
    """Async twin of `hand_off`; uses `aenqueue` when the worker has one."""
    aenqueue = getattr(worker, "aenqueue", None)
    if aenqueue is None or job is None:
        hand_off(worker, job)
        return
    try:
        await aenqueue(*job)
    except Exception:
        _failed(job)
