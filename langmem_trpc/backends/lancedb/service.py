"""`LanceDBMemoryService`: the full contract on one LanceDB table, `records`.

Memories, history events and threads (cursor, claim, dead letters) are rows of
`records` (`_records.py`). The service runs the shared plans with its own
executors: writes with `WriteRun` (`_write.py`: one plan's writes buffered and
committed as one table version), reads with `ReadRun` (`_read.py`), claims with
`Threads` (`_threads.py`: the kit's `ClaimTable`, written through). The
executors read each user's memory rows from a cache of the table at one version
(`_version`), loaded in one scan on first touch and updated by each commit; the
table handle sees no other writer (the directory lock, `_lock.py`, keeps every
other service out until `close()`, so no `CROSS_PROCESS`), and a version that
moved without this service's commit drops the cache. `reembed` moves the
directory to a new embedding model online (`_reembed.py`).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import lancedb
import numpy as np
import pyarrow as pa

from ...errors import ConfigurationError
from ...registry import build_service, split_url
from ...service import claim_steps, claims, reads, steps
from ...service.capabilities import Capability
from ...service.identity import EmbedderIdentity, identify
from ...service.info import StoreInfo
from ...service.language import Language, resolve_language
from ...service.model_lock import ModelLock
from ...service.periods import TimeMentions
from ...service.protocol import SyncMemoryService
from ...service.reembed import (
    DEFAULT_BATCH,
    ProgressCallback,
    ReembedInThread,
    ReembedPlan,
    ReembedReport,
)
from ...service.rows import MemoryRow
from ...service.rules import (
    Limits,
    check_expiry,
    check_memory_id,
    check_read_limit,
    check_user,
    is_expired,
    utcnow,
)
from ...service.search import unit_vector
from ...types import Entry, UserKey
from . import _identity, _reembed
from ._index import UserRows
from ._lock import DirectoryLock
from ._read import ReadRun
from ._records import MEMORY, TABLE, scope_of
from ._rows import from_table, to_record
from ._threads import Threads
from ._write import WriteRun

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["LanceDBMemoryService", "open_backend"]

T = TypeVar("T")
COMPACT_EVERY = 64
"""Commits between compactions: each commit adds a fragment, and scans slow with many."""
STATE_ROWS = 200_000
"""Memory rows kept over all users by default (the service's `state_rows`)."""
_TIME = pa.timestamp("us", "UTC")
_TYPES = {"seq": pa.int64(), "deleted": _TIME, "keyed": pa.bool_()}
VALIDITY = {"valid_from": _TIME, "valid_to": _TIME, "superseded": pa.string()}
"""A memory row's validity as columns (its body holds it too): `users()` filters on
`superseded`; a table from before them gets them at open (`_add_validity`)."""


class LanceDBMemoryService(ReembedInThread, SyncMemoryService):
    """The full contract on an embedded LanceDB directory (created when missing).

    Args:
        path: the database directory.
        embeddings: optional LangChain `Embeddings`; without one search is keyword-only.
        limits: text, topic and capacity limits (see `Limits`).
        language: the tokenizer's language (a Snowball name such as "german", or a
            `Language`; English by default): stemming, stopwords and search cues.
        dims: the embedder's vector width, which the table is created with; when None,
            one `embed_query` probes it.
        state_rows: memory rows of the users read last kept in memory (their rows and
            search index), past which the least recently used are dropped.
    """

    def __init__(
        self,
        path: str | Path,
        embeddings: Embeddings | None = None,
        *,
        limits: Limits | None = None,
        language: str | Language = "english",
        dims: int | None = None,
        state_rows: int = STATE_ROWS,
    ) -> None:
        self.language = resolve_language(language)
        self._embeddings = embeddings
        self._limits = limits or Limits()
        self._time_mentions = TimeMentions(self.language)
        self._lock = threading.RLock()  # one plan's write section, one step of any other
        current = None if embeddings is None else identify(embeddings)
        if current is not None and dims is None:
            dims = current.dims
        self._users: OrderedDict[UserKey, UserRows] = OrderedDict()
        self._state_rows, self._commits = state_rows, 0
        self._model_lock = ModelLock()  # searches and plans vs. a re-embed's cutover
        self._directory_path = Path(path)
        self._directory = DirectoryLock(path)  # one service per directory, until close()
        try:
            self._open_table(path, _schema(dims), dims, current)
            self._add_validity()
            seqs = self._scan("true", ["seq"]).column("seq").to_pylist()
            self._seqs = itertools.count(max(filter(None, seqs), default=0) + 1)
            self._threads = Threads(self)
        except BaseException:
            self._directory.release()
            raise

    def _open_table(
        self,
        path: str | Path,
        schema: pa.Schema,
        dims: int | None,
        current: EmbedderIdentity | None,
    ) -> None:
        db = self._db = lancedb.connect(str(path))
        try:  # an existing table keeps its schema (with vectors, opened keyword-only)
            self._table = db.open_table(TABLE)
        except ValueError:
            self._table = db.create_table(TABLE, schema=schema, exist_ok=True)
        _reembed.recover(db, str(path), self._table.schema)  # a cutover a crash cut short
        self._version = self._table.version  # the cache's (empty yet)
        self._vectors = "vector" in self._table.schema.names
        stored = self._table.schema.field("vector").type.list_size if self._vectors else None
        if current is not None:  # the recorded embedder first: its error names both models
            _identity.adopt(path, current, stored)
        if dims is not None and stored != dims:
            raise ConfigurationError(
                f"embeddings: the store at {path} holds {stored or 'no'} vector dimensions, "
                f"the embedder makes {dims}"
            )

    def _add_validity(self) -> None:
        """Give a table from before validity its columns, and every memory row lacking
        `valid_from` its values from its body (where `Entry` defaults `valid_from` to
        the event time, else `created_at`); idempotent, so a crash between the two
        commits is finished at the next open."""
        missing = [pa.field(n, t) for n, t in VALIDITY.items() if n not in self._table.schema.names]
        if missing:
            self._table.add_columns(missing)
        old = self._scan(f"rec = '{MEMORY}' AND valid_from IS NULL")
        if not old.num_rows:
            return
        entries = [Entry.model_validate_json(body) for body in old.column("body").to_pylist()]
        for name in VALIDITY:
            values = [
                getattr(e, "superseded_by" if name == "superseded" else name) for e in entries
            ]
            old = old.set_column(
                old.schema.get_field_index(name), name, pa.array(values, VALIDITY[name])
            )
        self._write(old.to_pylist())

    @property
    def capabilities(self) -> frozenset[Capability]:
        """DURABLE, and VECTORS with an embedder; one process's (no `CROSS_PROCESS`)."""
        vectors = {Capability.VECTORS} if self._embeddings is not None else set()
        return frozenset({Capability.DURABLE, *vectors})

    @property
    def time_mentions(self) -> TimeMentions:
        return self._time_mentions

    def store_info(self) -> StoreInfo:
        """The recorded embedder, counts and a re-embed in progress (`langmem-trpc info`);
        no schema version (`_add_validity` is LanceDB's one upgrade, made at open)."""
        found = self._scan(f"rec = '{MEMORY}'", ["app", "user", "deleted"]).to_pylist()
        deleted = sum(1 for row in found if row["deleted"] is not None)
        users = len({(row["app"], row["user"]) for row in found})
        stored = _identity.recorded(self._directory_path)
        target, done = _identity.target(self._directory_path), None
        if target is not None:
            shadow = _reembed.shadow_texts(self._db)
            texts = _reembed.memory_texts(self, None)
            done = sum(1 for key, text in texts.items() if shadow.get(key) == text)
        live = len(found) - deleted
        return StoreInfo("lancedb", "-", stored, users, live, deleted, target, done)

    def close(self) -> None:
        """Drop the cache and release the directory (`_directory`): another service may open
        it; this one must not be used again."""
        self._users.clear()
        self._directory.release()

    # -- the plans: each runs with this service's executor -------------------------

    def run_plan(self, plan: steps.Plan[T]) -> T:
        """Run a write plan (`WriteRun`) holding the model lock shared: one embedder from
        its `Embed` step to its commit, never across a re-embed's cutover."""
        run = WriteRun(self)
        with self._model_lock.shared():
            try:
                result = steps.drive(plan, run.execute)
                with self._lock:
                    run.commit()
                return result
            finally:
                run.release()

    def run_read(self, plan: reads.ReadPlan) -> Any:
        """Run a read plan (`ReadRun`) holding the model lock shared: one embedder for a
        search's query and the stored vectors."""
        run = ReadRun(self)
        with self._model_lock.shared():
            return steps.drive(plan, run.execute)

    def run_claim_op(self, op: claims.ClaimOp[T]) -> T:
        """Run the op's plan (`claims.plan`) on the thread rows (`Threads`)."""
        threads = self._threads
        with self._lock:
            return steps.drive(claims.plan(op), lambda step: claim_steps.dispatch(threads, step))

    # -- the table and the cache ------------------------------------------------------

    def _scan(self, where: str, columns: Sequence[str] | None = None) -> pa.Table:
        query = self._table.search().where(where).limit(None)
        return (query if columns is None else query.select(list(columns))).to_arrow()

    def _write(self, rows: list[dict[str, Any]], fresh: bool = False, drop: str = "") -> None:
        """Write `rows` in one table version: appended when all are `fresh` (new keys),
        else upserted by key; `drop` also deletes the rows it matches that `rows` lack.
        The cache follows the table to the new version (its caller updates the rows it
        changed); a version that moved without this service drops it."""
        if not rows and not drop:
            return
        data = pa.Table.from_pylist(rows, self._table.schema)
        if fresh and not drop:
            version = self._table.add(data, on_bad_vectors="null").version
        else:
            merge = self._table.merge_insert("key").when_matched_update_all()
            merge = merge.when_not_matched_insert_all()
            if drop:
                merge = merge.when_not_matched_by_source_delete(drop)
            version = merge.execute(data, on_bad_vectors="null").version
        if version != self._version + 1:  # the table moved before this commit
            self._users.clear()
        self._version = version
        self._commits += 1
        if self._commits % COMPACT_EVERY == 0:
            self._table.optimize()
            self._version = self._table.version  # the same rows, compacted

    def _cached(self, user: UserKey) -> UserRows:
        """The user's rows at the cache's version (under the lock), loaded on first touch;
        past `state_rows` the least recently used users are dropped."""
        data = self._users.get(user)
        if data is None:
            found = self._scan(f"scope = '{scope_of(user)}' AND rec = '{MEMORY}'")
            rows = from_table(found.sort_by("seq"), self._vectors)
            data = self._users[user] = UserRows({row.entry.id: row for row in rows})
            data.stale.update(data.rows)
            total = sum(len(d.rows) for d in self._users.values())
            while len(self._users) > 1 and total > self._state_rows:
                total -= len(self._users.popitem(last=False)[1].rows)
        self._users.move_to_end(user)
        return data

    def _forget(self, user: UserKey, threads: bool = True) -> None:
        """Drop the user's cached rows (after a purge of the user, or a commit that
        raised: they reload from the table) and, with `threads`, reload the threads."""
        self._users.pop(user, None)
        if threads:
            self._threads.load()

    def _next_seq(self) -> int:
        return next(self._seqs)

    def _embed_texts(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        if self._embeddings is None:
            return [None] * len(texts)
        return [unit_vector(v) for v in self._embeddings.embed_documents(list(texts))]

    # -- expiry ---------------------------------------------------------------------

    def set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | str | None) -> bool:
        user = check_user(user)
        check_memory_id(memory_id)
        at = check_expiry(expires_at)
        with self._lock:
            data = self._cached(user)
            row = data.rows.get(memory_id)
            if row is None or not row.live:
                return False
            changed = replace(row, entry=row.entry.model_copy(update={"expires_at": at}))
            try:
                self._write([to_record(user, changed)])
            except BaseException:
                self._forget(user, threads=False)
                raise
            data.rows[memory_id] = changed
            data.stale.add(memory_id)
            return True

    def expired(self, user: UserKey, limit: int | None = None) -> list[str]:
        user, limit = check_user(user), check_read_limit(limit)
        now = utcnow()
        with self._lock:
            rows = [x for x in self._cached(user).rows.values() if x.live]
        gone = sorted((x for x in rows if is_expired(x.entry, now)), key=_expiry)
        return [x.entry.id for x in gone][:limit]

    # -- re-embedding (`_reembed.py`) ---------------------------------------------

    def reembed(
        self,
        new_embeddings: Embeddings,
        *,
        batch_size: int = DEFAULT_BATCH,
        users: Sequence[UserKey] | None = None,
        progress: ProgressCallback | None = None,
    ) -> ReembedReport:
        """Move the directory to `new_embeddings` online: every memory (deleted and
        superseded ones too) is embedded into a shadow table while searches use the old
        vectors, then one table version cuts over and this service switches to the new
        embedder. Resumable: a rerun continues a killed one. `users` embeds only theirs
        (no cutover while other users' memories lack a new vector)."""
        users = [check_user(u) for u in users] if users else None
        return _reembed.LanceDBReembed(self, new_embeddings, batch_size, users, progress).run()

    def reembed_plan(self, users: Sequence[UserKey] | None = None) -> ReembedPlan:
        """What `reembed` would embed: the memory texts and their estimated tokens."""
        return _reembed.plan(self, [check_user(u) for u in users] if users else None)

    def _swap_vectors(
        self, rows: dict[str, int], matrix: np.ndarray, identity: EmbedderIdentity
    ) -> None:
        """Rewrite `records` as one table version: each memory row's vector is its row of
        `matrix` (`rows`: key -> row; other rows get none), at `identity`'s width, and the
        schema metadata records `identity` (`_reembed.recover`). Under both locks."""
        found = self._scan("true")
        if self._vectors:
            found = found.drop_columns(["vector"])
        keys = found.column("key").to_pylist()
        picked = np.array([rows.get(key, -1) for key in keys], dtype=np.int64)
        values = np.zeros((len(picked), identity.dims), np.float32)
        if len(matrix):
            values = matrix[np.maximum(picked, 0)]
        flat = pa.array(values.astype(np.float32).ravel())
        column = pa.FixedSizeListArray.from_arrays(flat, identity.dims, mask=pa.array(picked < 0))
        found = found.append_column("vector", column)
        meta = {_identity.META_KEY: identity.to_json().encode()}
        found = found.replace_schema_metadata(meta)
        self._table = self._db.create_table(TABLE, found, mode="overwrite", on_bad_vectors="null")
        self._vectors = True
        self._users.clear()  # reloaded with the new vectors
        self._version = self._table.version

    def _switch(self, embeddings: Embeddings) -> None:
        """After a cutover (under both locks): serve the new embedder."""
        self._embeddings = embeddings


def _schema(dims: int | None) -> pa.Schema:
    """The `records` table's columns (a vector column when `dims` is known)."""
    names = ["key", "rec", "scope", "app", "user", "refh", "body", "fp", *_TYPES]
    cols = [pa.field(n, _TYPES.get(n, pa.string())) for n in names]
    cols += [pa.field(n, t) for n, t in VALIDITY.items()]
    vector = [] if dims is None else [pa.field("vector", pa.list_(pa.float32(), dims))]
    return pa.schema(cols + vector)


def _expiry(row: MemoryRow) -> tuple[datetime, str]:
    expires = row.entry.expires_at
    assert expires is not None  # only expired rows are sorted
    return expires, row.entry.id


def open_backend(
    url: str, *, embeddings: Embeddings | None = None, create: bool = True, **options: Any
) -> LanceDBMemoryService:
    """`lancedb:///abs/dir` or `lancedb://relative/dir`; `options` are the service's.
    With `create=False` the directory must already hold a langmem-trpc table."""
    path = split_url(url, "lancedb")
    if not path:
        raise ConfigurationError(f"url: {url!r} names no directory (lancedb:///abs/dir)")
    if not create and not (Path(path) / f"{TABLE}.lance").is_dir():
        raise ConfigurationError(f"no LanceDB memory store at {path}")
    return build_service(LanceDBMemoryService, "lancedb", path, embeddings, **options)
