"""Online re-embedding of a PostgreSQL database (`service/reembed.py`).

The new vectors go to a shadow column, `langmem_memories.embedding_next`
(`vector(new dims)`), with `embedding_next_of`, the text each was embedded
from; both are added when the re-embed starts (a nullable column without a
default: no table rewrite) and the shadow rows present are the progress, so a
killed run resumes. A batch is one transaction: its vectors in pgvector's binary
form by COPY into a session staging table, then one UPDATE. The shadow column has
no index while it fills; each updated row still costs an insert into the served
HNSW index (a row version that does not fit its page), the fill's main cost.
Searches keep using `embedding` and its HNSW index. Once every memory has a
shadow vector, the shadow's HNSW index is built once with `CREATE INDEX
CONCURRENTLY` (writes go on; `maintenance_work_mem` raised to hold its graph),
then one transaction cuts over:

1. it takes the `embedder_generation` settings row `FOR UPDATE`: every write of
   a service with an embedder holds it `FOR SHARE` in its own transaction
   (`_identity.write_checked`), so the cutover waits for the writes in flight
   and every later one sees the new generation and refuses;
2. `LOCK TABLE ... SHARE ROW EXCLUSIVE` (reads go on, writes wait), embeds the
   few memories written or edited since their shadow vector was made (more
   than a batch: it rolls back, catches up outside, and tries again);
3. swaps the columns and indexes, recreates `langmem_ann_candidates` for the
   new dimension, and records the new identity with its generation + 1.

Searches read the generation before and after their statements
(`_identity.read_checked`): equal readings mean the statements ran before the
cutover or after it, never across it.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ...errors import ConfigurationError
from ...service.identity import EmbedderIdentity, identify
from ...service.model_lock import ModelLock
from ...service.reembed import (
    ProgressCallback,
    ReembedPlan,
    ReembedProgress,
    ReembedReport,
    estimate_tokens,
)
from ...service.rules import embedding_text
from ...types import UserKey
from . import _identity, _sql
from ._bulk import _Binary
from ._ops import Copy, Op, Plan, Sql

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

TARGET_KEY = "reembed_target"
NEXT_INDEX = "langmem_memories_embedding_next_hnsw"
SERVED_INDEX = "langmem_memories_embedding_hnsw_ready"
SELECT_TARGET = f"SELECT value FROM langmem_settings WHERE key = '{TARGET_KEY}'"
UPSERT_TARGET = f"""INSERT INTO langmem_settings (key, value) VALUES ('{TARGET_KEY}', %(value)s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value"""
DROP_SHADOW = f"""DROP INDEX IF EXISTS {NEXT_INDEX};
ALTER TABLE langmem_memories DROP COLUMN IF EXISTS embedding_next,
    DROP COLUMN IF EXISTS embedding_next_of"""
_USERS = """ AND (m.app_name, m.user_id) IN
    (SELECT * FROM unnest(%(apps)s::text[], %(uids)s::text[]))"""
_STALE = """SELECT m.app_name, m.user_id, m.id, m.text FROM langmem_memories m
WHERE (m.embedding_next IS NULL OR m.embedding_next_of IS DISTINCT FROM m.text)
  AND (m.app_name, m.user_id, m.id) > (%(a)s, %(u)s, %(i)s){users}
ORDER BY m.app_name, m.user_id, m.id LIMIT %(limit)s"""
_COUNT = """SELECT count(*) AS total,
    count(*) FILTER (WHERE m.embedding_next_of IS NOT DISTINCT FROM m.text
                     AND m.embedding_next IS NOT NULL) AS done
FROM langmem_memories m WHERE true{users}"""
CREATE_STAGE = """CREATE TEMP TABLE IF NOT EXISTS langmem_reembed_stage
    (a text, u text, i text, t text, e vector) ON COMMIT DELETE ROWS"""
"""Session-local staging table for one batch of shadow vectors (emptied at each commit)."""
COPY_STAGE = "COPY langmem_reembed_stage (a, u, i, t, e) FROM STDIN (FORMAT BINARY)"
STAGE_TYPES = ("text", "text", "text", "text", "vector")
UPDATE_SHADOW = """UPDATE langmem_memories m SET embedding_next = d.e, embedding_next_of = d.t
FROM langmem_reembed_stage d
WHERE m.app_name = d.a AND m.user_id = d.u AND m.id = d.i AND m.text = d.t"""
SHADOW_READY = """SELECT count(*) AS n FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
WHERE c.relname = %(name)s AND x.indisvalid"""
SELECT_TEXTS = "SELECT m.text FROM langmem_memories m WHERE true{users}"
RAISE_BUILD_MEMORY = """SELECT set_config('maintenance_work_mem',
    GREATEST(setting::bigint, %(kb)s)::text || 'kB', false)
FROM pg_settings WHERE name = 'maintenance_work_mem'"""
BUILD_MEMORY_CAP_KB = 1024 * 1024
LOCK_GENERATION = "SELECT value FROM langmem_settings WHERE key = 'embedder_generation' FOR UPDATE"
LOCK_WRITES = "LOCK TABLE langmem_memories IN SHARE ROW EXCLUSIVE MODE"

CATCH_UP_ROUNDS = 20


def _users(users: Sequence[UserKey] | None) -> tuple[str, dict[str, Any]]:
    if not users:
        return "", {}
    return _USERS, {"apps": [u.app_name for u in users], "uids": [u.user_id for u in users]}


def _binary(vectors: Sequence[Sequence[float]]) -> list[_Binary]:
    """pgvector's binary form of each vector, packed in one numpy call: formatting
    768 floats as a text literal cost more than the whole UPDATE."""
    packed = np.asarray(vectors, dtype=">f4")
    head = struct.pack(">HH", packed.shape[1], 0)
    return [_Binary(head + v.tobytes()) for v in packed]


def _build_memory_kb(rows: int, dims: int) -> int:
    """`maintenance_work_mem` for the shadow's HNSW build: its graph (halfvec, m = 16:
    about 2 x dims + 400 bytes a row), capped at 1 GB; a build whose graph outgrows it
    goes on several times slower (pgvector's notice "hnsw graph no longer fits")."""
    return min(BUILD_MEMORY_CAP_KB, rows * (2 * dims + 400) // 1024 + 16 * 1024)


def _build_index(dims: int) -> str:
    return f"""CREATE INDEX CONCURRENTLY {NEXT_INDEX} ON langmem_memories
    USING hnsw ((embedding_next::halfvec({int(dims)})) halfvec_cosine_ops)
    WITH (m = 16, ef_construction = 64) WHERE deleted_at IS NULL AND indexed"""


def _swap(dims: int) -> list[str]:
    function = _sql._ann_candidates_function(int(dims))
    return [
        f"DROP INDEX IF EXISTS {SERVED_INDEX}",
        "ALTER TABLE langmem_memories RENAME COLUMN embedding TO embedding_old",
        "ALTER TABLE langmem_memories RENAME COLUMN embedding_next TO embedding",
        "ALTER TABLE langmem_memories DROP COLUMN embedding_old, DROP COLUMN embedding_next_of",
        f"ALTER INDEX {NEXT_INDEX} RENAME TO {SERVED_INDEX}",
        function.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1),
        f"DELETE FROM langmem_settings WHERE key = '{TARGET_KEY}'",
    ]


class _TooMany(Exception):
    """The cutover found more stale memories than a batch: roll back, catch up first."""


def plan_texts(users: Sequence[UserKey] | None) -> Plan[ReembedPlan]:
    where, params = _users(users)
    rows = yield Sql(SELECT_TEXTS.format(users=where), params)
    texts = [embedding_text(r["text"]) for r in rows]
    return ReembedPlan(len(texts), estimate_tokens(texts))


class ReembedHost(Protocol):
    """What a re-embed uses of the sync driver (`SyncPostgres`, which imports this
    module): typed by this, not by the driver, so no import runs around a loop."""

    _model_lock: ModelLock

    def _run_op(self, op: Op) -> Any:
        """Run `op` on a pooled connection, without taking the model lock."""

    def _switch(self, embeddings: Embeddings, identity: EmbedderIdentity) -> None:
        """After a cutover (under the exclusive model lock): serve the new embedder."""


class PostgresReembed:
    """One `reembed` run on a service (see the module docstring)."""

    def __init__(
        self,
        svc: ReembedHost,
        new: Embeddings,
        batch_size: int,
        users: Sequence[UserKey] | None,
        progress: ProgressCallback | None,
    ) -> None:
        if batch_size < 1:
            raise ConfigurationError("batch_size: must be >= 1")
        self._svc, self._new, self._batch = svc, new, batch_size
        self._users = list(users) if users else None
        self._progress = progress
        self._target = identify(new)
        self._embedded = 0

    def _run(self, plan: Plan[Any], write: bool = False) -> Any:
        return self._svc._run_op(Op(plan, write, checks_language=False))

    def run(self) -> ReembedReport:
        started = time.monotonic()
        stored = self._run(_identity.recorded())
        if stored is not None and stored.matches(self._target):
            return ReembedReport(0, 0, False, stored.generation, 0.0)
        self._run(self._claim_target(), write=True)
        total, done = self._counts(self._users)
        state = ReembedProgress(done, total)
        self._fill(self._users, state)
        generation = stored.generation if stored is not None else 0
        cut = False
        everyone, embedded = self._counts(None)
        if self._users is None or embedded >= everyone:
            self._run(self._index(everyone))
            found = self._cut_over()
            cut, generation = found is not None, found if found is not None else generation
        return ReembedReport(self._embedded, done, cut, generation, time.monotonic() - started)

    def _claim_target(self) -> Plan[None]:
        rows = yield Sql(SELECT_TARGET)
        if rows and EmbedderIdentity.from_json(rows[0]["value"]).matches(self._target):
            return
        yield Sql(DROP_SHADOW)
        yield Sql(
            f"""ALTER TABLE langmem_memories ADD COLUMN embedding_next
                vector({int(self._target.dims)}), ADD COLUMN embedding_next_of text"""
        )
        yield Sql(UPSERT_TARGET, {"value": self._target.to_json()})

    def _counts(self, users: Sequence[UserKey] | None) -> tuple[int, int]:
        where, params = _users(users)
        rows = self._run(_one(Sql(_COUNT.format(users=where), params)))
        return int(rows[0]["total"]), int(rows[0]["done"])

    def _fill(self, users: Sequence[UserKey] | None, state: ReembedProgress | None) -> None:
        after = ("", "", "")
        where, params = _users(users)
        query = _STALE.format(users=where)
        while True:
            found = {"a": after[0], "u": after[1], "i": after[2], "limit": self._batch}
            rows = self._run(_one(Sql(query, params | found)))
            if not rows:
                return
            self._run(self._shadow(rows), write=True)
            last = rows[-1]
            after = (last["app_name"], last["user_id"], last["id"])
            if state is not None:
                state.done = min(state.done + len(rows), state.total)
                state.embedded = self._embedded
                if self._progress is not None:
                    self._progress(state)

    def _shadow(self, rows: Sequence[dict[str, Any]]) -> Plan[None]:
        """Embed `rows` and write their shadow vectors: one binary COPY into the staging
        table, one set-based UPDATE (a row whose text changed meanwhile is skipped)."""
        vectors = self._new.embed_documents([embedding_text(r["text"]) for r in rows])
        if any(len(v) != self._target.dims for v in vectors):
            raise ConfigurationError(
                f"embeddings: the new embedder's probe has {self._target.dims} dimensions "
                "but its document vectors do not; nothing was cut over"
            )
        self._embedded += len(rows)
        staged = [
            (r["app_name"], r["user_id"], r["id"], r["text"], v)
            for r, v in zip(rows, _binary(vectors), strict=True)
        ]
        yield Sql(CREATE_STAGE)
        yield Copy(COPY_STAGE, STAGE_TYPES, staged)
        yield Sql(UPDATE_SHADOW)

    def _index(self, rows: int) -> Plan[None]:
        """The shadow's HNSW index, built without blocking writes (an invalid one left by
        a killed run is dropped first), with `maintenance_work_mem` raised for the build
        on this connection only (reset after it; a failed build leaves it raised there,
        which only maintenance statements read)."""
        found = yield Sql(SHADOW_READY, {"name": NEXT_INDEX})
        if found[0]["n"]:
            return
        yield Sql(f"DROP INDEX CONCURRENTLY IF EXISTS {NEXT_INDEX}")
        yield Sql(RAISE_BUILD_MEMORY, {"kb": _build_memory_kb(rows, self._target.dims)})
        yield Sql(_build_index(self._target.dims))
        yield Sql("RESET maintenance_work_mem")

    def _cut_over(self) -> int | None:
        for _ in range(CATCH_UP_ROUNDS):
            try:
                with self._svc._model_lock.exclusive():
                    generation: int = self._run(self._cut_over_plan(), write=True)
                    self._svc._switch(self._new, self._target.with_generation(generation))
                    return generation
            except _TooMany:
                self._fill(None, None)
        return None

    def _cut_over_plan(self) -> Plan[int]:
        rows = yield Sql(LOCK_GENERATION)
        generation = (int(rows[0]["value"]) if rows else 0) + 1
        yield Sql(LOCK_WRITES)
        stale = yield Sql(
            _STALE.format(users=""), {"a": "", "u": "", "i": "", "limit": self._batch + 1}
        )
        if len(stale) > self._batch:
            raise _TooMany
        if stale:
            yield from self._shadow(stale)
        for statement in _swap(self._target.dims):
            yield Sql(statement)
        identity = self._target.with_generation(generation)
        yield Sql(
            _identity.REPLACE, {"identity": identity.to_json(), "generation": str(generation)}
        )
        return generation


def _one(step: Sql) -> Plan[Any]:
    rows = yield step
    return rows
