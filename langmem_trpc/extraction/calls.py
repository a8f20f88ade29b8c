"""Extractor calls with a deadline: a hung call holds no capacity other users need.

`ModelCalls` (one per `AutoMemoryWorker`) runs a job's call under its timeout: a native
`aextract` on an event loop thread it owns, cancelled at the deadline (the model call
stops, holding no thread); any other extractor in `CallThreads` (a call never waits for
a thread). The limits are in docs/operating.md, "Hung and slow model calls". `close()`
stops the loop and idle threads; a call restarts them.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import CancelledError as FutureCancelled
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from ..errors import ExtractionError, ExtractorBusyError
from ..types import UserKey
from .extractor import ExtractionRequest, Extractor
from .job import JobTimeoutError
from .ops import MemoryOp

__all__ = ["CallThreads", "LoopThread", "ModelCalls"]

logger = logging.getLogger(__name__)

IDLE_SECONDS = 30.0
"""An idle call thread exits after this long without work."""
CLOSE_WAIT = 2.0
"""Seconds `close()` waits for cancelled tasks and the loop thread to finish."""
MAX_STUCK_CALLS = 256
"""Past this many timed-out blocking calls still running (each holds a thread), a new
blocking call fails at once: the extractor looks hung for everyone."""

AsyncExtract = Callable[[ExtractionRequest], Awaitable[list[MemoryOp]]]
_Work = tuple["Future[Any]", Callable[[Any], Any], Any]


class CallThreads:
    """Daemon threads for blocking calls; a submitted call starts at once, never queued behind others."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._spare = 0
        """Threads not running a call, minus calls waiting in `_work`."""
        self._threads: set[threading.Thread] = set()
        self._closed = False
        self._started = 0

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise ExtractionError("the worker's call threads are closed")
            self._work.put((future, fn, arg))
            if self._spare:
                self._spare -= 1
            else:
                self._started += 1
                thread = threading.Thread(
                    target=self._serve, name=f"{self._prefix}-{self._started}", daemon=True
                )
                self._threads.add(thread)
                thread.start()
        return future

    def _serve(self) -> None:
        me = threading.current_thread()
        while True:
            try:
                work = self._work.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._spare > 0:  # enough threads remain for every waiting call
                        self._spare -= 1
                        self._threads.discard(me)
                        return
                continue
            if work is None:
                break
            future, fn, arg = work
            del work
            ok, outcome = True, None
            if future.set_running_or_notify_cancel():
                try:
                    outcome = fn(arg)
                except BaseException as exc:  # handed to the caller, as an executor does
                    ok, outcome = False, exc
            with self._lock:  # spare again before the caller wakes, so its next call reuses it
                closed = self._closed
                if not closed:
                    self._spare += 1
            if future.running():
                if ok:
                    future.set_result(outcome)
                else:
                    future.set_exception(outcome)
            del future, outcome
            if closed:
                break
        with self._lock:
            self._threads.discard(me)

    def close(self) -> None:
        """Cancel calls not yet started; idle threads exit, busy ones when their call returns."""
        with self._lock:
            self._closed = True
            count = len(self._threads)
        while True:
            try:
                work = self._work.get_nowait()
            except queue.Empty:
                break
            if work is not None:
                work[0].cancel()
        for _ in range(count):
            self._work.put(None)


class LoopThread:
    """An event loop running in a daemon thread, for calls that can be cancelled."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def submit(
        self, start: Callable[[], Awaitable[Any]], on_done: Callable[[], None]
    ) -> Future[Any]:
        """Run `start()` as a task (cancelling the returned future cancels it); `on_done`
        runs once the task has really finished (or never started)."""
        result: Future[Any] = Future()

        def begin() -> None:
            if result.cancelled():
                on_done()
                return
            task = asyncio.ensure_future(start())

            def finished(done: asyncio.Future[Any]) -> None:
                on_done()
                try:
                    if done.cancelled():
                        result.cancel()
                    elif done.exception() is not None:
                        result.set_exception(done.exception())
                    else:
                        result.set_result(done.result())
                except InvalidStateError:  # the caller cancelled first
                    pass

            task.add_done_callback(finished)
            result.add_done_callback(
                lambda f: f.cancelled() and self.loop.call_soon_threadsafe(task.cancel)
            )

        self.loop.call_soon_threadsafe(begin)
        return result

    def close(self, cleanup: Callable[[], Awaitable[None]] | None = None) -> None:
        """Cancel every task, wait briefly for them, run `cleanup`, stop the loop and join it."""

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=CLOSE_WAIT)
            if cleanup is not None:
                try:
                    await cleanup()
                except Exception:  # closing must go on
                    logger.warning("auto_memory: extractor cleanup failed", exc_info=True)
            await self.loop.shutdown_default_executor()

        if not self.loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(CLOSE_WAIT * 2)
            except Exception:  # a task that ignores cancellation: stop the loop anyway
                logger.warning("auto_memory: extraction tasks still running at close")
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(CLOSE_WAIT)


@dataclass(slots=True)
class _Call:
    user: UserKey
    blocking: bool
    done: bool = False
    abandoned: bool = False


@dataclass(slots=True)
class _UserCalls:
    running: int = 0
    abandoned: int = 0


class ModelCalls:
    """Runs extractor calls under a deadline, bounded per user (see the module docstring)."""

    def __init__(
        self,
        max_calls_per_user: int,
        timeout_label: float | None,
        on_loop_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.max_calls_per_user = max_calls_per_user
        self._on_loop_close = on_loop_close
        self._timeout_label = timeout_label
        self._lock = threading.Lock()
        self._slot_freed = threading.Condition(self._lock)
        self._users: dict[UserKey, _UserCalls] = {}
        self._loop: LoopThread | None = None
        self._threads: CallThreads | None = None
        self._counts = {"calls_cancelled": 0, "jobs_user_busy": 0, "jobs_extractor_stuck": 0}
        self._stuck = 0
        """Timed-out blocking calls still running."""

    def run(
        self, extractor: Extractor, request: ExtractionRequest, timeout: float | None
    ) -> list[MemoryOp]:
        """Call the extractor within `timeout` seconds; raises `JobTimeoutError` past it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        aextract: AsyncExtract | None = getattr(extractor, "aextract", None)
        cancellable = callable(aextract) and getattr(extractor, "native_async", True)
        call = self._acquire(request.user, deadline, blocking=not cancellable)
        if timeout is None:
            try:
                return extractor.extract(request)
            finally:
                self._release(call)
        request = replace(request, timeout=timeout)
        try:
            if cancellable:
                assert aextract is not None
                start = partial(aextract, request)
                future = self._loop_thread().submit(start, lambda: self._release(call))
            else:
                future = self._call_threads().submit(extractor.extract, request)
        except BaseException:  # closed under us: the call never started
            self._release(call)
            raise
        assert deadline is not None
        abandoned = False
        try:
            return list(future.result(timeout=max(0.0, deadline - time.monotonic())))
        except FutureTimeout:
            if not future.cancel() and future.done():
                return list(future.result())
            abandoned = self._abandon(call, cancellable)
            if abandoned and not cancellable:  # its thread releases the slot when it returns
                future.add_done_callback(lambda _: self._release(call))
            raise JobTimeoutError(f"timed out after {self._timeout_label} s (extracting)") from None
        except FutureCancelled:
            raise ExtractionError("the worker closed while the extractor ran") from None
        finally:
            if not cancellable and not abandoned:  # returned, raised or never started
                self._release(call)

    def _acquire(self, user: UserKey, deadline: float | None, *, blocking: bool) -> _Call:
        with self._lock:
            if blocking and deadline is not None and self._stuck >= MAX_STUCK_CALLS:
                self._counts["jobs_extractor_stuck"] += 1
                raise ExtractorBusyError(
                    f"{self._stuck} timed-out extractor calls are still running in threads "
                    f"(the limit, {MAX_STUCK_CALLS}); the extractor looks hung, so this job "
                    "is not attempted"
                )
            calls = self._users.get(user) or self._users.setdefault(user, _UserCalls())
            while calls.running >= self.max_calls_per_user:
                if calls.abandoned:
                    self._counts["jobs_user_busy"] += 1
                    raise ExtractorBusyError(
                        f"{user} has {calls.running} extractor calls in flight (the limit, "
                        f"max_calls_per_user={self.max_calls_per_user}), {calls.abandoned} of "
                        "them timed out and still running; this job is not attempted"
                    )
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self._counts["jobs_user_busy"] += 1
                    raise ExtractorBusyError(
                        f"{user} kept its {self.max_calls_per_user} extractor call slots busy "
                        f"for the job's whole timeout ({self._timeout_label} s); this job is "
                        "not attempted"
                    )
                self._slot_freed.wait(left)
                calls = self._users.setdefault(user, _UserCalls())
            calls.running += 1
            return _Call(user, blocking)

    def _release(self, call: _Call) -> None:
        with self._lock:
            if call.done:
                return
            call.done = True
            calls = self._users[call.user]
            calls.running -= 1
            calls.abandoned -= call.abandoned
            self._stuck -= call.abandoned and call.blocking
            if not calls.running:
                del self._users[call.user]
            self._slot_freed.notify_all()

    def _abandon(self, call: _Call, cancellable: bool) -> bool:
        """Mark a timed-out call as still running; False if it already ended."""
        with self._lock:
            if cancellable:
                self._counts["calls_cancelled"] += 1
            if call.done:
                return False
            call.abandoned = True
            self._users[call.user].abandoned += 1
            self._stuck += call.blocking
            return True

    def _loop_thread(self) -> LoopThread:
        with self._lock:
            self._loop = self._loop or LoopThread("langmem-extract-loop")
            return self._loop

    def _call_threads(self) -> CallThreads:
        with self._lock:
            self._threads = self._threads or CallThreads("langmem-extract")
            return self._threads

    def counts(self) -> dict[str, int]:
        """Counters for `WorkerStats`: calls now, timed-out calls still running, totals."""
        with self._lock:
            return {
                **self._counts,
                "calls_in_flight": sum(c.running for c in self._users.values()),
                "calls_abandoned": sum(c.abandoned for c in self._users.values()),
            }

    def close(self) -> None:
        """Cancel calls on the loop, stop the loop and the idle threads (a later call restarts them)."""
        with self._lock:
            loop, self._loop = self._loop, None
            threads, self._threads = self._threads, None
        if loop is not None:
            loop.close(self._on_loop_close)
        if threads is not None:
            threads.close()
