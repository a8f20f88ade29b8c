"""The keyword leg without FTS5: a user's postings in numpy, scored exactly.

FTS5 hands out candidates only in its own BM25 order, and ordering every match was
most of a warm hybrid search; with the postings the shared BM25F relevance of every
matching memory is computed at once, ranking like the in-memory reference. A build
reads all the user's documents, so no search waits for it (docs/bench-sqlite.md,
round 5).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ...service.bm25 import CorpusStats, QueryTerms, bm25_term, length_norm, relevance
from ...types import Kind, UserKey
from . import _sql as sql
from ._rows import user_state
from ._validity import Validity
from ._vectors import KIND_CODES, Stamp, evict_to_bytes, filter_mask

logger = logging.getLogger(__name__)

T = TypeVar("T")
_LOAD_BATCH = 4096
Reader = Callable[[Callable[[sqlite3.Connection], "KeywordIndex | None"]], "KeywordIndex | None"]
"""`Database.read`: runs a function in one read snapshot."""


@dataclass(frozen=True)
class Scored:
    """Keyword relevance of the memories matching at least one query token."""

    rows: np.ndarray
    """Positions in the index (int64)."""
    scores: np.ndarray
    """`relevance` of each row's BM25F score."""


@dataclass(frozen=True)
class KeywordIndex:
    """One user's live memories as postings, aligned by position with `rids`."""

    stamp: Stamp
    rids: np.ndarray
    kinds: np.ndarray
    events: np.ndarray
    """float64 event times in microseconds; NaN when the memory has none."""
    content_len: np.ndarray
    topic_len: np.ndarray
    terms: dict[str, int]
    """Token -> its slot in `offsets`."""
    offsets: np.ndarray
    docs: np.ndarray
    """int32 positions, grouped by token (`offsets[slot]:offsets[slot + 1]`)."""
    content_tf: np.ndarray
    topic_tf: np.ndarray
    content_total: int
    topic_total: int
    validity: Validity
    """Each row's validity: a search masks the rows outside its view."""

    @property
    def nbytes(self) -> int:
        arrays = (self.rids, self.kinds, self.events, self.content_len, self.topic_len)
        postings = (self.offsets, self.docs, self.content_tf, self.topic_tf)
        sizes = sum(a.nbytes for a in (*arrays, *postings)) + self.validity.nbytes
        return int(sizes) + 80 * len(self.terms)

    @classmethod
    def load(cls, conn: sqlite3.Connection, user: UserKey, stamp: Stamp) -> KeywordIndex:
        """Read the user's documents in batches: only one batch of token strings is
        alive at a time, so the build's peak memory stays near the index's size."""
        terms: dict[str, int] = {}
        columns: list[list[np.ndarray]] = [[] for _ in range(9)]
        validity: list[Validity] = []
        cursor = conn.execute(sql.SELECT_DOCUMENTS, (user.app_name, user.user_id))
        n = 0
        while batch := cursor.fetchmany(_LOAD_BATCH):
            m = len(batch)
            columns[0].append(np.fromiter((r[0] for r in batch), dtype=np.int64, count=m))
            columns[1].append(np.fromiter((KIND_CODES[r[1]] for r in batch), np.int8, m))
            columns[2].append(
                np.fromiter((np.nan if r[2] is None else r[2] for r in batch), np.float64, m)
            )
            for field, at in ((3, 3), (4, 6)):
                slots, lengths = _occurrences([r[field] for r in batch], terms)
                columns[at].append(slots)
                columns[at + 1].append(np.repeat(np.arange(n, n + m, dtype=np.int64), lengths))
                columns[at + 2].append(lengths.astype(np.float64))
            validity.append(Validity.of([r[5:8] for r in batch]))
            n += m
        rids, kinds, events, c_slots, c_pos, content_len, t_slots, t_pos, topic_len = (
            np.concatenate(parts) if parts else np.zeros(0) for parts in columns
        )
        width = max(n, 1)
        # One key per (token, document): token slot x n + position.
        c_keys, c_counts = np.unique(c_slots.astype(np.int64) * width + c_pos, return_counts=True)
        t_keys, t_counts = np.unique(t_slots.astype(np.int64) * width + t_pos, return_counts=True)
        keys = np.union1d(c_keys, t_keys)
        content_tf = np.zeros(len(keys), dtype=np.float32)  # small counts: exact in float32
        topic_tf = np.zeros(len(keys), dtype=np.float32)
        content_tf[np.searchsorted(keys, c_keys)] = c_counts
        topic_tf[np.searchsorted(keys, t_keys)] = t_counts
        offsets = np.zeros(len(terms) + 1, dtype=np.int64)
        np.cumsum(np.bincount(keys // width, minlength=len(terms)), out=offsets[1:])
        return cls(
            stamp=stamp,
            rids=rids.astype(np.int64),
            kinds=kinds.astype(np.int8),
            events=events.astype(np.float64),
            content_len=content_len,
            topic_len=topic_len,
            terms=terms,
            offsets=offsets,
            docs=(keys % width).astype(np.int32),
            content_tf=content_tf,
            topic_tf=topic_tf,
            content_total=int(content_len.sum()),
            topic_total=int(topic_len.sum()),
            validity=Validity.concat(validity) if validity else Validity.of([]),
        )

    def postings(self, token: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        slot = self.terms.get(token)
        if slot is None:
            return None
        span = slice(int(self.offsets[slot]), int(self.offsets[slot + 1]))
        return self.docs[span], self.content_tf[span], self.topic_tf[span]

    def document_frequency(self, token: str) -> int:
        slot = self.terms.get(token)
        return 0 if slot is None else int(self.offsets[slot + 1] - self.offsets[slot])

    def stats(self, tokens: list[str]) -> CorpusStats:
        df = {t: self.document_frequency(t) for t in tokens}
        return CorpusStats.of_totals(len(self.rids), df, self.content_total, self.topic_total)

    def score(self, terms: QueryTerms, stats: CorpusStats) -> Scored:
        """The shared keyword relevance of every row matching a query token.

        `bincount` adds each row's `bm25_term`s in query order, like
        `keyword_score`, so the scores equal it.
        """
        found: list[tuple[float, np.ndarray, np.ndarray, np.ndarray]] = []
        for token, weight in terms.weighted:
            postings = self.postings(token)  # a known token has at least one posting
            if postings is not None:
                found.append((weight * stats.idf(token), *postings))
        if not found:
            return Scored(np.zeros(0, dtype=np.int64), np.zeros(0))
        matched = np.concatenate([f[1] for f in found])
        seen = np.zeros(len(self.rids), dtype=bool)
        seen[matched] = True
        rows = np.flatnonzero(seen)  # O(n) but no sort: cheaper than np.unique here
        m = len(rows)
        slot = np.empty(len(self.rids), dtype=np.int64)
        slot[rows] = np.arange(m)
        inverse = slot[matched]
        content_norm = length_norm(self.content_len[rows], stats.avg_content_len)
        topic_norm = length_norm(self.topic_len[rows], stats.avg_topic_len)
        parts = []
        start = 0
        for weight_idf, docs, ctf, ttf in found:
            local = inverse[start : start + len(docs)]
            start += len(docs)
            parts.append(
                bm25_term(
                    weight_idf,
                    ctf.astype(np.float64),
                    content_norm[local],
                    ttf.astype(np.float64),
                    topic_norm[local],
                )
            )
        raw = np.bincount(inverse, np.concatenate(parts), m)
        return Scored(rows, relevance(raw, terms.reference(stats)))

    def allowed(
        self, rows: np.ndarray, kind: Kind | None, after_us: int | None, before_us: int | None
    ) -> np.ndarray:
        """Which of `rows` pass the kind and event-time filters (undated rows always pass)."""
        mask = filter_mask(self.kinds[rows], self.events[rows], kind, after_us, before_us)
        return np.ones(len(rows), dtype=bool) if mask is None else mask


def _occurrences(documents: list[str], terms: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """The term slot of every token occurrence, in order, and each document's length."""
    split = [d.split() for d in documents]
    lengths = np.fromiter((len(s) for s in split), dtype=np.int64, count=len(split))
    setdefault = terms.setdefault
    slots = np.fromiter(
        (setdefault(t, len(terms)) for s in split for t in s),
        dtype=np.int64,
        count=int(lengths.sum()),
    )
    return slots, lengths


class KeywordIndexCache:
    """LRU of `KeywordIndex` by user, bounded by bytes.

    `fts_searches` searches of each user state run on FTS5 before a build (1: a write
    and one search, the reconcile pattern, never pays for one). The build runs on the
    cache's `Builder` thread while searches use FTS5, or (`background=False`, tests)
    in the search that asks.
    """

    def __init__(self, max_bytes: int, fts_searches: int = 1, background: bool = True) -> None:
        self.max_bytes = max_bytes
        self.fts_searches = fts_searches
        self.background = background
        self._items: OrderedDict[UserKey, KeywordIndex] = OrderedDict()
        self._searched: OrderedDict[UserKey, tuple[Stamp, int]] = OrderedDict()
        self._building: set[UserKey] = set()
        self._lock = threading.Lock()
        self._builder = Builder()

    def get(self, read: Reader, user: UserKey, stamp: Stamp) -> KeywordIndex | None:
        """The user's index for this state, or None (search FTS5) while there is none."""
        with self._lock:
            item = self._items.get(user)
            if item is not None and item.stamp == stamp:
                self._items.move_to_end(user)
                return item
            seen_stamp, searches = self._searched.get(user, (stamp, 0))
            searches = searches + 1 if seen_stamp == stamp else 1
            self._searched[user] = (stamp, searches)
            self._searched.move_to_end(user)
            while len(self._searched) > 4096:
                self._searched.popitem(last=False)
            if searches <= self.fts_searches or user in self._building:
                return None
            self._building.add(user)
        if self.background:
            if self._builder.submit(self._build, read, user) is None:
                with self._lock:
                    self._building.discard(user)
            return None
        built = self._build(read, user)
        return built if built is not None and built.stamp == stamp else None

    def _build(self, read: Reader, user: UserKey) -> KeywordIndex | None:
        def load(conn: sqlite3.Connection) -> KeywordIndex | None:
            state = user_state(conn, user)  # None: an unknown user
            return None if state is None else KeywordIndex.load(conn, user, state[:2])

        try:
            item = read(load)
        except Exception:  # a closed service or a busy file: searches keep using FTS5
            logger.debug("keyword index build failed", exc_info=True)
            return None
        finally:
            with self._lock:
                self._building.discard(user)
        if item is None:
            return None
        with self._lock:
            self._items[user] = item
            self._items.move_to_end(user)
            evict_to_bytes(self._items, self.max_bytes)
        return item

    def drop(self, user: UserKey) -> None:
        with self._lock:
            self._items.pop(user, None)
            self._searched.pop(user, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._searched.clear()

    def close(self) -> None:
        """Stop the builder thread (queued builds are dropped), then forget every index."""
        self._builder.close()
        self.clear()


class Builder:
    """One thread of one owner (an index cache, a service's vector scans): started by
    the first `submit`, stopped by `close()`; a forked child starts its own.

    An `exclusive` one (the vector side scan) takes one task at a time and refuses
    others while busy: concurrent searches scan inline instead of queueing.
    """

    def __init__(self, name: str = "langmem-keyword-index", exclusive: bool = False) -> None:
        self._name = name
        self._busy = threading.Lock() if exclusive else None
        self._executor: ThreadPoolExecutor | None = None
        self._pid = 0
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, work: Callable[..., T], *args: Any) -> Future[T] | None:
        """Queue `work(*args)`; None (nothing queued) once closed, or while busy."""
        busy = self._busy
        if busy is not None and not busy.acquire(blocking=False):
            return None
        future = None
        try:
            with self._lock:
                if not self._closed:
                    if self._executor is None or self._pid != os.getpid():
                        self._executor = ThreadPoolExecutor(1, thread_name_prefix=self._name)
                        self._pid = os.getpid()
                    future = self._executor.submit(_run, busy, work, args)
        finally:
            if busy is not None and future is None:  # nothing queued will release it
                busy.release()
        return future

    def close(self) -> None:
        """Stop the thread: one task in flight is waited for; queued ones are dropped,
        except an exclusive one's (its submitter waits for the result)."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None and self._pid == os.getpid():
            executor.shutdown(wait=True, cancel_futures=self._busy is None)


def _run(busy: threading.Lock | None, work: Callable[..., T], args: tuple[Any, ...]) -> T:
    try:
        return work(*args)
    finally:
        if busy is not None:
            busy.release()
