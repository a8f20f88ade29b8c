"""A cached user's search index: keyword documents, postings and the vector matrix.

The default view (current memories, `service.validity.CURRENT`) is served by an
index kept up to date incrementally: a write marks its rows `stale` and the next
search re-indexes them. It holds only the rows a default search may return
(live, not superseded, not lapsed, not expired), so a long chain of old versions
never takes a place in a candidate pool. The keyword statistics are those of every
live row (superseded, lapsed and expired ones too, as the reference and SQL keep
them), whatever the view: a second incremental index, `UserRows.live`. Rows whose `valid_to` or `expires_at` is ahead
leave it when that time passes (`UserRows.renew_at`). Searches with `as_of` or
`include_superseded` build a one-off index of the rows their view shows.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from ...service.bm25 import CorpusStats, KeywordDoc, QueryTerms
from ...service.language import Language
from ...service.rows import MemoryRow
from ...service.validity import CURRENT, View
from ...types import Entry

Hits = list[tuple[Entry, KeywordDoc]]


@dataclass
class Index:
    """The keyword documents and postings of some rows, and their vectors as a matrix."""

    docs: dict[str, KeywordDoc] = field(default_factory=dict)
    postings: dict[str, set[str]] = field(default_factory=dict)
    lengths: tuple[int, int] = (0, 0)
    matrix: tuple[Sequence[Entry], np.ndarray] = ((), np.zeros(0, np.float32))

    def add(self, ref: str, doc: KeywordDoc) -> None:
        self.docs[ref] = doc
        for term in doc.terms:
            self.postings.setdefault(term, set()).add(ref)

    def discard(self, ref: str) -> None:
        old = self.docs.pop(ref, None)
        for term in old.terms if old is not None else ():
            self.postings[term].discard(ref)

    def total(self) -> None:
        """Sum the lengths of the indexed documents."""
        docs = self.docs.values()
        self.lengths = sum(d.content_len for d in docs), sum(d.topic_len for d in docs)

    def finish(self, rows: Iterable[MemoryRow]) -> None:
        """Sum the lengths and stack the vectors of the indexed `rows` (in row order)."""
        self.total()
        held = [(r.entry, r.vector) for r in rows if r.entry.id in self.docs]
        vectors = [(e, v) for e, v in held if v is not None]
        self.matrix = [e for e, _ in vectors], np.array([v for _, v in vectors], np.float32)

    def keyword(
        self, rows: dict[str, MemoryRow], terms: QueryTerms, corpus: Index
    ) -> tuple[Hits, CorpusStats]:
        """The indexed rows holding a query term in row order (all, without a primary token:
        the phrase fallback may match any), and `CorpusStats.from_docs` of `corpus`'s rows."""
        n, (content, topic) = len(corpus.docs), corpus.lengths
        average = (max(content / n, 1.0), max(topic / n, 1.0)) if n else (1.0, 1.0)
        df = {t: len(corpus.postings.get(t, ())) for t in terms.tokens}
        held: Container[str] = self.docs
        if terms.primary:
            held = set().union(*(self.postings.get(t, ()) for t in terms.tokens))
        hits = [(row.entry, self.docs[r]) for r, row in rows.items() if r in held]
        return hits, CorpusStats(n, df, *average)


@dataclass
class UserRows:
    """A user's memory rows, in write order, and the index of its current ones (see the
    module docstring). A write marks the rows it changed `stale`."""

    rows: dict[str, MemoryRow] = field(default_factory=dict)
    stale: set[str] = field(default_factory=set)
    index: Index = field(default_factory=Index)
    live: Index = field(default_factory=Index)
    """Every live row's document: the keyword statistics of any view."""
    renew_at: datetime | None = None
    """The first `valid_to` / `expires_at` ahead among the indexed rows: past it, the
    index is rebuilt (a row lapsed or expired without a write)."""

    def current(self, language: Language, now: datetime) -> Index:
        """The index of the default view at `now`, brought up to date."""
        if self.renew_at is not None and now >= self.renew_at:
            self.stale.update(self.rows)
        if not self.stale:
            return self.index
        for ref in self.stale:
            self.index.discard(ref)
            self.live.discard(ref)
            row = self.rows.get(ref)
            if row is not None and row.live:
                self.live.add(ref, row.keyword_doc(language))
            if row is not None and row.shown(CURRENT, now):
                self.index.add(ref, row.keyword_doc(language))
        self.stale.clear()
        self.live.total()
        self.index.finish(self.rows.values())
        ahead = (
            t
            for ref in self.index.docs
            for t in (self.rows[ref].entry.valid_to, self.rows[ref].entry.expires_at)
            if t is not None
        )
        self.renew_at = min(ahead, default=None)
        return self.index

    def view(self, view: View, language: Language, now: datetime) -> Index:
        """A one-off index of the rows `view` shows at `now` (`as_of`, `include_superseded`)."""
        current = self.current(language, now)  # brings `live` up to date too
        if view.current:
            return current
        index = Index()
        for ref, row in self.rows.items():
            if row.shown(view, now):
                index.add(ref, row.keyword_doc(language))
        index.finish(self.rows.values())
        return index
