"""A memory row held in process: the row type of the backend kit for a backend that
keeps its rows (or a cache of them) in Python objects, as the in-memory backend
and LanceDB's cache do. SQL backends keep rows in tables and need none of this.

The rules a find step or a search applies to such a row live here once: which rows
count as live and current, which a view shows, the keyword document a search builds
for it, and the `steps.Stored` a find step returns for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

from ..types import Entry
from .bm25 import KeywordDoc
from .documents import keys_of
from .language import Language
from .rules import is_expired
from .steps import Stored
from .validity import View

__all__ = ["MemoryRow"]


@dataclass(slots=True)
class MemoryRow:
    """One memory row: its entry and the columns beside it."""

    entry: Entry
    fingerprint: str
    deleted_at: datetime | None = None
    vector: np.ndarray | None = None
    """A unit vector (None: stored without one)."""
    doc: KeywordDoc | None = None
    """The keyword document of the entry's text and topics, built on first search
    (`keyword_doc`); a write that changes either sets it back to None."""
    keyed: bool = False
    """Added under a caller-chosen id: its fingerprint includes the id."""
    seq: int = 0
    """Write order within the store: eviction takes the lowest, whatever the clock did."""

    @property
    def live(self) -> bool:
        return self.deleted_at is None

    @property
    def current(self) -> bool:
        """Live and not superseded: what holds a fingerprint (one such row per content)."""
        return self.deleted_at is None and self.entry.superseded_by is None

    def shown(self, view: View, now: datetime) -> bool:
        """Live, unexpired at `now` and visible in `view`: what a read returns."""
        return self.live and not is_expired(self.entry, now) and view.visible(self.entry, now)

    def keyword_doc(self, language: Language) -> KeywordDoc:
        """The row's keyword document, built once per text and topics."""
        if self.doc is None:
            self.doc = KeywordDoc.build(self.entry.text, keys_of(self.entry.memory), language)
        return self.doc

    def stored(self) -> Stored:
        """The row as a find step returns it, with itself as the executor's handle."""
        return Stored(entry=self.entry, keyed=self.keyed, deleted=not self.live, handle=self)
