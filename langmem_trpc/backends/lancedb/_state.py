"""What the service keeps of a user between calls: every memory row, and the search
index of the live ones (keyword documents with postings and corpus totals, the
vector matrix).

The table stays the truth: a user's state is loaded from it with one scan, and
every commit this service makes is applied to the user's state after the table
accepted it, so a state always equals the table (no
other process writes it: the backend does not declare `CROSS_PROCESS`).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable

import numpy as np

from ...service._language import Language
from ...service._search import CorpusStats, KeywordDoc, QueryTerms
from ...types import Entry, UserKey
from ._store import Record, Store, scope_of, where

STATE_ROWS = 200_000
"""Memory rows kept over all users by default (the service's `state_rows`)."""


class UserState:
    """One user's memory rows by id (live and deleted) and the live rows' search index."""

    def __init__(self, records: Iterable[Record], language: Language) -> None:
        self.language = language
        self.rows: dict[str, Record] = {}
        self.entries: dict[str, Entry] = {}
        self.live: dict[str, None] = {}
        """The live rows' ids, in row order."""
        self.docs: dict[str, KeywordDoc] = {}
        self.unindexed: set[str] = set()
        self.by_fp: dict[str, set[str]] = {}
        self.postings: dict[str, set[str]] = {}
        self.df: Counter[str] = Counter()
        self.lengths = [0, 0]
        self._matrix: tuple[list[Entry], np.ndarray] | None = None
        for record in records:
            self.put(record)

    def __len__(self) -> int:
        return len(self.rows)

    def put(self, record: Record) -> None:
        self.drop(record.ref)
        self.rows[record.ref], self.entries[record.ref] = record, record.entry
        self.by_fp.setdefault(record.fp or "", set()).add(record.ref)
        if record.live:
            self.live[record.ref] = None
            self.unindexed.add(record.ref)
        self._matrix = None

    def drop(self, ref: str) -> None:
        old = self.rows.pop(ref, None)
        if old is None:
            return
        del self.entries[ref]
        self.by_fp[old.fp or ""].discard(ref)
        self.live.pop(ref, None)
        self.unindexed.discard(ref)
        doc = self.docs.pop(ref, None)
        if doc is not None:
            self._count(doc, -1)
            for term in doc.terms:
                self.postings[term].discard(ref)
        self._matrix = None

    def _count(self, doc: KeywordDoc, sign: int) -> None:
        self.df.update({t: sign for t in doc.terms})
        self.lengths[0] += sign * doc.content_len
        self.lengths[1] += sign * doc.topic_len

    def index(self) -> None:
        """Build the keyword documents of the live rows written since the last search
        (a write only queues its row: adds do not pay for tokenising)."""
        for ref in self.unindexed:
            entry = self.entries[ref]
            doc = self.docs[ref] = KeywordDoc.build(entry.text, entry.memory.topics, self.language)
            self._count(doc, 1)
            for term in doc.terms:
                self.postings.setdefault(term, set()).add(ref)
        self.unindexed.clear()

    def stats(self, terms: QueryTerms) -> CorpusStats:
        """`CorpusStats.from_docs` of the live rows, for the query's terms."""
        self.index()
        n, (content, topic) = len(self.docs), self.lengths
        df = {t: self.df[t] for t in terms.tokens}
        average = (max(content / n, 1.0), max(topic / n, 1.0)) if n else (1.0, 1.0)
        return CorpusStats(n, df, *average)

    def candidates(self, terms: QueryTerms) -> list[tuple[Entry, KeywordDoc]]:
        """Live rows holding a query term, in row order (every live row for a query
        without a primary token: the literal phrase fallback may match any of them)."""
        self.index()
        refs: Iterable[str] = self.live
        if terms.primary:
            held = set().union(*(self.postings.get(t, ()) for t in terms.tokens))
            refs = [r for r in self.live if r in held]
        return [(self.entries[r], self.docs[r]) for r in refs]

    def similar(self, vector: np.ndarray) -> tuple[list[Entry], np.ndarray]:
        """The live rows with a vector and their dot products with `vector`; the
        matrix is rebuilt on the first search after a change."""
        if self._matrix is None:
            refs = [r for r in self.live if self.rows[r].vector is not None]
            rows = [self.rows[r].vector for r in refs]
            matrix = np.vstack(rows) if rows else np.zeros((0, len(vector)), np.float32)
            self._matrix = [self.entries[r] for r in refs], matrix
        entries, matrix = self._matrix
        return entries, matrix @ vector


class States:
    """The `UserState`s of one service, least recently used first: past `limit` memory
    rows the least recently used users are dropped (never the one asked for). Callers
    hold the store lock."""

    def __init__(self, store: Store, language: Language, limit: int) -> None:
        self._store, self._language, self._limit = store, language, limit
        self.held: OrderedDict[str, UserState] = OrderedDict()

    def get(self, user: UserKey) -> UserState:
        scope = scope_of(user)
        state = self.held.get(scope)
        if state is None:
            state = self.held[scope] = UserState(
                self._store.records(where(user, live=False)), self._language
            )
            while len(self.held) > 1 and sum(map(len, self.held.values())) > self._limit:
                self.held.popitem(last=False)
        self.held.move_to_end(scope)
        return state
