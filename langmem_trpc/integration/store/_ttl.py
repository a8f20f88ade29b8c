"""Time-to-live of store items, kept in the item's store metadata.

`expires_at` (ISO-8601, UTC) and `ttl` (minutes) ride next to the value. An
expired item is invisible to `get`, `search` and `list_namespaces` at once;
`sweep_ttl()` soft-deletes expired items through the service (a `delete`
history event with actor "store:ttl"), after which the service's purge rules
apply. A read that refreshes rewrites the item only once a tenth of its TTL
(at least one second) has passed since the last write, so reads do not turn
into a write each.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from ...types import Entry
from ._values import store_meta

__all__ = ["TTLSweeper", "expired", "expires_at", "expiry_fields", "needs_refresh"]

logger = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def expiry_fields(ttl: float | None, now: datetime | None = None) -> dict[str, Any]:
    """The metadata fields of an item put with `ttl` minutes (none without a TTL)."""
    if ttl is None:
        return {}
    at = (now or _now()) + timedelta(minutes=float(ttl))
    return {"ttl": float(ttl), "expires_at": at.isoformat()}


def expires_at(entry: Entry) -> datetime | None:
    stored = store_meta(entry)
    raw = stored.get("expires_at") if stored is not None else None
    if not isinstance(raw, str):
        return None
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        return None


def expired(entry: Entry, now: datetime | None = None) -> bool:
    at = expires_at(entry)
    return at is not None and at <= (now or _now())


def needs_refresh(entry: Entry, now: datetime | None = None) -> bool:
    """Whether a refreshing read should push this item's expiry forward now."""
    stored = store_meta(entry)
    at = expires_at(entry)
    ttl = stored.get("ttl") if stored is not None else None
    if at is None or not isinstance(ttl, (int, float)):
        return False
    slack = max(timedelta(seconds=1), timedelta(minutes=float(ttl)) / 10)
    return at - (now or _now()) < timedelta(minutes=float(ttl)) - slack


class TTLSweeper:
    """A daemon thread that calls `sweep` every `interval_minutes` until stopped.

    `start()` returns a future that completes when the loop ends; cancelling
    it stops the loop (LangGraph's `start_ttl_sweeper` contract).
    """

    def __init__(self, sweep: Callable[[], int], interval_minutes: float) -> None:
        self._sweep = sweep
        self._interval = max(0.001, float(interval_minutes)) * 60.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._future: concurrent.futures.Future[None] | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> concurrent.futures.Future[None]:
        if self.running and self._future is not None:
            return self._future
        self._stop.clear()
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        future.add_done_callback(lambda f: self._stop.set() if f.cancelled() else None)
        self._future = future
        self._thread = threading.Thread(
            target=self._loop, args=(future,), name="memorystore-ttl", daemon=True
        )
        self._thread.start()
        return future

    def stop(self, timeout: float | None = None) -> bool:
        """Signal the loop and join it; True when it has stopped."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        if thread.is_alive():
            return False
        self._thread = None
        return True

    def _loop(self, future: concurrent.futures.Future[None]) -> None:
        while not self._stop.wait(self._interval):
            try:
                removed = self._sweep()
                logger.debug("TTL sweep removed %d expired items", removed)
            except Exception:  # keep sweeping; a failed sweep retries next interval
                logger.warning("TTL sweep failed", exc_info=True)
        if future.set_running_or_notify_cancel():
            future.set_result(None)
