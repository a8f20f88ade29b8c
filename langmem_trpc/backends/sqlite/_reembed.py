"""Online re-embedding of a SQLite file (`service/reembed.py`).

New vectors go to the `reembed_vectors` shadow table (rid, the text they were
embedded from, the vector), one committed batch at a time, while searches keep
reading `memories.embedding` with the old embedder; the shadow rows present are
the progress, so a killed run resumes where it stopped. The target model is
recorded under the settings key `reembed_target`: a run for another model
starts the shadow over.

The cutover is one `BEGIN IMMEDIATE` transaction: it embeds the few memories
written or edited since their shadow row was made (more than a batch: it gives
the lock back and catches up first), copies every shadow vector into
`memories.embedding` (the update trigger bumps each user's version, so no cached
matrix survives), records the new identity with its generation + 1 and empties
the shadow. Readers see all old vectors or all new ones, never a mix.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import ConfigurationError
from ...service.identity import EmbedderIdentity, identify
from ...service.reembed import (
    ProgressCallback,
    ReembedPlan,
    ReembedProgress,
    ReembedReport,
    estimate_tokens,
)
from ...service.rules import embedding_text
from ...types import UserKey
from . import _identity

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from ._host import SQLiteHost

TARGET_KEY = "reembed_target"
SELECT_TARGET = f"SELECT value FROM langmem_settings WHERE key = '{TARGET_KEY}'"
DELETE_TARGET = f"DELETE FROM langmem_settings WHERE key = '{TARGET_KEY}'"
CLEAR_SHADOW = "DELETE FROM reembed_vectors"
_STALE = """SELECT m.rid, m.text FROM memories AS m
    LEFT JOIN reembed_vectors AS s ON s.rid = m.rid
    WHERE (s.rid IS NULL OR s.text != m.text) AND m.rid > ?{users} ORDER BY m.rid LIMIT ?"""
_COUNT = """SELECT count(*), count(s.rid) FROM memories AS m
    LEFT JOIN reembed_vectors AS s ON s.rid = m.rid AND s.text = m.text{users}"""
UPSERT_SHADOW = """INSERT INTO reembed_vectors (rid, text, embedding) VALUES (?, ?, ?)
    ON CONFLICT (rid) DO UPDATE SET text = excluded.text, embedding = excluded.embedding"""
CUTOVER = """UPDATE memories SET embedding = s.embedding FROM reembed_vectors AS s
    WHERE s.rid = memories.rid AND s.text = memories.text"""
SELECT_TEXTS = "SELECT text FROM memories AS m{users}"

CATCH_UP_ROUNDS = 20
"""Catch-up passes before the cutover gives up (a write rate above the embed rate)."""


def _user_filter(users: Sequence[UserKey] | None, glue: str) -> tuple[str, list[str]]:
    if not users:
        return "", []
    pairs = ", ".join("(?, ?)" for _ in users)
    params = [part for user in users for part in (user.app_name, user.user_id)]
    return f" {glue} (m.app_name, m.user_id) IN (VALUES {pairs})", params


def plan(svc: SQLiteHost, users: Sequence[UserKey] | None) -> ReembedPlan:
    """The texts a re-embed would embed (every memory, deleted ones included) and tokens."""
    where, params = _user_filter(users, "WHERE")
    rows = svc._db.read(
        lambda conn: conn.execute(SELECT_TEXTS.format(users=where), params).fetchall()
    )
    texts = [embedding_text(text) for (text,) in rows]
    return ReembedPlan(len(texts), estimate_tokens(texts))


class SQLiteReembed:
    """One `reembed` run on a service (see the module docstring)."""

    def __init__(
        self,
        svc: SQLiteHost,
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

    def run(self) -> ReembedReport:
        started = time.monotonic()
        stored = self._svc._db.read(_identity.recorded)
        if stored is not None and stored.matches(self._target):  # already on this model
            return ReembedReport(0, 0, False, stored.generation, 0.0)
        self._svc._db.write(self._claim_target)
        total, done = self._counts(self._users)
        state = ReembedProgress(done, total)
        self._fill(self._users, state)
        cut = None
        if self._users is None or self._counts(None)[1] >= self._counts(None)[0]:
            cut = self._cut_over()
        generation = cut if cut is not None else (stored.generation if stored else 0)
        seconds = time.monotonic() - started
        return ReembedReport(self._embedded, done, cut is not None, generation, seconds)

    def _claim_target(self, conn: sqlite3.Connection) -> None:
        """Record the target model; a shadow made for another model is dropped."""
        row = conn.execute(SELECT_TARGET).fetchone()
        if row is None or not EmbedderIdentity.from_json(row[0]).matches(self._target):
            conn.execute(CLEAR_SHADOW)
            conn.execute(_identity.UPSERT, (TARGET_KEY, self._target.to_json()))

    def _counts(self, users: Sequence[UserKey] | None) -> tuple[int, int]:
        where, params = _user_filter(users, "WHERE")
        query = _COUNT.format(users=where)
        total, done = self._svc._db.read(lambda conn: conn.execute(query, params).fetchone())
        return int(total), int(done)

    def _stale(
        self, conn: sqlite3.Connection, users: Sequence[UserKey] | None, after: int, limit: int
    ) -> list[Any]:
        where, params = _user_filter(users, "AND")
        query = _STALE.format(users=where)
        return conn.execute(query, [after, *params, limit]).fetchall()

    def _fill(self, users: Sequence[UserKey] | None, state: ReembedProgress | None) -> int:
        """Embed every memory without a current shadow row into the shadow, batch by batch."""
        after, count = 0, 0
        while True:
            rows = self._svc._db.read(
                lambda conn: self._stale(conn, users, after, self._batch)  # noqa: B023
            )
            if not rows:
                return count
            shadow = self._embed(rows)
            self._svc._db.write(lambda conn: conn.executemany(UPSERT_SHADOW, shadow))  # noqa: B023
            after, count = rows[-1][0], count + len(rows)
            if state is not None:
                state.done, state.embedded = min(state.done + len(rows), state.total), count
                if self._progress is not None:
                    self._progress(state)

    def _embed(self, rows: Sequence[Any]) -> list[tuple[int, str, bytes]]:
        vectors = self._new.embed_documents([embedding_text(text) for _, text in rows])
        try:
            matrix = np.asarray(vectors, dtype=np.float32)
        except ValueError:  # ragged
            matrix = np.zeros((0, 0), np.float32)
        if matrix.shape != (len(rows), self._target.dims):
            raise ConfigurationError(
                f"embeddings: the new embedder's probe has {self._target.dims} dimensions "
                "but its document vectors do not; nothing was cut over"
            )
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = np.divide(matrix, norms, out=matrix.copy(), where=norms > 0)
        self._embedded += len(rows)
        return [(rid, text, row.tobytes()) for (rid, text), row in zip(rows, matrix, strict=True)]

    def _cut_over(self) -> int | None:
        """Catch up with writes made during the fill, then cut over (see the module
        docstring); the new generation, or None when writes kept outpacing the catch-up."""
        for _ in range(CATCH_UP_ROUNDS):
            with self._svc._model_lock.exclusive():
                generation = self._svc._db.write(self._try_cut_over)
                if generation is not None:
                    self._svc._switch(self._new, generation)
                    return generation
            self._fill(None, None)
        return None

    def _try_cut_over(self, conn: sqlite3.Connection) -> int | None:
        stale = self._stale(conn, None, 0, self._batch + 1)
        if len(stale) > self._batch:
            return None  # too many to embed while holding the write lock: catch up first
        if stale:
            conn.executemany(UPSERT_SHADOW, self._embed(stale))
        stored = _identity.recorded(conn)
        generation = (stored.generation if stored is not None else 0) + 1
        conn.execute(CUTOVER)
        _identity.record(conn, self._target.with_generation(generation))
        conn.execute(CLEAR_SHADOW)
        conn.execute(DELETE_TARGET)
        return generation
