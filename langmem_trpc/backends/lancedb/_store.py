"""The LanceDB storage layer: one table of typed records, one commit per operation.

Every record (memory, history event, cursor, claim, dead letter) is a row of
`records`, keyed by `key`. An operation commits its changed records in one
table version (an append, or a `merge_insert` when it rewrites or drops rows),
so an add with its eviction and history lands whole or not at all. Filters
only ever splice hex digests and fixed words, never a caller's id or text.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa

from ...errors import ConfigurationError
from ...types import Entry, UserKey

TABLE = "records"
MEMORY, HISTORY, CURSOR, CLAIM, LETTER = "m", "h", "c", "t", "d"
COMPACT_EVERY = 64
"""Commits between compactions: each commit adds a fragment, and scans slow with many."""


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:32]


def scope_of(user: UserKey) -> str:
    """The user as a filter-safe digest; the length prefix keeps ('a:b','c') != ('a','b:c')."""
    return digest(f"{len(user.app_name)}:{user.app_name}{user.user_id}")


def key_of(rec: str, user: UserKey, ref: str) -> str:
    return f"{rec}:{scope_of(user)}:{digest(ref)}"


def where(user: UserKey, rec: str = MEMORY, live: bool = True) -> str:
    return f"rec = '{rec}' AND scope = '{scope_of(user)}'" + (" AND live" if live else "")


@dataclass(frozen=True)
class Record:
    """One row; `body` is the JSON of the entry, event, cursor, claim or letter."""

    key: str
    rec: str
    scope: str
    app: str
    user: str
    ref: str
    body: str
    seq: int = 0
    fp: str | None = None
    live: bool = True
    keyed: bool = False
    vector: Any = None
    """A memory's unit vector (numpy float32), None without an embedder."""
    parsed: Entry | None = field(default=None, compare=False, repr=False)
    """The memory's entry, when it was at hand (not a column)."""

    @classmethod
    def of(cls, rec: str, user: UserKey, ref: str, body: str, **more: Any) -> Record:
        key = more.pop("key", None) or key_of(rec, user, ref)
        return cls(key, rec, scope_of(user), user.app_name, user.user_id, ref, body, **more)

    @classmethod
    def memory(cls, entry: Entry, fp: str, keyed: bool, vector: Any, seq: int) -> Record:
        """The memory record of `entry` (search scores dropped)."""
        entry = entry.model_copy(update={"score": None, "rrf_score": None})
        body = entry.model_dump_json()
        return cls.of(MEMORY, entry.user, entry.id, body, seq=seq, fp=fp, keyed=keyed,
                      vector=vector, parsed=entry)  # fmt: skip

    @property
    def entry(self) -> Entry:
        return self.parsed or Entry.model_validate_json(self.body)


_NAMES = [f.name for f in fields(Record) if f.name != "parsed"]


class Store:
    """The `records` table of one directory, with this instance's write order and lock.

    A write holds `lock` from its first locked read to its commit, so its
    read-modify-write is atomic within the process, not across processes.
    """

    def __init__(self, path: str | Path, dim: int | None) -> None:
        self.db = lancedb.connect(str(path))
        self.lock = threading.RLock()
        types: dict[str, pa.DataType] = {"seq": pa.int64(), "live": pa.bool_()}
        types["keyed"] = pa.bool_()
        cols = [pa.field(n, types.get(n, pa.string())) for n in [*_NAMES[:-1], "refh"]]
        if dim is not None:
            cols.append(pa.field("vector", pa.list_(pa.float32(), dim)))
        try:  # an existing table keeps its schema (with vectors, opened keyword-only)
            self.table = self.db.open_table(TABLE)
        except ValueError:
            self.table = self.db.create_table(TABLE, schema=pa.schema(cols), exist_ok=True)
        self.schema = self.table.schema
        self.has_vectors = "vector" in self.schema.names
        stored = self.schema.field("vector").type.list_size if self.has_vectors else None
        if dim is not None and stored != dim:
            raise ConfigurationError(
                f"embeddings: the store at {path} holds {stored or 'no'} vector dimensions, "
                f"the embedder makes {dim}"
            )
        top = max((r["seq"] for r in self.rows("true", ["seq"])), default=0)
        self._seq, self._commits = itertools.count(top + 1), 0

    def next_seq(self) -> int:
        return next(self._seq)

    def _arrow(self, where: str, columns: Sequence[str]) -> pa.Table:
        return self.table.search().where(where).limit(None).select(list(columns)).to_arrow()

    def rows(self, where: str, columns: Sequence[str]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._arrow(where, columns).to_pylist()
        return found

    def records(self, where: str) -> list[Record]:
        """The rows `where` matches, vectors as numpy rows (None where not stored)."""
        names = [n for n in _NAMES if n in self.schema.names]
        found = self._arrow(where, names)
        vectors: Any = [None] * found.num_rows
        if self.has_vectors:
            vectors = found.column("vector").combine_chunks().to_numpy(zero_copy_only=False)
            found = found.drop_columns(["vector"])
        return [Record(**row, vector=v) for row, v in zip(found.to_pylist(), vectors, strict=True)]

    def one(self, key: str) -> Record | None:
        found = self.records(f"key = '{key}'")
        return found[0] if found else None

    def commit(
        self, records: Iterable[Record], *, fresh: bool = False, drop: str | None = None
    ) -> None:
        """Write `records` in one table version: appended when all their keys are `fresh`,
        else upserted; `drop` also deletes the unmentioned rows it matches."""
        rows = [{**{n: getattr(r, n) for n in _NAMES}, "refh": digest(r.ref)} for r in records]
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
