"""Search over one read snapshot: the keyword leg (FTS5), the vector leg (numpy), caches.

`SearchRun.fetch` fetches the legs of one `FetchLegs` step of the shared search plan
(`service.reads.search`), which plans and ranks them, so fusion, fallback and dedupe
stay in one place; the plan never calls back into this module.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from ...service.bm25 import (
    CorpusStats,
    KeywordDoc,
    KeywordScorer,
    QueryTerms,
    loose_text,
    score_candidates,
)
from ...service.documents import keyword_doc, memory_keys
from ...service.language import ENGLISH, Language
from ...service.periods import TimeMentions
from ...service.rules import utcnow
from ...service.search import Legs
from ...service.validity import view_of
from ...types import Entry, Kind, SearchOptions, UserKey
from . import _sql as sql
from ._keyword import match_any, scope_prefix
from ._postings import Builder, KeywordIndex, KeywordIndexCache, Reader
from ._rows import CONTENT_DOC, TEXT, TOPIC_DOC, TOPICS, Row, user_state
from ._validity import Validity, conditions, filters_rows
from ._vectors import KIND_CODES, Stamp, UserVectors, VectorCache

Hits = list[tuple[int, float]]
_ROW_CACHE_USERS = 64
_ROW_CACHE_ROWS = 12_000
"""Entries, keyword documents and document frequencies kept over all users (an entry
and its document take about 2 KB): a user of 10,000 memories fits, larger ones recycle."""
SIDE_SCAN_MIN_VALUES = 1_000_000
"""Matrices this large (rows x dim) are scanned on the side thread: below, the
hand-off costs more than the overlap saves."""


class RowCache:
    """What searches of one user state share: `Entry` models and `KeywordDoc`s (building
    them for a few hundred candidates was most of a warm search's CPU time) and the
    document frequencies FTS counted. A write changes the stamp, so it is never stale."""

    def __init__(self, stamp: Stamp) -> None:
        self.stamp = stamp
        self.entries: dict[int, Entry] = {}
        self.docs: dict[int, KeywordDoc] = {}
        self.df: dict[str, int] = {}

    @property
    def size(self) -> int:
        return len(self.entries) + len(self.docs) + len(self.df)


class SearchCaches:
    """One service's search caches, each valid for one (generation, version) of a user
    (a trigger bumps it on every write, from any process, so none is ever stale), and its
    two threads (the vector side scan, the keyword index builder), stopped by `close()`."""

    def __init__(self, vector_bytes: int, read: Reader, language: Language = ENGLISH) -> None:
        self.vectors = VectorCache(vector_bytes)
        self.keywords = KeywordIndexCache(vector_bytes)
        self.time_mentions = TimeMentions(language)
        self.side = Builder("langmem-vector-scan", exclusive=True)
        self.read = read
        self._lock = threading.Lock()
        self._rows: OrderedDict[UserKey, RowCache] = OrderedDict()

    def close(self) -> None:
        """Stop both threads (waiting for work in flight), then drop every cache."""
        self.side.close()
        self.keywords.close()
        self.clear()

    def clear(self) -> None:
        self.vectors.clear()
        self.keywords.clear()
        self.time_mentions.clear()
        with self._lock:
            self._rows.clear()

    def drop(self, user: UserKey) -> None:
        self.vectors.drop(user)
        self.keywords.drop(user)
        with self._lock:
            self._rows.pop(user, None)

    def rows(self, user: UserKey, stamp: Stamp) -> RowCache:
        """The user's row cache for this state (a fresh one when the user was written since)."""
        with self._lock:
            cached = self._rows.get(user)
            if cached is None or cached.stamp != stamp or cached.size > _ROW_CACHE_ROWS:
                cached = self._rows[user] = RowCache(stamp)
            self._rows.move_to_end(user)
            total = sum(c.size for c in self._rows.values())
            while len(self._rows) > 1 and (
                len(self._rows) > _ROW_CACHE_USERS or total > _ROW_CACHE_ROWS
            ):
                total -= self._rows.popitem(last=False)[1].size
            return cached

    def user_vectors(
        self, conn: sqlite3.Connection, user: UserKey, stamp: Stamp, dim: int
    ) -> UserVectors:
        """The user's live embeddings of this dimension, loaded from this snapshot if stale."""
        cached = self.vectors.get(user, stamp)
        if cached is not None and cached.matrix.shape[1] == dim:
            return cached
        u = (user.app_name, user.user_id)
        n = conn.execute(sql.COUNT_VECTORS, (*u, dim * 4)).fetchone()[0]
        rids = np.empty(n, dtype=np.int64)
        matrix = np.empty((n, dim), dtype=np.float32)
        kinds = np.empty(n, dtype=np.int8)
        events = np.full(n, np.nan, dtype=np.float64)
        validity: list[tuple[int, int | None, bool]] = []
        rows = conn.execute(sql.SELECT_VECTORS, (*u, dim * 4))  # the n counted: one snapshot
        for i, (rid, kind, event_time, blob, *valid) in enumerate(rows):
            rids[i] = rid
            matrix[i] = np.frombuffer(blob, dtype=np.float32)
            kinds[i] = KIND_CODES[kind]
            if event_time is not None:
                events[i] = event_time
            validity.append(valid)  # type: ignore[arg-type]  # (valid_from, valid_to, superseded)
        vectors = UserVectors(stamp, rids, matrix, kinds, events, Validity.of(validity))
        self.vectors.put(user, vectors)
        return vectors


class SearchRun:
    """One search's fetches over one read snapshot (`_reads.SQLiteReads.fetch_legs`):
    the legs of each kind and pool the shared plan asks for, ranked by `rank_search`.
    Built at the search's first `FetchLegs`, it keeps the user's state and keyword
    statistics for the deeper tiers of the same snapshot."""

    def __init__(
        self,
        caches: SearchCaches,
        conn: sqlite3.Connection,
        user: UserKey,
        options: SearchOptions,
        query_vector: np.ndarray | None,
        keyword_candidates: int | None,
        language: Language,
    ) -> None:
        self.language = language
        self.caches = caches
        self.keyword_candidates = keyword_candidates
        self.user = user
        self.options = options
        self.query_vector = query_vector
        self.terms = QueryTerms.of(options, language)
        self.after_us = sql.to_us(options.time_after)
        self.before_us = sql.to_us(options.time_before)
        self.view = view_of(options)
        self.now_us = sql.to_us(utcnow()) or 0
        self.missing_vectors = 0
        """Set to the query dimension when live memories lack a vector of that size."""
        self._conn = conn
        self._state: Row | None = user_state(conn, user)
        self.empty = self._state is None or self._state[2] == 0
        """The user has no live row: every leg is empty."""
        self.stamp: Stamp = ("", 0)
        self.filtered = False
        """Whether the view leaves out some of the user's live rows."""
        self._cache = RowCache(self.stamp)
        self._stats: CorpusStats | None = None
        self._index: KeywordIndex | None = None
        if self._state is not None and not self.empty:
            self.stamp = self._state[:2]
            self.filtered = filters_rows(self.view, self._state)
            self._cache = caches.rows(user, self.stamp)
            if self.terms.tokens:
                self._index = caches.keywords.get(caches.read, user, self.stamp)

    def serves(
        self, user: UserKey, options: SearchOptions, query_vector: np.ndarray | None
    ) -> bool:
        """Whether a fetch of this search (one plan's deeper tier) can reuse this run."""
        return user == self.user and options is self.options and query_vector is self.query_vector

    def fetch(self, kind: Kind | None, pool: int) -> Legs:
        """The best `pool` candidates of each leg, filtered by `kind`."""
        if self.empty:
            return Legs(vector=None if self.query_vector is None else [], keyword=[])
        if self.query_vector is None:
            return Legs(vector=None, keyword=self._keyword_leg(kind, pool))
        # Without `hybrid` the shared ranking uses the vector leg alone.
        scan = self._start_vector_scan(kind, pool, inline=not self.options.hybrid)
        keyword = self._keyword_leg(kind, pool) if self.options.hybrid else []
        return Legs(vector=self._entry_hits(scan()), keyword=keyword)

    # -- shared pieces ------------------------------------------------------------

    def _filters(self, kind: Kind | None, prefix: str) -> tuple[str, list[Any]]:
        clauses, params = "", list[Any]()
        if kind is not None:
            clauses += f" AND {prefix}kind = ?"
            params.append(kind.value)
        if self.after_us is not None:
            clauses += f" AND ({prefix}event_time IS NULL OR {prefix}event_time >= ?)"
            params.append(self.after_us)
        if self.before_us is not None:
            clauses += f" AND ({prefix}event_time IS NULL OR {prefix}event_time <= ?)"
            params.append(self.before_us)
        if self.filtered:
            valid, valid_params = conditions(self.view, self.now_us, prefix)
            clauses += valid
            params.extend(valid_params)
        return clauses, params

    def _entry(self, row: Row) -> Entry:
        entry = self._cache.entries.get(row[0])
        if entry is None:
            entry = sql.row_to_entry(row, self.user.app_name, self.user.user_id)
            self._cache.entries[row[0]] = entry
        return entry

    def _entry_hits(self, hits: Hits) -> list[tuple[Entry, float]]:
        """(entry, score) of each (rid, score) hit, loading the entries not cached."""
        entries = self._cache.entries
        missing = [rid for rid, _ in hits if rid not in entries]
        if missing:
            for row in self._rows_by_rid(sql.SELECT_BY_RIDS, missing):
                self._entry(row)
        return [(entries[rid], score) for rid, score in hits if rid in entries]

    def _rows_by_rid(self, query: str, rids: list[int]) -> list[Row]:
        """The user's rows with these rids (`query` ends in `rid IN `)."""
        params = (self.user.app_name, self.user.user_id, *rids)
        return self._conn.execute(query + f"({', '.join('?' * len(rids))})", params).fetchall()

    # -- legs ---------------------------------------------------------------------

    def _start_vector_scan(
        self, kind: Kind | None, pool: int, inline: bool = False
    ) -> Callable[[], Hits]:
        """The best `pool` (rid, score) of the vector leg, to collect by calling the result.
        The product (numpy) and the FTS query both release the GIL, so on a large matrix
        the product runs on the side thread while this one queries FTS."""
        assert self.query_vector is not None and self._state
        dim = int(self.query_vector.shape[0])
        vectors = self.caches.user_vectors(self._conn, self.user, self.stamp, dim)
        if len(vectors.rids) < self._state[2]:
            self.missing_vectors = dim
        visible = vectors.validity.mask(self.view, self.now_us) if self.filtered else None
        filters = (pool, kind, self.after_us, self.before_us, visible)
        if not inline and vectors.matrix.size >= SIDE_SCAN_MIN_VALUES:
            scan = self.caches.side.submit(vectors.scores, self.query_vector)
            if scan is not None:
                return lambda: vectors.select(scan.result(), *filters)
        hits = vectors.select(vectors.scores(self.query_vector), *filters)
        return lambda: hits

    def _corpus_stats(self) -> CorpusStats:
        assert self._state is not None
        if self._stats is None and self._index is not None:
            self._stats = self._index.stats(self.terms.tokens)
        if self._stats is None:
            df = self._document_frequencies()
            self._stats = CorpusStats.of_totals(self._state[2], df, *self._state[3:5])
        return self._stats

    def _document_frequencies(self) -> dict[str, int]:
        """The user's document frequency of each query token: one FTS count per token and state."""
        known, prefix, df = self._cache.df, scope_prefix(self.user), {}
        for t in self.terms.tokens:
            count = known.get(t)
            if count is None:
                match = match_any(prefix, [t])
                count = known[t] = self._conn.execute(sql.FTS_COUNT, (match,)).fetchone()[0]
            df[t] = count
        return df

    def _keyword_leg(self, kind: Kind | None, pool: int) -> list[tuple[Entry, float]]:
        """FTS5 ranks candidates by its BM25; the shared keyword relevance scores them."""
        if not self.terms.tokens:
            return self._phrase_scan(kind, pool)
        if self._index is not None:  # exact relevance of every matching memory
            scored = self._index.score(self.terms, self._corpus_stats())
            keep = self._index.allowed(scored.rows, kind, self.after_us, self.before_us)
            if self.filtered:
                visible = self._index.validity.mask(self.view, self.now_us, scored.rows)
                keep = keep if visible is None else keep & visible
            return self._best(self._index.rids[scored.rows[keep]], scored.scores[keep], pool)
        stats = self._corpus_stats()
        limit = self.keyword_candidates or max(pool * 3 // 2, 90)
        match = match_any(scope_prefix(self.user), self.terms.tokens)
        clauses, params = self._filters(kind, "m.")
        query = (sql.FTS_RANK_FILTERED if clauses else sql.FTS_RANK) + clauses
        # When the user's document frequencies show that every match fits under the
        # cut, all are scored anyway: skip BM25 ordering (about 60% of the FTS time).
        if sum(stats.df.values()) > limit:
            query, params = query + sql.FTS_ORDER, [*params, limit]
        ranked = self._conn.execute(query, (match, *params))
        rids = self._load_docs([rid for (rid,) in ranked])
        scores = score_candidates(self.terms, [self._cache.docs[rid] for rid in rids], stats)
        return self._best(np.asarray(rids, dtype=np.int64), scores, pool)

    def _load_docs(self, rids: list[int]) -> list[int]:
        """`rids` whose keyword documents and entries are now cached (all of them: one snapshot)."""
        docs, entries = self._cache.docs, self._cache.entries
        missing = [rid for rid in rids if rid not in docs or rid not in entries]
        if not missing:
            return rids
        for row in self._rows_by_rid(sql.SELECT_CANDIDATES, missing):
            self._entry(row)
            docs[row[0]] = keyword_doc(row[CONTENT_DOC], row[TOPIC_DOC])
        return [rid for rid in rids if rid in docs]

    def _best(self, rids: np.ndarray, scores: np.ndarray, pool: int) -> list[tuple[Entry, float]]:
        """The best `pool` hits that score > 0 (a token matched), ties to the oldest row."""
        keep = scores > 0
        rids, scores = rids[keep], scores[keep]
        if len(scores) > pool:  # only the best `pool` (ties at the cut included) are sorted
            keep = scores >= np.partition(scores, len(scores) - pool)[len(scores) - pool]
            rids, scores = rids[keep], scores[keep]
        best = np.lexsort((rids, -scores))[:pool]
        return self._entry_hits(list(zip(rids[best].tolist(), scores[best].tolist(), strict=True)))

    def _phrase_scan(self, kind: Kind | None, pool: int) -> list[tuple[Entry, float]]:
        """A query with no tokens ("C#"): the shared literal fallback over a filtered scan."""
        words = loose_text(self.options.query).split()
        if not words:
            return []
        clauses, params = self._filters(kind, "")
        stats = CorpusStats(n_docs=0, df={}, avg_content_len=1.0, avg_topic_len=1.0)
        scorer = KeywordScorer.of(self.terms, stats)
        scored: list[tuple[float, int, Row]] = []
        for row in self._conn.execute(
            sql.SELECT_SCAN + clauses + " ORDER BY rid",
            (self.user.app_name, self.user.user_id, *params),
        ):
            text = row[TEXT].lower()
            keys = memory_keys(json.loads(row[TOPICS]), json.loads(row[6]), row[7])
            joined = " ".join(keys).lower()
            if not (all(w in text for w in words) or all(w in joined for w in words)):
                continue  # cheap prefilter: the literal needle cannot occur
            doc = KeywordDoc.build(row[TEXT], keys, self.language)
            score = scorer.score(doc)
            if score > 0:
                scored.append((score, row[0], row))
        scored.sort(key=lambda hit: (-hit[0], hit[1]))
        return [(self._entry(row), score) for score, _, row in scored[:pool]]
