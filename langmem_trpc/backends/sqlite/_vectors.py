"""The vector leg: per-user float32 matrices cached in the process, scored with numpy.

A matrix is valid for one (generation, version) of the user: a trigger bumps it on
every write, from any process, and the next search reloads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from ...types import Kind, UserKey
from ._validity import Validity

KIND_CODES = {Kind.FACT.value: 0, Kind.EPISODE.value: 1}
Stamp = tuple[str, int]
NewRow = tuple[int, str, int | None, bytes | None, int, int | None, bool]
"""An inserted row for the caches: rid, kind, event_time (us or None), embedding blob
or None, valid_from, valid_to (us or None), superseded."""


def to_blob(vector: np.ndarray | None) -> bytes | None:
    return None if vector is None else np.ascontiguousarray(vector, dtype=np.float32).tobytes()


def filter_mask(
    kinds: np.ndarray,
    events: np.ndarray,
    kind: Kind | None,
    after_us: int | None,
    before_us: int | None,
) -> np.ndarray | None:
    """Which rows pass the kind and event-time filters (undated rows always pass);
    None when no filter is set."""
    mask: np.ndarray | None = None
    if kind is not None:
        mask = kinds == KIND_CODES[kind.value]
    if after_us is not None or before_us is not None:
        inside = np.ones(len(events), dtype=bool)
        with np.errstate(invalid="ignore"):
            if after_us is not None:
                inside &= events >= after_us
            if before_us is not None:
                inside &= events <= before_us
        time_ok = np.isnan(events) | inside
        mask = time_ok if mask is None else mask & time_ok
    return mask


@dataclass(frozen=True)
class UserVectors:
    """One user's live embeddings with the columns the filters need."""

    stamp: Stamp
    rids: np.ndarray
    """int64 row ids, aligned with `matrix` rows."""
    matrix: np.ndarray
    """float32 (n, dim), rows L2-normalised."""
    kinds: np.ndarray
    """int8 kind codes (`KIND_CODES`)."""
    events: np.ndarray
    """float64 event times in microseconds; NaN when the memory has none."""
    validity: Validity
    """Each row's validity: a search masks the rows outside its view."""

    @property
    def nbytes(self) -> int:
        arrays = (self.rids, self.matrix, self.kinds, self.events)
        return sum(int(a.nbytes) for a in arrays) + self.validity.nbytes

    def scores(self, query: np.ndarray) -> np.ndarray:
        """Cosine of every row clipped at 0 (clip first: ties go to the oldest row). The
        heavy part of the leg, without the GIL: a side thread can run it alone."""
        # einsum, not `@`: BLAS would spread this small product over threads whose
        # wake-up and spinning cost more than the product (10x at p50 on a busy host).
        scores: np.ndarray = np.einsum("ij,j->i", self.matrix, query)
        np.maximum(scores, 0.0, out=scores)
        return scores

    def select(
        self,
        scores: np.ndarray,
        pool: int,
        kind: Kind | None,
        after_us: int | None,
        before_us: int | None,
        visible: np.ndarray | None = None,
    ) -> list[tuple[int, float]]:
        """Best `pool` (rid, score) after the kind and time filters and the validity
        view's mask (`visible`, None: every row), given every row's `scores`."""
        mask = filter_mask(self.kinds, self.events, kind, after_us, before_us)
        if visible is not None:
            mask = visible if mask is None else mask & visible
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        k = min(pool, len(scores))
        best = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        best = best[np.lexsort((self.rids[best], -scores[best]))]  # ties: oldest row first
        chosen = scores[best]
        finite = np.isfinite(chosen)  # filtered out rows score -inf
        if not finite.all():
            best, chosen = best[finite], chosen[finite]
        return list(zip(self.rids[best].tolist(), chosen.tolist(), strict=True))


@dataclass(frozen=True)
class Appended:
    """New live rows one committed write added, taking the user from `before` to `after`.

    Rows are `NewRow`s; their rids are above every existing row's, as the batch
    path assigns them.
    """

    before: Stamp
    after: Stamp
    rows: list[NewRow]


class VectorCache:
    """LRU of `UserVectors` by user, bounded by total bytes.

    A write of this process that only appended rows records them (`append`), and the
    next `get` of the new stamp extends the cached matrix instead of reloading every
    row; any other change of the stamp (another process, an update, a delete) misses.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[UserKey, UserVectors] = OrderedDict()
        self._pending: dict[UserKey, list[Appended]] = {}
        self._lock = threading.Lock()

    def get(self, user: UserKey, stamp: Stamp) -> UserVectors | None:
        with self._lock:
            item = self._items.get(user)
            if item is None:
                return None
            if item.stamp != stamp:
                pending = self._pending.pop(user, [])
                if not pending or pending[-1].after != stamp:
                    return None
                item = _extended(item, pending)
                self._items[user] = item
                self._evict()
            self._items.move_to_end(user)
            return item

    def put(self, user: UserKey, item: UserVectors) -> None:
        with self._lock:
            self._pending.pop(user, None)
            self._items[user] = item
            self._items.move_to_end(user)
            self._evict()

    def holds(self, user: UserKey) -> bool:
        """Whether a matrix of `user` is cached (an append can only extend one that is)."""
        with self._lock:
            return user in self._items

    def append(self, user: UserKey, appended: Appended) -> None:
        """Record a committed append-only write (ignored unless it continues the cached state)."""
        with self._lock:
            item = self._items.get(user)
            if item is None:
                return
            pending = self._pending.setdefault(user, [])
            if (pending[-1].after if pending else item.stamp) != appended.before:
                del self._pending[user]  # the cached state is stale: the next get reloads
                return
            pending.append(appended)

    def _evict(self) -> None:
        for evicted_user in evict_to_bytes(self._items, self.max_bytes):
            self._pending.pop(evicted_user, None)

    def drop(self, user: UserKey) -> None:
        with self._lock:
            self._items.pop(user, None)
            self._pending.pop(user, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._pending.clear()


class _Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


K = TypeVar("K")
V = TypeVar("V", bound=_Sized)


def evict_to_bytes(items: OrderedDict[K, V], max_bytes: int) -> list[K]:
    """Drop least recently used items until the rest fit in `max_bytes` (the newest
    always stays); returns the evicted keys. The caller holds the cache's lock."""
    evicted: list[K] = []
    total = sum(item.nbytes for item in items.values())
    while total > max_bytes and len(items) > 1:
        key, item = items.popitem(last=False)
        total -= item.nbytes
        evicted.append(key)
    return evicted


def _extended(item: UserVectors, pending: list[Appended]) -> UserVectors:
    """`item` plus the appended rows whose embedding has the matrix's dimension,
    exactly what a reload (live rows of that dimension, by rid) would give."""
    width = item.matrix.shape[1] * 4
    rows = [
        row
        for chunk in pending
        for row in chunk.rows
        if row[3] is not None and len(row[3]) == width
    ]
    n = len(rows)
    rids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=n)
    kinds = np.fromiter((KIND_CODES[row[1]] for row in rows), dtype=np.int8, count=n)
    events = np.fromiter(
        (np.nan if row[2] is None else row[2] for row in rows), dtype=np.float64, count=n
    )
    added = np.frombuffer(b"".join(row[3] for row in rows if row[3] is not None), dtype=np.float32)
    validity = Validity.of([row[4:] for row in rows])
    return UserVectors(
        pending[-1].after,
        np.concatenate([item.rids, rids]),
        np.concatenate([item.matrix, added.reshape(n, item.matrix.shape[1])]),
        np.concatenate([item.kinds, kinds]),
        np.concatenate([item.events, events]),
        Validity.concat([item.validity, validity]),
    )
