"""`LanceDBMemoryService`: the contract on an embedded LanceDB directory.

Writes are the shared plans (`service/_plans.py`) run by `Executor`. Search
fetches a vector leg with LanceDB's exact prefiltered dot-product scan and a
keyword leg scored by the shared BM25F scorer over the user's live rows, and
ranks them with the shared `execute_search`: rankings equal the reference's.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..._time import ensure_utc
from ...service import _claims as c
from ...service import _core
from ...service import _search as ks
from ...service._language import Language, resolve_language
from ...service._steps import Plan, drive
from ...service.capabilities import Capability
from ...service.memory import unit_vector
from ...service.protocol import SyncMemoryService
from ...types import (
    DeadLetter,
    Entry,
    ExtractionCursor,
    HistoryEvent,
    Kind,
    SearchOptions,
    UserKey,
)
from ._executor import Executor
from ._store import (
    CLAIM,
    CURSOR,
    HISTORY,
    LETTER,
    MEMORY,
    Record,
    Store,
    digest,
    key_of,
    micros,
    scope_of,
    where,
)

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["LanceDBMemoryService"]

T = TypeVar("T")
DOC_CACHE = 200_000
"""Parsed entries with keyword documents kept per service (dropped when over, and by close)."""
_BYTES = ("message_keys", "retired_keys")


def _cursor_json(cursor: ExtractionCursor) -> str:
    data = cursor.model_dump(mode="json", exclude=set(_BYTES))
    return json.dumps(data | {n: base64.b64encode(getattr(cursor, n)).decode() for n in _BYTES})


def _cursor_of(body: str) -> ExtractionCursor:
    data = json.loads(body)
    return ExtractionCursor.model_validate(data | {n: base64.b64decode(data[n]) for n in _BYTES})


def _letter(letter: DeadLetter) -> Record:
    key = f"{LETTER}:{digest(letter.id)}"
    return Record.of(LETTER, letter.user, letter.id, letter.model_dump_json(), key=key)


class LanceDBMemoryService(SyncMemoryService):
    """The full contract on an embedded LanceDB directory (created when missing).

    Args:
        path: the database directory.
        embeddings: optional LangChain `Embeddings`; without one search is keyword-only.
        dims: the embedder's vector width, which the table is created with; when None,
            one `embed_query` probes it.
        limits: text, topic and capacity limits (see `Limits`).
        language: the tokenizer's language (see `InMemoryMemoryService`).

    Writes are serialised by this instance's lock, not across processes: open one
    service per directory (it does not declare `CROSS_PROCESS`).
    """

    def __init__(
        self,
        path: str | Path,
        embeddings: Embeddings | None = None,
        *,
        limits: _core.Limits | None = None,
        language: str | Language = "english",
        dims: int | None = None,
    ) -> None:
        self.language = resolve_language(language)
        self._embeddings = embeddings
        self._limits = limits or _core.Limits()
        if embeddings is not None and dims is None:
            dims = len(embeddings.embed_query("dimension probe"))
        dim = None if embeddings is None else dims
        self._store = Store(path, dim)
        self._docs: dict[str, tuple[int, Entry, ks.KeywordDoc]] = {}

    @property
    def capabilities(self) -> frozenset[Capability]:
        vectors = {Capability.VECTORS} if self._embeddings is not None else set()
        return frozenset({Capability.DURABLE, *vectors})

    def _embed(self, texts: list[str]) -> list[object]:
        if self._embeddings is None:
            return [None] * len(texts)
        return [unit_vector(v) for v in self._embeddings.embed_documents(texts)]

    def run_plan(self, plan: Plan[T]) -> T:
        """Run a write plan; its writes commit together, in one table version, at its end."""
        executor = Executor(self._store, self._embed)
        try:
            result = drive(plan, executor)
            executor.commit()
            return result
        finally:
            executor.release()

    # -- reads ------------------------------------------------------------

    def get(self, user: UserKey, memory_id: str) -> Entry | None:
        user = _core.check_user(user)
        found = self._store.one(key_of(MEMORY, user, _core.check_memory_id(memory_id)))
        live = found is not None and found.live and not _core.is_expired(found.entry)
        return found.entry if found is not None and live else None

    def read(self, user: UserKey, limit: int | None = None) -> list[Entry]:
        records = self._store.records(where(_core.check_user(user)))
        entries = _core.unexpired(r.entry for r in records)
        entries.sort(key=lambda e: (e.updated_at, e.created_at, e.id), reverse=True)
        return entries[:limit] if limit is not None and limit > 0 else entries

    def count(self, user: UserKey) -> int:
        return self._store.count(where(_core.check_user(user)))

    def users(self, app_name: str | None = None) -> list[UserKey]:
        app = _core.check_app_filter(app_name)
        rows = self._store.rows(f"rec = '{MEMORY}' AND live", ["app", "user"])
        keys = {(r["app"], r["user"]) for r in rows if app is None or r["app"] == app}
        return [UserKey(a, u) for a, u in sorted(keys)]

    def history(self, user: UserKey, memory_id: str) -> list[HistoryEvent]:
        refh = digest(_core.check_memory_id(memory_id))
        sql = f"{where(_core.check_user(user), HISTORY, live=False)} AND refh = '{refh}'"
        found = sorted(self._store.records(sql), key=lambda r: r.seq)
        return [HistoryEvent.model_validate_json(r.body) for r in found]

    def expired(self, user: UserKey, limit: int | None = None) -> list[str]:
        now, records = _core.utcnow(), self._store.records(where(_core.check_user(user)))
        gone = [e for e in (r.entry for r in records) if _core.is_expired(e, now)]
        gone.sort(key=lambda e: (e.expires_at, e.id))
        return [e.id for e in gone][: limit if limit and limit > 0 else None]

    def set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | None) -> bool:
        key = key_of(MEMORY, _core.check_user(user), _core.check_memory_id(memory_id))
        at = ensure_utc(expires_at, "expires_at") if expires_at is not None else None
        with self._store.lock:
            found = self._store.one(key)
            if found is None or not found.live:
                return False
            entry = found.entry.model_copy(update={"expires_at": at})
            self._store.commit(
                [Record.memory(entry, found.fp or "", found.keyed, found.vector, found.seq)]
            )
            self._docs.pop(key, None)  # the write sequence stays: the snapshot cache can't tell
            return True

    # -- search -------------------------------------------------------------

    def _snapshot(self, user: UserKey) -> dict[str, tuple[Entry, ks.KeywordDoc]]:
        """The user's live entries and keyword documents by key: bodies are read and
        parsed only for rows whose write sequence the cache does not hold."""
        if len(self._docs) > DOC_CACHE:
            self._docs.clear()
        seqs = {r["key"]: r["seq"] for r in self._store.rows(where(user), ["key", "seq"])}
        stale = {k for k, seq in seqs.items() if self._docs.get(k, (None,))[0] != seq}
        if stale:
            listed = ", ".join(map(repr, stale))
            sql = where(user) + (f" AND key IN ({listed})" if len(stale) <= 512 else "")
            for row in self._store.rows(sql, ["key", "seq", "body"]):
                entry = Entry.model_validate_json(row["body"])
                doc = ks.KeywordDoc.build(entry.text, entry.memory.topics, self.language)
                self._docs[row["key"]] = (row["seq"], entry, doc)
        hits = ((k, self._docs.get(k)) for k in seqs)
        return {k: (hit[1], hit[2]) for k, hit in hits if hit is not None}

    def _vector_filter(self, user: UserKey, kind: Kind | None, opts: SearchOptions) -> str:
        sql = where(user) + (f" AND kind = '{kind.value}'" if kind is not None else "")
        low, high = micros(opts.time_after), micros(opts.time_before)
        bounds = [f"event_us >= {low}"] * (low is not None) + [f"event_us <= {high}"] * (
            high is not None
        )
        return sql + (f" AND (event_us IS NULL OR ({' AND '.join(bounds)}))" if bounds else "")

    def search(
        self, user: UserKey, query: str | None = None, options: SearchOptions | None = None
    ) -> list[Entry]:
        user, opts = _core.check_user(user), _core.resolve_options(query, options)
        if not opts.query.strip():
            return []
        vector = None
        if self._embeddings is not None:
            vector = unit_vector(self._embeddings.embed_query(opts.query))
        by_key = self._snapshot(user)
        snapshot = list(by_key.values())
        terms = ks.QueryTerms.of(opts, self.language)
        stats = ks.CorpusStats.from_docs(doc for _, doc in snapshot)

        def fetch(kind: Kind | None, pool: int) -> ks.Legs:
            pick = [
                (e, d)
                for e, d in snapshot
                if (kind is None or e.memory.kind == kind)
                and ks.passes_time(e.memory.event_time, opts.time_after, opts.time_before)
            ]
            scored = [(e, ks.keyword_score(terms, d, stats)) for e, d in pick]
            keyword = sorted((h for h in scored if h[1] > 0), key=lambda h: -h[1])[:pool]
            if vector is None:
                return ks.Legs(vector=None, keyword=keyword)
            hits = self._store.nearest(vector, self._vector_filter(user, kind, opts), pool)
            near = [(by_key[k][0], score) for k, score in hits if k in by_key]
            return ks.Legs(vector=near, keyword=keyword)

        return ks.execute_search(opts, fetch, self.language)

    # -- cursors, claims and dead letters (the shared `ClaimTable` rules) ---------

    def run_claim_op(self, op: c.ClaimOp[T]) -> T:
        """Run the op on a `ClaimTable` holding the rows it reads (one thread's cursor,
        claim and dead letters, or the letters an admin call reads), then write the
        table's rows back in one commit."""
        with self._store.lock:
            if isinstance(op, (c.ListDeadLetters, c.RetryDeadLetter)):
                admin: T = self._admin(op)
                return admin
            assert isinstance(op, (c.OnThread, c.SetCursor))
            user = op.user
            thread_id = op.cursor.thread_id if isinstance(op, c.SetCursor) else op.thread_id
            table = self._claims(user, thread_id)
            result: T = table.apply(op)
            if not isinstance(op, c.GetCursor):
                records = [_letter(d) for d in table.letters.values()]
                for claim in table.claims.values():
                    records.append(Record.of(CLAIM, user, thread_id, json.dumps(asdict(claim))))
                for cursor in table.cursors.values():
                    records.append(Record.of(CURSOR, user, thread_id, _cursor_json(cursor)))
                self._store.commit(records)
            return result

    def _admin(self, op: c.ListDeadLetters | c.RetryDeadLetter) -> Any:
        """An admin call across users, on a table of the dead letters it reads."""
        retry = op.letter_id if isinstance(op, c.RetryDeadLetter) else None
        sql = "true" if retry is None else f"refh = '{digest(retry)}'"
        table = c.ClaimTable(self._store.lock, letters=self._letters(sql))
        result = table.apply(op)
        if retry is not None and result is not None:
            self._store.commit([_letter(table.letters[retry])])
        return result

    def _letters(self, sql: str) -> dict[str, DeadLetter]:
        found = self._store.records(f"rec = '{LETTER}' AND {sql}")
        return {d.id: d for d in (DeadLetter.model_validate_json(r.body) for r in found)}

    def _claims(self, user: UserKey, thread_id: str) -> c.ClaimTable:
        """A table with the thread's cursor, claim and dead letters."""
        table = c.ClaimTable(self._store.lock)
        cursor = self._store.one(key_of(CURSOR, user, thread_id))
        if cursor is not None:
            table.cursors[(user, thread_id)] = _cursor_of(cursor.body)
        claim = self._store.one(key_of(CLAIM, user, thread_id))
        if claim is not None:
            table.claims[(user, thread_id)] = c.Claim(**json.loads(claim.body))
        letters = self._letters(f"scope = '{scope_of(user)}'").values()
        table.letters = {d.id: d for d in letters if d.thread_id == thread_id}
        return table

    def close(self) -> None:
        self._docs.clear()
