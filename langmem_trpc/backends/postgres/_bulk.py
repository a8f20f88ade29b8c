"""Multi-row inserts of the shared write plans: binary COPY into a staging table + one INSERT ... SELECT.

The write plans decide which rows are new (`add_many` runs of content the user
has nowhere); this only makes storing many of them, and their "add" history
events, one COPY and one statement instead of a statement each. Binary COPY sends vectors in pgvector's binary format
straight from numpy (no JSON or text float formatting on the client, no parsing
on the server).

Deferred indexing (`indexed=False`): the rows skip the HNSW graph (its index is
partial on `indexed`), which is most of the cost of a load; searches serve them
by an exact scan of the user's pending rows until `pending_op` batches flip them.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
from pgvector import Vector
from psycopg.types.json import Jsonb

from ...service.documents import keys_of
from ...service.language import Language
from ...service.steps import Insert, NewRow, RecordHistory, Step
from ...types import Operation, UserKey
from . import _sql
from ._ops import Copy, Op, Plan, Sql

STAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ord", "int4"),
    ("id", "text"),
    ("keyed", "bool"),
    ("created_at", "timestamptz"),
    ("updated_at", "timestamptz"),
    ("expires_at", "timestamptz"),
    ("valid_from", "timestamptz"),
    ("valid_to", "timestamptz"),
    ("superseded_by", "text"),
    ("text", "text"),
    ("fp", "text"),
    ("topics", "text[]"),
    ("kind", "text"),
    ("event_time", "timestamptz"),
    ("participants", "text[]"),
    ("location", "text"),
    ("metadata", "jsonb"),
    ("embedding", "vector"),
    ("content_terms", "text"),
    ("topic_terms", "text"),
    ("content_len", "int4"),
    ("topic_len", "int4"),
    ("content_doc", "text"),
    ("topic_doc", "text"),
)
_NAMES = ", ".join(name for name, _ in STAGE_COLUMNS)

CREATE_STAGE = f"""
CREATE TEMP TABLE IF NOT EXISTS langmem_stage_rows (
    {", ".join(f"{name} {kind}" for name, kind in STAGE_COLUMNS)}
) ON COMMIT DELETE ROWS"""
"""Session-local staging table (created once per connection, emptied at each commit)."""

COPY_STAGE = f"COPY langmem_stage_rows ({_NAMES}) FROM STDIN (FORMAT BINARY)"

_STAGED = "WITH staged AS (DELETE FROM langmem_stage_rows RETURNING *)"
_INSERT_ROWS = """
INSERT INTO langmem_memories (
    app_name, user_id, id, text, fingerprint, keyed, topics, kind, event_time, participants,
    location, metadata, embedding, content_terms, topic_terms, content_len, topic_len,
    content_doc, topic_doc, indexed, created_at, updated_at, expires_at, valid_from, valid_to,
    superseded_by)
SELECT %(app)s, %(user)s, id, text, fp, keyed, topics, kind, event_time, participants,
    location, COALESCE(metadata, '{}'), embedding::vector, string_to_array(content_terms, ' '),
    string_to_array(topic_terms, ' '), content_len, topic_len, content_doc, topic_doc,
    %(indexed)s, created_at, updated_at, expires_at, valid_from, valid_to, superseded_by
FROM staged ORDER BY ord"""

BULK_INSERT = _STAGED + _INSERT_ROWS
"""Empties the staging table as it reads it (a plan may insert several runs in one
transaction); `ord` keeps the rows' write order (eviction takes the oldest). Terms
travel space-joined (tokens never hold a space) and empty metadata as NULL: psycopg
adapts arrays and JSON in Python, a tenth of a load's client time."""

BULK_INSERT_ADDED = f"""{_STAGED}, ins AS ({_INSERT_ROWS})
INSERT INTO langmem_history (app_name, user_id, memory_id, operation, text_before, text_after, at, source)
SELECT %(app)s, %(user)s, id, %(op)s, NULL, text, created_at, %(source)s FROM staged ORDER BY ord"""
"""`BULK_INSERT` plus the rows' "add" history events, in one statement (as ccef5b3's load
did): no statement of their own, with six 1,000-element arrays adapted per batch."""


class _Binary(Vector):
    """A vector already in pgvector's binary form (its COPY dumper sends `to_binary()`)."""

    def __init__(self, binary: bytes) -> None:
        self._binary = binary

    def to_binary(self) -> bytes:
        return self._binary


def _vectors(rows: Sequence[NewRow]) -> list[Vector | None]:
    """The rows' vectors for COPY; all of one dimension: converted in one numpy call
    (pgvector's dumper converts each row in Python, 2 us of a row's ~70)."""
    given = [cast("Sequence[float] | None", row.vector) for row in rows]
    present = [v for v in given if v is not None]
    if len(present) != len(given) or len({len(v) for v in present}) != 1:
        return [None if v is None else Vector(np.asarray(v, dtype=np.float32)) for v in given]
    packed = np.asarray(given, dtype=">f4")
    head = struct.pack(">HH", packed.shape[1], 0)
    return [_Binary(head + v.tobytes()) for v in packed]


def stage(rows: Sequence[NewRow], language: Language) -> Plan[None]:
    """Copy an `Insert` step's rows, exactly as given, into the staging table."""
    staged = [
        _staged(ord_, row, vector, language)
        for ord_, (row, vector) in enumerate(zip(rows, _vectors(rows), strict=True))
    ]
    yield Sql(CREATE_STAGE)
    yield Copy(COPY_STAGE, [kind for _, kind in STAGE_COLUMNS], staged)


def _staged(ord_: int, row: NewRow, vector: Vector | None, language: Language) -> tuple[Any, ...]:
    """One row's values, in `STAGE_COLUMNS` order."""
    entry, memory = row.entry, row.entry.memory
    doc = _sql.keyword_columns(memory.text, keys_of(memory), language)
    metadata = Jsonb(memory.metadata) if memory.metadata else None
    return (
        ord_,
        entry.id,
        row.keyed,
        entry.created_at,
        entry.updated_at,
        entry.expires_at,
        entry.valid_from,
        entry.valid_to,
        entry.superseded_by,
        memory.text,
        row.fingerprint,
        memory.topics,
        memory.kind.value,
        memory.event_time,
        memory.participants,
        memory.location,
        metadata,
        vector,
        " ".join(doc["content_terms"]),
        " ".join(doc["topic_terms"]),
        doc["content_len"],
        doc["topic_len"],
        doc["content_doc"],
        doc["topic_doc"],
    )


def added(insert: Insert, step: Step) -> RecordHistory | None:
    """`step` when it records exactly the "add" events of `insert`'s rows (one each, in
    order, stamped with the row's creation, one source): `insert_sql` writes them."""
    if not isinstance(step, RecordHistory) or len(step.events) != len(insert.rows):
        return None
    source = step.events[0].source
    same = all(
        e.operation is Operation.ADD
        and e.memory_id == r.entry.id
        and e.text_before is None
        and e.text_after == r.entry.text
        and e.at == r.entry.created_at
        and e.source == source
        for e, r in zip(step.events, insert.rows, strict=True)
    )
    return step if same else None


def insert_sql(insert: Insert, indexed: bool, history: RecordHistory | None) -> Sql:
    """The staged rows' INSERT, with `history` (from `added`) written by the same statement."""
    params = _sql.user_params(insert.user, indexed=indexed)
    if history is None:
        return Sql(BULK_INSERT, params)
    source = _sql.source_json(history.events[0].source)
    return Sql(BULK_INSERT_ADDED, {**params, "op": Operation.ADD.value, "source": source})


def _pending_plan(sql: str, user: UserKey | None, **extra: int) -> Plan[list[_sql.Row]]:
    params = {"app": None, "user": None} if user is None else _sql.user_params(user)
    rows: list[_sql.Row] = yield Sql(sql, {**params, **extra})
    return rows


def pending_op(user: UserKey | None, limit: int) -> Op:
    """One batch of deferred rows flipped to indexed (one transaction, so each batch's
    graph inserts commit on their own and a long run never holds many row locks);
    the plan returns the rows flipped."""
    return Op(_pending_plan(_sql.PENDING_BATCH, user, limit=limit), write=True)


def pending_count_op(user: UserKey | None) -> Op:
    """The plan returns one row: `n`, the live rows not yet indexed."""
    return Op(_pending_plan(_sql.PENDING_COUNT, user), write=False)
