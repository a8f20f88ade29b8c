"""The ordered lane of `MemoryStore.abatch`: one worker thread, batches in issue order.

`asyncio.to_thread` per batch let an `adelete` overtake the `aput` issued
before it (each batch raced in its own thread). LangGraph's async stores run
one batch at a time in the order they were queued; so does this lane, and the
service's blocking I/O stays off the event loop. Each batch runs in a copy of
its caller's context, so the run's identity is seen.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class OrderedLane:
    """Runs callables one at a time, in submission order, in one worker thread
    (started on first use, again after `close`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def run(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """Queue `work` behind every call queued before it; await the result."""
        context = contextvars.copy_context()
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="memorystore"
                )
            future = self._executor.submit(context.run, work)
        return asyncio.wrap_future(future)

    def close(self) -> None:
        """Let queued work finish in the background; a later `run` starts a new thread."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
