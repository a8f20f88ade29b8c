"""What the write-path triggers share: the worker interface and the hand-off.

Both triggers (the checkpointer wrapper and the `after_agent` middleware)
decide *when* a run finished; this module hands the thread's messages to the
worker and guarantees the hand-off never raises into the graph.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from langchain_core.messages import BaseMessage

from ..types import UserKey

__all__ = ["IngestWorker", "ahand_off", "hand_off", "thread_messages"]

logger = logging.getLogger(__name__)


@runtime_checkable
class IngestWorker(Protocol):
    """What the triggers need of a worker: `enqueue` (and, when present, `aenqueue`).

    Both `AutoMemoryWorker` (in-process threads) and `queue.PostgresJobQueue` (a
    durable queue consumed by `langmem-trpc worker` processes) have it; their
    results differ and are ignored here.
    """

    def enqueue(self, user: UserKey, thread_id: str, messages: Sequence[BaseMessage]) -> Any: ...


def thread_messages(value: object) -> list[BaseMessage] | None:
    """The message list of a state or checkpoint value, or None when it is not one.

    A `DeltaChannel` stores a sentinel instead of the list; that is skipped.
    """
    if not isinstance(value, Sequence) or isinstance(value, str):
        return None
    messages = [m for m in value if isinstance(m, BaseMessage)]
    return messages if messages else None


def hand_off(
    worker: IngestWorker, user: UserKey, thread_id: str, messages: list[BaseMessage]
) -> bool:
    """Enqueue one job; log and swallow any failure (a run never fails for memory)."""
    try:
        worker.enqueue(user, thread_id, list(messages))
    except Exception:
        return _failed(user, thread_id)
    return True


def _failed(user: UserKey, thread_id: str) -> bool:
    logger.warning("could not enqueue memory job for %s thread %s", user, thread_id, exc_info=True)
    return False


async def ahand_off(
    worker: IngestWorker, user: UserKey, thread_id: str, messages: list[BaseMessage]
) -> bool:
    """Async twin of `hand_off`; uses `aenqueue` when the worker has one."""
    aenqueue = getattr(worker, "aenqueue", None)
    if aenqueue is None:
        return hand_off(worker, user, thread_id, messages)
    try:
        await aenqueue(user, thread_id, list(messages))
    except Exception:
        return _failed(user, thread_id)
    return True
