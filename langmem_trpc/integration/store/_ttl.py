"""Time-to-live of store items, kept by the service (`Entry.expires_at`, `set_expiry`).

The service hides an expired memory from every reader and backend at once;
the TTL itself (minutes) rides in the item's store metadata so a refreshing
read can push the expiry forward, which it does only once a tenth of the TTL
has passed since it was last set, so reads do not each turn into a write.
`sweep_ttl()` soft-deletes expired memories (history actor "store:ttl").
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..._time import OUT_OF_RANGE
from ...errors import InvalidTimeError
from ...service.rules import utcnow
from ...types import Entry
from ._values import store_meta

logger = logging.getLogger(__name__)


def deadline(ttl: float | None) -> datetime | None:
    """When an item put (or refreshed) now with `ttl` minutes expires; None without a TTL.
    A TTL that ends past year 9999 is an `InvalidTimeError` naming `ttl`."""
    if ttl is None:
        return None
    try:
        return utcnow() + timedelta(minutes=float(ttl))
    except OverflowError:
        raise InvalidTimeError("ttl", f"{ttl!r} minutes from now {OUT_OF_RANGE}") from None


def ttl_of(entry: Entry) -> float | None:
    """The TTL (minutes) the item was put with, if any."""
    stored = store_meta(entry)
    ttl = stored.get("ttl") if stored is not None else None
    return float(ttl) if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) else None


def needs_refresh(entry: Entry) -> bool:
    """Whether a refreshing read should push this item's expiry forward now."""
    ttl, at = ttl_of(entry), entry.expires_at
    if ttl is None or at is None:
        return False
    span = timedelta(minutes=ttl)
    return at - utcnow() < span - span / 10


class SweeperFuture(concurrent.futures.Future[None]):
    """The sweeper's future (done when it stops), also awaitable: LangGraph's async
    stores make `start_ttl_sweeper` a coroutine, so `await` gives this future back."""

    def __await__(self) -> Generator[Any, None, SweeperFuture]:
        yield from ()
        return self


@dataclass(frozen=True, slots=True)
class Stopped:
    """`stop_ttl_sweeper`'s answer: true when the sweeper stopped; awaitable to that
    bool, as LangGraph's async stores' coroutine is."""

    stopped: bool

    def __bool__(self) -> bool:
        return self.stopped

    def __await__(self) -> Generator[Any, None, bool]:
        yield from ()
        return self.stopped


class TTLSweeper:
    """A daemon thread calling `sweep` every `interval_minutes`; `start()`'s future ends
    with the loop, and cancelling it stops the loop (LangGraph's contract)."""

    def __init__(self, sweep: Callable[[], int], interval_minutes: float) -> None:
        self._sweep = sweep
        self._interval = max(0.001, float(interval_minutes)) * 60.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._future = SweeperFuture()

    def start(self) -> SweeperFuture:
        if self._thread is not None and self._thread.is_alive():
            return self._future
        self._stop.clear()
        self._future = SweeperFuture()
        self._future.add_done_callback(lambda f: self._stop.set() if f.cancelled() else None)
        self._thread = threading.Thread(
            target=self._loop, args=(self._future,), name="memorystore-ttl", daemon=True
        )
        self._thread.start()
        return self._future

    def stop(self, timeout: float | None = None) -> bool:
        """Signal the loop and join it; True when it has stopped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()

    def _loop(self, future: concurrent.futures.Future[None]) -> None:
        while not self._stop.wait(self._interval):
            try:
                removed = self._sweep()
                logger.debug("TTL sweep removed %d expired items", removed)
            except Exception:  # keep sweeping; a failed sweep retries next interval
                logger.warning("TTL sweep failed", exc_info=True)
        if future.set_running_or_notify_cancel():
            future.set_result(None)
