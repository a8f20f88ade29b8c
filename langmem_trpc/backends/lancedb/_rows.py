"""A memory row as the service caches it (the kit's `service.rows.MemoryRow`), and the
conversions to and from `records`.

The cache holds each loaded user's memory rows at one table version
(`LanceDBMemoryService._version`); the executors read it and turn every write
into table rows with `to_record` (history and threads are written as rows and
read from the table, never cached).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ...service.rows import MemoryRow
from ...types import Entry, UserKey
from ._records import MEMORY, record


def to_record(user: UserKey, row: MemoryRow) -> dict[str, Any]:
    """The `records` row of a memory: its entry as JSON in `body`, and as columns what
    the table filters on (fingerprint, deletion, validity) and the vector."""
    e = row.entry
    more = {"fp": row.fingerprint, "deleted": row.deleted_at, "keyed": row.keyed}
    more |= {"valid_from": e.valid_from, "valid_to": e.valid_to, "superseded": e.superseded_by}
    return record(MEMORY, user, e.id, e.model_dump_json(), seq=row.seq, vector=row.vector, **more)


def from_table(found: pa.Table, vectors: bool) -> list[MemoryRow]:
    """The memory rows of a scan of `records` (`vectors`: the table has the column)."""
    values: Any = [None] * found.num_rows
    if vectors:
        values = found.column("vector").combine_chunks().to_numpy(zero_copy_only=False)
        found = found.drop_columns(["vector"])
    rows = []
    for r, v in zip(found.to_pylist(), values, strict=True):
        entry = Entry.model_validate_json(r["body"])
        rows.append(
            MemoryRow(entry, r["fp"], r["deleted"], v, keyed=bool(r["keyed"]), seq=r["seq"])
        )
    return rows
