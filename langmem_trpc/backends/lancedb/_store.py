"""The LanceDB storage layer: one table, typed records, one commit per operation.

Every record (memory, history event, cursor, claim, dead letter) is a row of
the table `records`, keyed by `key`. A write operation collects its changed
records and commits them with one `merge_insert` (LanceDB's atomic unit is a
table version), so an add with its eviction and history, or a `save_progress`
with its cursor, claim and dead letters, lands whole or not at all.

Filters are SQL strings. Only hex digests and fixed words are ever spliced in
(`scope`, `refh`, `key`), never a caller's id or text, so no id can change a
filter's meaning.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa

from ...errors import ConfigurationError
from ...types import Entry, UserKey

TABLE = "records"
MEMORY, HISTORY, CURSOR, CLAIM, LETTER = "m", "h", "c", "t", "d"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:32]


def scope_of(user: UserKey) -> str:
    """A filter-safe digest of the user; the length prefix keeps ('a:b', 'c') != ('a', 'b:c')."""
    return digest(f"{len(user.app_name)}:{user.app_name}{user.user_id}")


def micros(at: datetime | None) -> int | None:
    return None if at is None else (at - _EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True)
class Record:
    """One row of `records`; `body` is the JSON of the entry, event, cursor, claim or letter."""

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
    kind: str | None = None
    event_us: int | None = None
    vector: list[float] | None = None

    @property
    def entry(self) -> Entry:
        return Entry.model_validate_json(self.body)


def key_of(rec: str, user: UserKey, ref: str) -> str:
    return f"{rec}:{scope_of(user)}:{digest(ref)}"


def memory_record(
    entry: Entry, fp: str, *, keyed: bool, vector: Sequence[float] | None, seq: int = 0
) -> Record:
    """The `memory` record of `entry` (search scores dropped)."""
    entry = entry.model_copy(update={"score": None, "rrf_score": None})
    user = entry.user
    return Record(
        key=key_of(MEMORY, user, entry.id),
        rec=MEMORY,
        scope=scope_of(user),
        app=user.app_name,
        user=user.user_id,
        ref=entry.id,
        body=entry.model_dump_json(),
        seq=seq,
        fp=fp,
        keyed=keyed,
        kind=entry.memory.kind.value,
        event_us=micros(entry.memory.event_time),
        vector=None if vector is None else [float(x) for x in vector],
    )


def with_entry(record: Record, entry: Entry, **changes: Any) -> Record:
    """`record` holding `entry` (its kind and event time follow)."""
    entry = entry.model_copy(update={"score": None, "rrf_score": None})
    event_us = micros(entry.memory.event_time)
    kind = entry.memory.kind.value
    return replace(record, body=entry.model_dump_json(), kind=kind, event_us=event_us, **changes)


class Store:
    """The `records` table of one directory, with this instance's write order and lock.

    Writes hold `lock` from their first read to their commit, so the rules'
    read-modify-write is atomic within the process. Another process writing
    the same directory is not excluded (see the backend's capabilities).
    """

    def __init__(self, path: str | Path, dim: int | None) -> None:
        self.db = lancedb.connect(str(path))
        self.lock = threading.RLock()
        fields = [
            pa.field("key", pa.string(), nullable=False),
            pa.field("rec", pa.string(), nullable=False),
            pa.field("scope", pa.string(), nullable=False),
            pa.field("app", pa.string(), nullable=False),
            pa.field("user", pa.string(), nullable=False),
            pa.field("ref", pa.string(), nullable=False),
            pa.field("refh", pa.string(), nullable=False),
            pa.field("body", pa.string(), nullable=False),
            pa.field("seq", pa.int64(), nullable=False),
            pa.field("fp", pa.string()),
            pa.field("live", pa.bool_(), nullable=False),
            pa.field("keyed", pa.bool_(), nullable=False),
            pa.field("kind", pa.string()),
            pa.field("event_us", pa.int64()),
        ]
        if dim is not None:
            fields.append(pa.field("vector", pa.list_(pa.float32(), dim)))
        self.schema = pa.schema(fields)
        self.table = self.db.create_table(TABLE, schema=self.schema, exist_ok=True)
        self.has_vectors = "vector" in self.table.schema.names
        stored = self.table.schema.field("vector").type.list_size if self.has_vectors else None
        if dim is not None and stored != dim:
            raise ConfigurationError(
                f"embeddings: the store at {path} holds {stored or 'no'} vector dimensions, "
                f"the embedder makes {dim}"
            )
        top = self.rows("true", columns=["seq"])
        self._seq = itertools.count(max((r["seq"] for r in top), default=0) + 1)
        self._commits = 0

    def next_seq(self) -> int:
        return next(self._seq)

    # -- reads --------------------------------------------------------------

    def rows(self, where: str, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        query = self.table.search().where(where).limit(None)
        cols = list(columns) if columns is not None else self._columns()
        table: pa.Table = query.select(cols).to_arrow()
        return table.to_pylist()  # type: ignore[no-any-return]

    def records(self, where: str) -> list[Record]:
        return [self._record(row) for row in self.rows(where)]

    def one(self, key: str) -> Record | None:
        found = self.records(f"key = '{key}'")
        return found[0] if found else None

    def count(self, where: str) -> int:
        return int(self.table.count_rows(where))

    def nearest(self, vector: np.ndarray, where: str, limit: int) -> list[tuple[Record, float]]:
        """The `limit` memories nearest `vector` by dot product (exact: a flat prefiltered scan)."""
        query: Any = self.table.search(vector.tolist(), vector_column_name="vector")
        query = query.distance_type("dot").where(where, prefilter=True).limit(limit)
        hits = query.select(self._columns()).to_arrow().to_pylist()
        scores = [max(0.0, 1.0 - float(h.pop("_distance"))) for h in hits]
        return [(self._record(h), score) for h, score in zip(hits, scores, strict=True)]

    def _columns(self) -> list[str]:
        return [n for n in self.table.schema.names if n != "refh"]

    def _record(self, row: dict[str, Any]) -> Record:
        return Record(**{k: v for k, v in row.items() if k in Record.__dataclass_fields__})

    # -- writes -------------------------------------------------------------

    def commit(self, records: Iterable[Record], *, drop: str | None = None) -> None:
        """Upsert `records` in one table version; `drop` also deletes the unmentioned
        rows it matches, in the same version."""
        rows = [self._row(r) for r in records]
        if not rows and drop is None:
            return
        merge = self.table.merge_insert("key").when_matched_update_all()
        merge = merge.when_not_matched_insert_all()
        if drop is not None:
            merge = merge.when_not_matched_by_source_delete(drop)
        merge.execute(pa.Table.from_pylist(rows, self.schema), on_bad_vectors="null")
        self._compact()

    def delete(self, where: str) -> int:
        result = self.table.delete(where)
        self._compact()
        return int(getattr(result, "num_deleted_rows", 0))

    def _row(self, record: Record) -> dict[str, Any]:
        row = {k: getattr(record, k) for k in Record.__dataclass_fields__}
        row["refh"] = digest(record.ref)
        if not self.has_vectors:
            row.pop("vector")
        return row

    def _compact(self) -> None:
        """Every version adds a fragment; merge them now and then so scans stay fast."""
        self._commits += 1
        if self._commits % 256 == 0:
            self.table.optimize()
