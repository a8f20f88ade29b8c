"""Multi-row inserts of the shared write plans: binary COPY into a staging table + one INSERT ... SELECT.

The write plans decide which rows are new (`add_many` runs of content the user
has nowhere); this only makes storing many of them one round trip instead of
one statement each. Binary COPY sends vectors in pgvector's binary format
straight from numpy (no JSON or text float formatting on the client, no parsing
on the server).

Deferred indexing (`indexed=False`): the rows skip the HNSW graph (its index is
partial on `indexed`), which is most of the cost of a load; searches serve them
by an exact scan of the user's pending rows until `pending_op` batches flip them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from psycopg.types.json import Jsonb

from ...service._language import Language
from ...service._steps import NewRow
from ...types import UserKey
from . import _plans, _sql

STAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ord", "int4"),
    ("id", "text"),
    ("keyed", "bool"),
    ("created_at", "timestamptz"),
    ("updated_at", "timestamptz"),
    ("expires_at", "timestamptz"),
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
CREATE TEMP TABLE IF NOT EXISTS langmem_stage_rows (
    {", ".join(f"{name} {kind}" for name, kind in STAGE_COLUMNS)}
) ON COMMIT DELETE ROWS"""
"""Session-local staging table (created once per connection, emptied at each commit)."""

COPY_STAGE = f"COPY langmem_stage_rows ({_NAMES}) FROM STDIN (FORMAT BINARY)"

BULK_INSERT = """
WITH staged AS (DELETE FROM langmem_stage_rows RETURNING *)
INSERT INTO langmem_memories (
    app_name, user_id, id, text, fingerprint, keyed, topics, kind, event_time, participants,
    location, metadata, embedding, content_terms, topic_terms, content_len, topic_len,
    content_doc, topic_doc, indexed, created_at, updated_at, expires_at)
SELECT %(app)s, %(user)s, id, text, fp, keyed, topics, kind, event_time, participants,
    location, metadata, embedding::vector, content_terms, topic_terms, content_len, topic_len,
    content_doc, topic_doc, %(indexed)s, created_at, updated_at, expires_at
FROM staged ORDER BY ord"""
"""Empties the staging table as it reads it (a plan may insert several runs in one
transaction); `ord` keeps the rows' write order (eviction takes the oldest)."""


def insert(
    user: UserKey, rows: Sequence[NewRow], language: Language, indexed: bool
) -> _plans.Plan[None]:
    """An `Insert` step's rows, exactly as given, in two statements and one COPY."""
    staged = []
    for ord_, row in enumerate(rows):
        entry, memory = row.entry, row.entry.memory
        values: dict[str, Any] = {
            "ord": ord_, "id": entry.id, "keyed": row.keyed, "created_at": entry.created_at,
            "updated_at": entry.updated_at, "expires_at": entry.expires_at, "text": memory.text,
            "fp": row.fingerprint, "topics": memory.topics, "kind": memory.kind.value,
            "event_time": memory.event_time, "participants": memory.participants,
            "location": memory.location, "metadata": Jsonb(memory.metadata),
            "embedding": None if row.vector is None else np.asarray(row.vector, dtype=np.float32),
            **_sql.keyword_columns(memory.text, memory.topics, language),
        }  # fmt: skip
        staged.append(tuple(values[name] for name, _ in STAGE_COLUMNS))
    yield _plans.Sql(CREATE_STAGE)
    yield _plans.Copy(COPY_STAGE, [kind for _, kind in STAGE_COLUMNS], staged)
    yield _plans.Sql(BULK_INSERT, _sql.user_params(user, indexed=indexed))


def _pending_plan(user: UserKey | None, limit: int) -> _plans.Plan[int]:
    params = {"app": None, "user": None} if user is None else _sql.user_params(user)
    rows = yield _plans.Sql(_sql.PENDING_BATCH, {**params, "limit": limit})
    return len(rows)


def pending_op(user: UserKey | None, limit: int) -> _plans.Op:
    """One batch of deferred rows flipped to indexed (one transaction, so each batch's
    graph inserts commit on their own and a long run never holds many row locks)."""
    return _plans.Op(_pending_plan(user, limit), write=True)


def _count_plan(user: UserKey | None) -> _plans.Plan[int]:
    params = {"app": None, "user": None} if user is None else _sql.user_params(user)
    rows = yield _plans.Sql(_sql.PENDING_COUNT, params)
    return int(rows[0]["n"])


def pending_count_op(user: UserKey | None) -> _plans.Op:
    return _plans.Op(_count_plan(user), write=False)
