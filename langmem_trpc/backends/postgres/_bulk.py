"""Bulk load: many memories of one user, binary COPY into a staging table + one INSERT ... SELECT.

Binary COPY sends vectors in pgvector's binary format straight from numpy
(no JSON or text float formatting on the client, no parsing on the server). The INSERT is idempotent through the
live-fingerprint unique index (`ON CONFLICT DO NOTHING`) and writes one
history event per new row. Soft-deleted content is not revived here; `add` does that.

Deferred indexing (`indexed=False`): the rows skip the HNSW graph (its index is
partial on `indexed`), which is most of the cost of a load; searches serve them
by an exact scan of the user's pending rows until `pending_op` batches flip them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from psycopg.types.json import Jsonb

from ...errors import CapacityExceededError, InvalidMemoryError
from ...service._core import (
    Limits,
    check_user,
    embedding_text,
    fingerprint,
    memory_from,
    new_memory_ids,
    utcnow,
)
from ...service._language import Language
from ...types import Memory, Operation, Source, UserKey
from . import _sql
from ._plans import Copy, Op, Plan, Sql

STAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "text"),
    ("text", "text"),
    ("fp", "text"),
    ("topics", "text[]"),
    ("kind", "text"),
    ("event_time", "timestamptz"),
    ("participants", "text[]"),
    ("location", "text"),
    ("metadata", "jsonb"),
    ("embedding", "vector"),
    ("content_terms", "text[]"),
    ("topic_terms", "text[]"),
    ("content_len", "int4"),
    ("topic_len", "int4"),
    ("content_doc", "text"),
    ("topic_doc", "text"),
)
_NAMES = ", ".join(name for name, _ in STAGE_COLUMNS)

CREATE_STAGE = f"""
CREATE TEMP TABLE IF NOT EXISTS langmem_stage (
    {", ".join(f"{name} {kind}" for name, kind in STAGE_COLUMNS)}
) ON COMMIT DELETE ROWS"""
"""Session-local staging table (created once per connection, emptied at each commit)."""

COPY_STAGE = f"COPY langmem_stage ({_NAMES}) FROM STDIN (FORMAT BINARY)"

BULK_INSERT = """
WITH ins AS (
    INSERT INTO langmem_memories (
        app_name, user_id, id, text, fingerprint, keyed, topics, kind, event_time, participants,
        location, metadata, embedding, content_terms, topic_terms, content_len, topic_len,
        content_doc, topic_doc, indexed, created_at, updated_at)
    SELECT %(app)s, %(user)s, id, text, fp, false, topics, kind, event_time, participants,
        location, metadata, embedding::vector, content_terms, topic_terms, content_len, topic_len,
        content_doc, topic_doc, %(indexed)s, %(now)s, %(now)s
    FROM langmem_stage
    ON CONFLICT (app_name, user_id, fingerprint) WHERE deleted_at IS NULL DO NOTHING
    RETURNING id, text)
INSERT INTO langmem_history (app_name, user_id, memory_id, operation, text_before, text_after, at, source)
SELECT %(app)s, %(user)s, id, %(op)s, NULL, text, %(now)s, %(source)s FROM ins
RETURNING 1"""


@dataclass(frozen=True)
class Batch:
    user: UserKey
    rows: list[dict[str, Any]]

    @property
    def texts(self) -> list[str]:
        """What the vector leg embeds for each row (`embedding_text`)."""
        return [embedding_text(r["text"], r["participants"]) for r in self.rows]

    def with_vectors(self, vectors: Sequence[Sequence[float]]) -> Batch:
        if len(vectors) != len(self.rows):
            raise InvalidMemoryError(
                "vectors", f"has {len(vectors)} items for {len(self.rows)} memories"
            )
        return replace(
            self,
            rows=[
                {**r, "embedding": np.asarray(v, dtype=np.float32)}
                for r, v in zip(self.rows, vectors, strict=True)
            ],
        )


def prepare(
    user: UserKey,
    memories: Sequence[str | Memory],
    vectors: Sequence[Sequence[float]] | None,
    embed: bool,
    limits: Limits,
    language: Language,
) -> Batch:
    """Validate everything up front, so a bad item rejects the whole batch before any write."""
    user = check_user(user)
    rows = []
    ids = new_memory_ids(len(memories))
    for item, memory_id in zip(memories, ids, strict=True):
        memory = memory_from(item, limits=limits)
        rows.append(
            {
                "id": memory_id,
                "text": memory.text,
                "fp": fingerprint(memory),
                "topics": memory.topics,
                "kind": memory.kind.value,
                "event_time": memory.event_time,
                "participants": memory.participants,
                "location": memory.location,
                "metadata": Jsonb(memory.metadata),
                "embedding": None,
                **_sql.keyword_columns(memory.text, memory.topics, language),
            }
        )
    batch = Batch(user, rows)
    if vectors is not None:
        if not embed:
            raise InvalidMemoryError(
                "vectors", "given, but the service has no embedder (keyword-only)"
            )
        batch = batch.with_vectors(vectors)
    return batch


def _plan(batch: Batch, source: Source | None, limits: Limits, indexed: bool) -> Plan[int]:
    user = batch.user
    if not batch.rows:
        return 0
    yield Sql(_sql.USER_LOCK, _sql.user_params(user))
    if limits.capacity is not None:
        rows = yield Sql(_sql.LIVE_COUNT, _sql.user_params(user))
        live = int(rows[0]["live_count"]) if rows else 0
        if live + len(batch.rows) > limits.capacity:
            raise CapacityExceededError(limits.capacity)
    yield Sql(CREATE_STAGE)
    yield Copy(
        COPY_STAGE,
        [kind for _, kind in STAGE_COLUMNS],
        [tuple(row[name] for name, _ in STAGE_COLUMNS) for row in batch.rows],
    )
    inserted = yield Sql(
        BULK_INSERT,
        _sql.user_params(
            user,
            now=utcnow(),
            op=Operation.ADD.value,
            source=_sql.source_json(source),
            indexed=indexed,
        ),
    )
    return len(inserted)


def op(batch: Batch, source: Source | None, limits: Limits, *, indexed: bool = True) -> Op:
    """`indexed=False` defers the HNSW insert of the new rows (see `pending_op`)."""
    return Op(_plan(batch, source, limits, indexed), write=True)


def _pending_plan(user: UserKey | None, limit: int) -> Plan[int]:
    params = {"app": None, "user": None} if user is None else _sql.user_params(user)
    rows = yield Sql(_sql.PENDING_BATCH, {**params, "limit": limit})
    return len(rows)


def pending_op(user: UserKey | None, limit: int) -> Op:
    """One batch of deferred rows flipped to indexed (one transaction, so each batch's
    graph inserts commit on their own and a long run never holds many row locks)."""
    return Op(_pending_plan(user, limit), write=True)


def _count_plan(user: UserKey | None) -> Plan[int]:
    params = {"app": None, "user": None} if user is None else _sql.user_params(user)
    rows = yield Sql(_sql.PENDING_COUNT, params)
    return int(rows[0]["n"])


def pending_count_op(user: UserKey | None) -> Op:
    return Op(_count_plan(user), write=False)
