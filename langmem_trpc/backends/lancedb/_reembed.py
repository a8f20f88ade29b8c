"""Online re-embedding of a LanceDB directory (`service/reembed.py`).

New vectors go to the `reembed_shadow` table beside `records` (the memory row's
key, the text they were embedded from, the vector), one appended batch (one
table version) at a time, while searches keep ranking the cached old vectors
with the old embedder; the shadow rows present are the progress, so a killed
run resumes where it stopped. The target model is recorded in
`langmem_reembed.json` (`_identity.py`): a run for another model starts the
shadow over.

The cutover holds the service's model lock exclusively and then its lock, so no
search or write of the service runs across it. It embeds the memories written or
edited since their shadow row was made (more than a batch: it lets go and
catches up first), then rewrites `records` as one table version holding the
shadow's vectors (at the new width when the dimension changes) and the new
identity, generation + 1, in its schema metadata; then it records that identity
in `langmem_embedder.json`, drops the shadow, empties the cache and switches the
service to the new embedder. An open after a crash between the table version and
the file finishes the move (`recover`). The directory lock keeps every other
service out, so none still holds the old embedder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import lancedb
import numpy as np
import pyarrow as pa

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
from ._records import memories_of

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from ._host import LanceDBHost

SHADOW = "reembed_shadow"
CATCH_UP_ROUNDS = 20
"""Catch-up passes before the cutover gives up (a write rate above the embed rate)."""

Texts = dict[str, str]
"""Memory row key -> the text its vector is (to be) embedded from."""


def shadow_schema(dims: int) -> pa.Schema:
    vector = pa.field("vector", pa.list_(pa.float32(), dims))
    return pa.schema([pa.field("key", pa.string()), pa.field("text", pa.string()), vector])


def open_shadow(db: lancedb.DBConnection) -> Any:
    """The shadow table, or None when no re-embed left one, or when the one listed has
    no version yet: `create_table` makes the directory before its first version, so a
    run killed in between (or a reader in another process meanwhile) finds a table that
    cannot be opened. `drop_shadow` removes such a directory."""
    if SHADOW not in db.list_tables().tables:
        return None
    try:
        return db.open_table(SHADOW)
    except ValueError:  # lancedb: "Table 'reembed_shadow' was not found"
        return None


def drop_shadow(db: lancedb.DBConnection) -> None:
    if SHADOW in db.list_tables().tables:
        db.drop_table(SHADOW)


def recover(db: lancedb.DBConnection, directory: str, schema: pa.Schema) -> None:
    """Finish a cutover that a crash cut short: the identity in the table's schema
    metadata newer than the file's is recorded; a target the store already uses, and
    its shadow, are dropped."""
    found = (schema.metadata or {}).get(_identity.META_KEY)
    stored = _identity.recorded(directory)
    if found is not None:
        moved = EmbedderIdentity.from_json(found.decode())
        if stored is None or moved.generation > stored.generation:
            _identity.record(directory, moved)
            stored = moved
    target = _identity.target(directory)
    if target is not None and stored is not None and target.matches(stored):
        _identity.record_target(directory, None)
        drop_shadow(db)


def memory_texts(svc: LanceDBHost, users: Sequence[UserKey] | None) -> Texts:
    """Every memory row's key and embedding text (deleted and superseded rows included)."""
    with svc._lock:  # one consistent table version, between writes
        found = svc._scan(memories_of(users), ["key", "body"]).to_pydict()
    bodies = (json.loads(body)["memory"]["text"] for body in found["body"])
    return dict(zip(found["key"], map(embedding_text, bodies), strict=True))


def plan(svc: LanceDBHost, users: Sequence[UserKey] | None) -> ReembedPlan:
    """The texts a re-embed would embed (every memory, deleted ones included) and tokens."""
    texts = list(memory_texts(svc, users).values())
    return ReembedPlan(len(texts), estimate_tokens(texts))


def shadow_texts(db: lancedb.DBConnection) -> Texts:
    shadow = open_shadow(db)
    if shadow is None:
        return {}
    found = shadow.search().select(["key", "text"]).limit(None).to_arrow().to_pydict()
    return dict(zip(found["key"], found["text"], strict=True))


def shadow_vectors(db: lancedb.DBConnection, dims: int) -> tuple[dict[str, int], np.ndarray]:
    """The shadow's vectors as a matrix, and each key's row in it."""
    found = open_shadow(db).search().select(["key", "vector"]).limit(None).to_arrow()
    flat = found.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    keys = found.column("key").to_pylist()
    return {key: i for i, key in enumerate(keys)}, flat.reshape(len(keys), dims)


class LanceDBReembed:
    """One `reembed` run on a service (see the module docstring)."""

    def __init__(
        self,
        svc: LanceDBHost,
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
        self._directory = str(svc._directory_path)
        self._shadow: Texts = {}
        self._handle: Any = None
        """The shadow table (`_claim_target` opens it)."""
        self._embedded = 0

    def run(self) -> ReembedReport:
        started = time.monotonic()
        stored = _identity.recorded(self._directory)
        if stored is not None and stored.matches(self._target):  # already on this model
            return ReembedReport(0, 0, False, stored.generation, 0.0)
        self._claim_target()
        stale, total = self._stale(self._users)
        state = ReembedProgress(total - len(stale), total)
        self._fill(stale, state)
        cut = None
        if self._users is None or not self._stale(None)[0]:
            cut = self._cut_over()
        generation = cut if cut is not None else (stored.generation if stored else 0)
        seconds = time.monotonic() - started
        return ReembedReport(
            self._embedded, total - len(stale), cut is not None, generation, seconds
        )

    def _claim_target(self) -> None:
        """Record the target model; a shadow made for another model (or none) starts over."""
        db, found = self._svc._db, _identity.target(self._directory)
        shadow = open_shadow(db)
        width = None if shadow is None else shadow.schema.field("vector").type.list_size
        if found is None or not found.matches(self._target) or width != self._target.dims:
            drop_shadow(db)
            db.create_table(SHADOW, schema=shadow_schema(self._target.dims))
            _identity.record_target(self._directory, self._target)
        self._handle, self._shadow = open_shadow(db), shadow_texts(db)

    def _stale(self, users: Sequence[UserKey] | None) -> tuple[list[tuple[str, str]], int]:
        """The memories without a shadow row of their current text, and how many there are."""
        texts = memory_texts(self._svc, users)
        stale = [(key, text) for key, text in texts.items() if self._shadow.get(key) != text]
        return stale, len(texts)

    def _fill(self, stale: list[tuple[str, str]], state: ReembedProgress | None) -> None:
        """Embed `stale` into the shadow, one committed batch at a time."""
        for start in range(0, len(stale), self._batch):
            rows = stale[start : start + self._batch]
            self._store(rows, self._embed(rows))
            if state is not None:
                state.done = min(state.done + len(rows), state.total)
                state.embedded = self._embedded
                if self._progress is not None:
                    self._progress(state)

    def _embed(self, rows: Sequence[tuple[str, str]]) -> np.ndarray:
        vectors = self._new.embed_documents([text for _, text in rows])
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
        self._embedded += len(rows)
        unit: np.ndarray = np.divide(matrix, norms, out=matrix.copy(), where=norms > 0)
        return unit

    def _store(self, rows: Sequence[tuple[str, str]], matrix: np.ndarray) -> None:
        """Append the batch to the shadow (rows it held for an older text are replaced)."""
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel()), self._target.dims)
        keys, texts = [k for k, _ in rows], [t for _, t in rows]
        data = pa.Table.from_arrays(
            [pa.array(keys), pa.array(texts), vectors], schema=shadow_schema(self._target.dims)
        )
        if any(key in self._shadow for key in keys):
            merge = self._handle.merge_insert("key").when_matched_update_all()
            merge.when_not_matched_insert_all().execute(data)
        else:
            self._handle.add(data)
        self._shadow.update(rows)

    def _cut_over(self) -> int | None:
        """Catch up with writes made during the fill, then cut over (see the module
        docstring); the new generation, or None when writes kept outpacing the catch-up."""
        for _ in range(CATCH_UP_ROUNDS):
            with self._svc._model_lock.exclusive(), self._svc._lock:
                stale, _ = self._stale(None)
                if len(stale) <= self._batch:
                    return self._commit(stale)
            self._fill(stale, None)
        return None

    def _commit(self, stale: list[tuple[str, str]]) -> int:
        if stale:
            self._store(stale, self._embed(stale))
        stored = _identity.recorded(self._directory)
        identity = self._target.with_generation((stored.generation if stored else 0) + 1)
        self._svc._swap_vectors(*shadow_vectors(self._svc._db, identity.dims), identity)
        _identity.record(self._directory, identity)
        _identity.record_target(self._directory, None)
        drop_shadow(self._svc._db)
        self._svc._switch(self._new)
        return identity.generation
