"""`LanceDBMemoryService`: the in-memory reference backend over one LanceDB table.

`InMemoryMemoryService` runs the shared write plans, reads and claim rules on a
cache of the table: a user's memory rows are loaded in one scan on first touch,
and each write stores what it changed in one table version before it returns
(one the table refuses is undone in memory too). Search ranks with the shared
scorer over a per-user index. The cache is this service's, so a service locks its
directory until `close()` and a second one is refused (`_lock.py`; no `CROSS_PROCESS`).
Memories, history events and threads (cursor, claim, dead letters) are rows of
`records` (`_records.py`). `reembed` moves the directory to a new embedding
model online (`_reembed.py`).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import lancedb
import numpy as np
import pyarrow as pa

from ...errors import ConfigurationError
from ...registry import build_service, split_url
from ...service import claims as c
from ...service import search as ks
from ...service import steps as s
from ...service import validity
from ...service.bm25 import QueryTerms, score_candidates
from ...service.capabilities import Capability
from ...service.identity import EmbedderIdentity, identify
from ...service.info import StoreInfo
from ...service.language import Language
from ...service.model_lock import ModelLock
from ...service.reembed import DEFAULT_BATCH, ProgressCallback, ReembedPlan, ReembedReport
from ...service.rules import (
    Limits,
    check_app_filter,
    check_memory_id,
    check_user,
    resolve_options,
    utcnow,
)
from ...service.steps import Plan
from ...types import DeadLetter, Entry, ExtractionCursor, HistoryEvent, Kind, SearchOptions, UserKey
from ..memory.service import InMemoryMemoryService, _Row, _UserData, unit_vector
from . import _identity, _reembed
from ._index import _User
from ._lock import DirectoryLock
from ._records import HISTORY, MEMORY, TABLE, THREAD, digest, record, scope_of

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
_BYTES = ("message_keys", "retired_keys")


def _top(
    entries: Sequence[Entry], scores: np.ndarray, keep: Callable[[Entry], bool], pool: int
) -> list[tuple[Entry, float]]:
    """The best `pool` hits `keep` accepts (scores clipped at 0); ties keep row order, as
    the reference's stable sort does."""
    ranked = (i for i in np.argsort(-scores, kind="stable").tolist() if keep(entries[i]))
    return [(entries[i], max(0.0, float(scores[i]))) for i in itertools.islice(ranked, pool)]


class LanceDBMemoryService(InMemoryMemoryService):
    """The full contract on an embedded LanceDB directory (created when missing).

    Args:
        path: the database directory.
        embeddings: optional LangChain `Embeddings`; without one search is keyword-only.
        limits: text, topic and capacity limits (see `Limits`).
        language: the tokenizer's language (see `InMemoryMemoryService`).
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
        super().__init__(embeddings, limits=limits, language=language)
        current = None if embeddings is None else identify(embeddings)
        if current is not None and dims is None:
            dims = current.dims
        names = ["key", "rec", "scope", "app", "user", "refh", "body", "fp", *_TYPES]
        cols = [pa.field(n, _TYPES.get(n, pa.string())) for n in names]
        cols += [pa.field(n, t) for n, t in VALIDITY.items()]
        vector = [] if dims is None else [pa.field("vector", pa.list_(pa.float32(), dims))]
        self._users: OrderedDict[UserKey, _UserData] = OrderedDict()
        self._state_rows, self._commits = state_rows, 0
        self._model_lock = ModelLock()  # searches and plans vs. a re-embed's cutover
        self._directory_path = Path(path)
        self._directory = DirectoryLock(path)  # one service per directory, until close()
        try:
            self._open_table(path, pa.schema(cols + vector), dims, current)
            self._add_validity()
            seqs = self._scan("true", ["seq"]).column("seq").to_pylist()
            self._writes = itertools.count(max(filter(None, seqs), default=0) + 1)
            self._load_claims()
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
        return super().capabilities | {Capability.DURABLE}

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

    def run_plan(self, plan: Plan[T]) -> T:
        """Run a write plan holding the model lock shared: one embedder from its `Embed`
        step to its commit, never across a re-embed's cutover."""
        with self._model_lock.shared():
            return super().run_plan(plan)

    def _scan(self, where: str, columns: Sequence[str] | None = None) -> pa.Table:
        query = self._table.search().where(where).limit(None)
        return (query if columns is None else query.select(list(columns))).to_arrow()

    def _write(self, rows: list[dict[str, Any]], fresh: bool = False, drop: str = "") -> None:
        """Write `rows` in one table version: appended when all are `fresh` (new keys),
        else upserted by key; `drop` also deletes the rows it matches that `rows` lack."""
        if not rows and not drop:
            return
        data = pa.Table.from_pylist(rows, self._table.schema)
        if fresh and not drop:
            self._table.add(data, on_bad_vectors="null")
        else:
            merge = self._table.merge_insert("key").when_matched_update_all()
            merge = merge.when_not_matched_insert_all()
            if drop:
                merge = merge.when_not_matched_by_source_delete(drop)
            merge.execute(data, on_bad_vectors="null")
        self._commits += 1
        if self._commits % COMPACT_EVERY == 0:
            self._table.optimize()

    def _find(self, user: UserKey) -> _User:
        data = self._users.get(user)
        if data is None:
            data = self._users[user] = self._load(user)
            total = sum(len(d.rows) for d in self._users.values())
            while len(self._users) > 1 and total > self._state_rows:
                total -= len(self._users.popitem(last=False)[1].rows)
        self._users.move_to_end(user)
        assert isinstance(data, _User)
        return data

    def _load(self, user: UserKey) -> _User:
        """The user's memory rows in write order, from one scan (history stays in the table)."""
        found = self._scan(f"scope = '{scope_of(user)}' AND rec = '{MEMORY}'").sort_by("seq")
        vectors: Any = [None] * found.num_rows
        if self._vectors:
            vectors = found.column("vector").combine_chunks().to_numpy(zero_copy_only=False)
            found = found.drop_columns(["vector"])
        data = _User()
        for r, v in zip(found.to_pylist(), vectors, strict=True):
            e = Entry.model_validate_json(r["body"])
            data.rows[e.id] = _Row(e, r["fp"], r["deleted"], v, keyed=r["keyed"], seq=r["seq"])
        data.stale.update(data.rows)
        return data

    def _memory(self, user: UserKey, row: _Row) -> dict[str, Any]:
        e = row.entry
        more = {"fp": row.fingerprint, "deleted": row.deleted_at, "keyed": row.keyed}
        more |= {"valid_from": e.valid_from, "valid_to": e.valid_to, "superseded": e.superseded_by}
        body, vector = row.entry.model_dump_json(), row.vector
        return record(MEMORY, user, row.entry.id, body, seq=row.seq, vector=vector, **more)

    def _commit(self, done: list[tuple[s.Step, Any]]) -> None:
        """The plan's rows, history and purges in one table version (an append if all is new)."""
        user: UserKey | None = None
        new, refs, purged = set[str](), set[str](), set[str | None]()
        events: list[HistoryEvent] = []
        for step, result in done:
            if isinstance(step, s.Insert):
                new.update(r.entry.id for r in step.rows)
            elif isinstance(step, (s.Rewrite, s.SetTopics, s.SetValidity)):
                refs.add(step.target.entry.id)
            elif isinstance(step, s.SoftDelete):
                refs.update(ref for ref, _ in result)
            elif isinstance(step, s.EvictOldest) and result is not None:
                refs.add(result[0])
            elif isinstance(step, s.RecordHistory):
                events.extend(step.events)
            elif isinstance(step, s.Purge):
                purged.add(step.memory_id)  # None: everything the user has
                refs.add(step.memory_id or "")
                events = [e for e in events if step.memory_id not in (None, e.memory_id)]
            else:
                continue
            user = step.user
        if user is None:
            return
        fresh, refs = refs <= new and not purged, refs | new  # fresh: every key is new
        data, scope = self._users.get(user), scope_of(user)  # None after a purge of the user
        rows = [self._memory(user, data.rows[r]) for r in refs if data and r in data.rows]
        for event in events:
            body = event.model_dump_json()
            rows.append(record(HISTORY, user, event.memory_id, body, seq=next(self._writes)))
        drop = f"scope = '{scope}'" if purged else ""
        if purged and None not in purged:  # one memory: its row and history
            hashes = ", ".join(f"'{digest(ref)}'" for ref in sorted(filter(None, purged)))
            drop += f" AND rec IN ('{MEMORY}', '{HISTORY}') AND refh IN ({hashes})"
        self._write(rows, fresh, drop)
        if isinstance(data, _User):
            data.stale |= refs
            data.history.clear()  # `history` reads the table

    def set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | str | None) -> bool:
        user = check_user(user)
        with self._lock:
            if not super().set_expiry(user, memory_id, expires_at):
                return False
            data = self._find(user)
            try:
                self._write([self._memory(user, data.rows[memory_id])])
            except BaseException:
                del self._users[user]  # reloaded from the table, which stays the truth
                raise
            data.stale.add(memory_id)
            return True

    def history(self, user: UserKey, memory_id: str) -> list[HistoryEvent]:
        scope, refh = scope_of(check_user(user)), digest(check_memory_id(memory_id))
        sql = f"scope = '{scope}' AND rec = '{HISTORY}' AND refh = '{refh}'"
        found = self._scan(sql, ["seq", "body"]).sort_by("seq").column("body")
        return [HistoryEvent.model_validate_json(body) for body in found.to_pylist()]

    def users(self, app_name: str | None = None) -> list[UserKey]:
        app = check_app_filter(app_name)
        where = f"rec = '{MEMORY}' AND deleted IS NULL AND superseded IS NULL"
        found = self._scan(where, ["app", "user"])
        keys = {(r["app"], r["user"]) for r in found.to_pylist() if app in (None, r["app"])}
        return [UserKey(a, u) for a, u in sorted(keys)]

    def search(
        self, user: UserKey, query: str | None = None, options: SearchOptions | None = None
    ) -> list[Entry]:
        user, opts = check_user(user), resolve_options(query, options)
        if not opts.query.strip():
            return []
        with self._model_lock.shared():  # one embedder for the query and the stored vectors
            return self._search(user, opts)

    def _search(self, user: UserKey, opts: SearchOptions) -> list[Entry]:
        vector = None
        if self._embeddings is not None:
            vector = unit_vector(self._embeddings.embed_query(opts.query))
        terms, view = QueryTerms.of(opts, self.language), validity.view_of(opts)
        with self._lock:  # the view filters before any pool is cut (`_index.py`)
            data = self._find(user)
            index = data.view(view, self.language, utcnow())
            pool, stats = index.keyword(data.rows, terms)
            entries, matrix = index.matrix
        pool = pool if vector is None or opts.hybrid else []
        near = None if vector is None else (entries, matrix @ vector if entries else np.zeros(0))
        scores = score_candidates(terms, [d for _, d in pool], stats)
        hit = np.flatnonzero(scores > 0)
        keyword = [pool[i][0] for i in hit.tolist()], scores[hit]

        def fetch(kind: Kind | None, size: int) -> ks.Legs:
            def keep(entry: Entry) -> bool:
                return (kind is None or entry.memory.kind == kind) and ks.passes_time(
                    entry.memory.event_time, opts.time_after, opts.time_before
                )

            vectors = None if near is None else _top(*near, keep, size)
            return ks.Legs(vectors, _top(*keyword, keep, size))

        return ks.execute_search(opts, fetch, self.language, self._time_mentions)

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

    async def areembed(
        self,
        new_embeddings: Embeddings,
        *,
        batch_size: int = DEFAULT_BATCH,
        users: Sequence[UserKey] | None = None,
        progress: ProgressCallback | None = None,
    ) -> ReembedReport:
        """Async twin of `reembed` (runs in a worker thread)."""
        run = partial(self.reembed, batch_size=batch_size, users=users, progress=progress)
        return await asyncio.to_thread(run, new_embeddings)

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

    def _switch(self, embeddings: Embeddings) -> None:
        """After a cutover (under both locks): serve the new embedder."""
        self._embeddings = embeddings

    def _load_claims(self) -> None:
        """Every thread's cursor, claim and dead letters, into a fresh `ClaimTable`."""
        self._claims = table = c.ClaimTable(self._lock)
        for row in self._scan(f"rec = '{THREAD}'", ["app", "user", "body"]).to_pylist():
            body = json.loads(row["body"])
            key = (UserKey(row["app"], row["user"]), body["thread_id"])
            if body["cursor"] is not None:
                raw = {n: base64.b64decode(body["cursor"][n]) for n in _BYTES}
                table.cursors[key] = ExtractionCursor.model_validate(body["cursor"] | raw)
            if body["claim"] is not None:
                table.claims[key] = c.Claim(**body["claim"])
            table.letters |= {d["id"]: DeadLetter.model_validate(d) for d in body["letters"]}

    def run_claim_op(self, op: c.ClaimOp[T]) -> T:
        """Run the op on the `ClaimTable`, then store the thread it may have changed."""
        with self._lock:
            result = super().run_claim_op(op)
            if isinstance(op, c.RetryDeadLetter) and op.letter_id in self._claims.letters:
                letter = self._claims.letters[op.letter_id]
                key = (letter.user, letter.thread_id)
            elif isinstance(op, (c.Owned, c.SetCursor)):  # every thread op but `GetCursor`
                thread = op.cursor.thread_id if isinstance(op, c.SetCursor) else op.thread_id
                key = (op.user, thread)
            else:
                return result
            try:
                self._write([self._thread(*key)])
            except BaseException:
                self._load_claims()  # the table stays the truth
                raise
            return result

    def _thread(self, user: UserKey, thread: str) -> dict[str, Any]:
        table, key = self._claims, (user, thread)
        mine = [d for d in table.letters.values() if (d.user, d.thread_id) == key]
        cursor, claim = table.cursors.get(key), table.claims.get(key)
        body: dict[str, Any] = {"thread_id": thread, "cursor": None}
        body["letters"] = [d.model_dump(mode="json") for d in mine]
        if cursor is not None:
            raw = {n: base64.b64encode(getattr(cursor, n)).decode() for n in _BYTES}
            body["cursor"] = cursor.model_dump(mode="json", exclude=set(_BYTES)) | raw
        body["claim"] = None if claim is None else asdict(claim)
        return record(THREAD, user, thread, json.dumps(body))


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
