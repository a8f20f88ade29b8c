"""A memory row as the service caches it, and the conversions to and from `records`.

The cache holds each loaded user's memory rows at one table version
(`LanceDBMemoryService._version`); the executors read it and turn every write
into table rows with `to_record` (history and threads are written as rows and
read from the table, never cached).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from ...service.bm25 import KeywordDoc
from ...types import Entry, UserKey
from ._records import MEMORY, record


@dataclass(slots=True)
class Row:
    """One memory row: its entry and the columns beside it."""

    entry: Entry
    fingerprint: str
    deleted_at: datetime | None = None
    vector: np.ndarray | None = None
    """A unit vector (None: stored without one)."""
    doc: KeywordDoc | None = None
    """The keyword document of the entry's text and topics, built on first search."""
    keyed: bool = False
    """Added under a caller-chosen id: its fingerprint includes the id."""
    seq: int = 0
    """Write order within the directory: eviction takes the lowest, whatever the clock did."""

    @property
    def live(self) -> bool:
        return self.deleted_at is None

    @property
    def current(self) -> bool:
        """Live and not superseded: what holds a fingerprint (one such row per content)."""
        return self.deleted_at is None and self.entry.superseded_by is None


def to_record(user: UserKey, row: Row) -> dict[str, Any]:
    """The `records` row of a memory: its entry as JSON in `body`, and as columns what
    the table filters on (fingerprint, deletion, validity) and the vector."""
    e = row.entry
    more = {"fp": row.fingerprint, "deleted": row.deleted_at, "keyed": row.keyed}
    more |= {"valid_from": e.valid_from, "valid_to": e.valid_to, "superseded": e.superseded_by}
    return record(MEMORY, user, e.id, e.model_dump_json(), seq=row.seq, vector=row.vector, **more)


def from_table(found: pa.Table, vectors: bool) -> list[Row]:
    """The memory rows of a scan of `records` (`vectors`: the table has the column)."""
    values: Any = [None] * found.num_rows
    if vectors:
        values = found.column("vector").combine_chunks().to_numpy(zero_copy_only=False)
        found = found.drop_columns(["vector"])
    rows = []
    for r, v in zip(found.to_pylist(), values, strict=True):
        entry = Entry.model_validate_json(r["body"])
        rows.append(Row(entry, r["fp"], r["deleted"], v, keyed=bool(r["keyed"]), seq=r["seq"]))
    return rows
