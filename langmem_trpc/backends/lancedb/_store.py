"""The LanceDB table: one `records` table of typed rows, one table version per write.

Every memory, history event, cursor, claim and dead letter is a row keyed by
`key`, its entry (event, cursor, ...) as JSON in `body`. Filters only ever
splice hex digests and fixed words, never a caller's id or text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa

from ...errors import ConfigurationError
from ...types import UserKey

TABLE = "records"
MEMORY, HISTORY, CURSOR, CLAIM, LETTER = "m", "h", "c", "t", "d"
COMPACT_EVERY = 64
"""Commits between compactions: each commit adds a fragment, and scans slow with many."""
_TYPES = {"seq": pa.int64(), "deleted": pa.timestamp("us", "UTC"), "keyed": pa.bool_()}
_NAMES = ["key", "rec", "scope", "app", "user", "refh", "body", "fp", *_TYPES]


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:32]


def scope_of(user: UserKey) -> str:
    """The user as a filter-safe digest; the length prefix keeps ('a:b','c') != ('a','b:c')."""
    return digest(f"{len(user.app_name)}:{user.app_name}{user.user_id}")


def record(rec: str, user: UserKey, ref: str, body: str, **more: Any) -> dict[str, Any]:
    """A row of `records`: `ref` (the memory, thread or letter id) is stored as its
    digest; a history event is keyed by its `seq` (a memory has many)."""
    scope, refh = scope_of(user), digest(ref)
    key = f"{rec}:{scope}:" + (f"{more['seq']:020d}" if rec == HISTORY else refh)
    row = {"key": key, "rec": rec, "scope": scope, "app": user.app_name, "user": user.user_id}
    return row | {"refh": refh, "body": body, **more}


class Store:
    """The `records` table of one directory (created when missing), `dim` wide vectors."""

    def __init__(self, path: str | Path, dim: int | None) -> None:
        cols = [pa.field(n, _TYPES.get(n, pa.string())) for n in _NAMES]
        if dim is not None:
            cols.append(pa.field("vector", pa.list_(pa.float32(), dim)))
        db = lancedb.connect(str(path))
        try:  # an existing table keeps its schema (with vectors, opened keyword-only)
            self.table = db.open_table(TABLE)
        except ValueError:
            self.table = db.create_table(TABLE, schema=pa.schema(cols), exist_ok=True)
        self.schema = self.table.schema
        self.has_vectors = "vector" in self.schema.names
        stored = self.schema.field("vector").type.list_size if self.has_vectors else None
        if dim is not None and stored != dim:
            raise ConfigurationError(
                f"embeddings: the store at {path} holds {stored or 'no'} vector dimensions, "
                f"the embedder makes {dim}"
            )
        self._commits = 0

    def scan(self, where: str, columns: Sequence[str] | None = None) -> pa.Table:
        names = [n for n in self.schema.names if n != "key"] if columns is None else columns
        return self.table.search().where(where).limit(None).select(list(names)).to_arrow()

    def write(self, rows: list[dict[str, Any]], *, fresh: bool, drop: str | None = None) -> None:
        """Write `rows` in one table version: appended when all are `fresh` (new keys),
        else upserted by key; `drop` also deletes the rows it matches that `rows` lack."""
        if not rows and drop is None:
            return
        data = pa.Table.from_pylist(rows, self.schema)
        if fresh and drop is None:
            self.table.add(data, on_bad_vectors="null")
        else:
            merge = self.table.merge_insert("key").when_matched_update_all()
            merge = merge.when_not_matched_insert_all()
            if drop is not None:
                merge = merge.when_not_matched_by_source_delete(drop)
            merge.execute(data, on_bad_vectors="null")
        self._commits += 1
        if self._commits % COMPACT_EVERY == 0:
            self.table.optimize()
