"""`LanceDBMemoryService`: the contract on an embedded LanceDB directory.

Writes are the shared plans (`service/_plans.py`) run by `Executor`; search
fetches a vector leg with LanceDB's exact prefiltered dot-product scan and a
keyword leg scored by the shared BM25F scorer, then ranks them with the
shared `execute_search`, so rankings equal the in-memory reference.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ..._time import ensure_utc
from ...service._claims import (
    ClaimTable,
    _Claim,
    check_claim,
    check_letter_id,
    check_limit,
    check_progress,
    check_status,
    check_ttl,
)
from ...service._core import (
    Limits,
    check_app_filter,
    check_cursor,
    check_memory_id,
    check_thread_id,
    check_user,
    is_expired,
    resolve_options,
    unexpired,
    utcnow,
)
from ...service._language import Language, resolve_language
from ...service._search import (
    CorpusStats,
    KeywordDoc,
    Legs,
    QueryTerms,
    execute_search,
    keyword_score,
    passes_time,
)
from ...service._steps import Plan, drive
from ...service.capabilities import Capability
from ...service.memory import unit_vector
from ...service.protocol import SyncMemoryService
from ...types import (
    DeadLetter,
    DeadLetterStatus,
    Entry,
    ExtractionCursor,
    HistoryEvent,
    Kind,
    SearchOptions,
    ThreadClaim,
    UserKey,
)
from ._executor import Executor, make_embedder
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
    with_entry,
)

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["LanceDBMemoryService"]

T = TypeVar("T")

DOC_CACHE = 200_000
"""Parsed entries and keyword documents kept per service (cleared when over, and by close)."""


def _cursor_json(cursor: ExtractionCursor) -> str:
    data = cursor.model_dump(mode="json", exclude={"message_keys", "retired_keys"})
    data["message_keys"] = base64.b64encode(cursor.message_keys).decode()
    data["retired_keys"] = base64.b64encode(cursor.retired_keys).decode()
    return json.dumps(data)


def _cursor_of(body: str) -> ExtractionCursor:
    data = json.loads(body)
    for name in ("message_keys", "retired_keys"):
        data[name] = base64.b64decode(data[name])
    return ExtractionCursor.model_validate(data)


def _record(rec: str, user: UserKey, ref: str, body: str, key: str | None = None) -> Record:
    return Record(
        key=key or key_of(rec, user, ref),
        rec=rec,
        scope=scope_of(user),
        app=user.app_name,
        user=user.user_id,
        ref=ref,
        body=body,
    )


def _letter_record(letter: DeadLetter) -> Record:
    key = f"{LETTER}:{digest(letter.id)}"
    return _record(LETTER, letter.user, letter.id, letter.model_dump_json(), key)


class LanceDBMemoryService(SyncMemoryService):
    """The full contract on an embedded LanceDB directory (created when missing).

    Args:
        path: the database directory.
        embeddings: optional LangChain `Embeddings`; without one search is keyword-only.
            Its dimension is probed once (one `embed_query`) to create the table.
        limits: text, topic and capacity limits (see `Limits`).
        language: the tokenizer's language (see `InMemoryMemoryService`).

    One service per directory: writes are serialised by this instance's lock,
    not across processes (it does not declare `CROSS_PROCESS`).
    """

    def __init__(
        self,
        path: str | Path,
        embeddings: Embeddings | None = None,
        *,
        limits: Limits | None = None,
        language: str | Language = "english",
    ) -> None:
        self.language = resolve_language(language)
        self._embeddings = embeddings
        self._limits = limits or Limits()
        dim = None if embeddings is None else len(embeddings.embed_query("dimension probe"))
        self._store = Store(path, dim)
        self._embed = make_embedder(embeddings)
        self._docs: dict[str, tuple[int, Entry, KeywordDoc]] = {}

    @property
    def capabilities(self) -> frozenset[Capability]:
        vectors = {Capability.VECTORS} if self._embeddings is not None else set()
        return frozenset({Capability.DURABLE, *vectors})

    def run_plan(self, plan: Plan[T]) -> T:
        """Run a write plan; its writes commit together, in one table version, at its end."""
        executor = Executor(self._store, self._embed)
        try:
            result = drive(plan, executor)
            executor.commit()
            return result
        finally:
            executor.release()

    def _where(self, user: UserKey, rec: str = MEMORY, live: bool = True) -> str:
        return f"rec = '{rec}' AND scope = '{scope_of(user)}'" + (" AND live" if live else "")

    # -- reads ------------------------------------------------------------

    def get(self, user: UserKey, memory_id: str) -> Entry | None:
        user = check_user(user)
        record = self._store.one(key_of(MEMORY, user, check_memory_id(memory_id)))
        if record is None or not record.live or is_expired(record.entry):
            return None
        return record.entry

    def read(self, user: UserKey, limit: int | None = None) -> list[Entry]:
        user = check_user(user)
        entries = unexpired(r.entry for r in self._store.records(self._where(user)))
        entries.sort(key=lambda e: (e.updated_at, e.created_at, e.id), reverse=True)
        return entries[:limit] if limit is not None and limit > 0 else entries

    def count(self, user: UserKey) -> int:
        return self._store.count(self._where(check_user(user)))

    def users(self, app_name: str | None = None) -> list[UserKey]:
        app_name = check_app_filter(app_name)
        rows = self._store.rows(f"rec = '{MEMORY}' AND live", ["app", "user"])
        keys = {(r["app"], r["user"]) for r in rows if app_name is None or r["app"] == app_name}
        return [UserKey(a, u) for a, u in sorted(keys)]

    def history(self, user: UserKey, memory_id: str) -> list[HistoryEvent]:
        user = check_user(user)
        where = (
            self._where(user, HISTORY, live=False)
            + f" AND refh = '{digest(check_memory_id(memory_id))}'"
        )
        found = sorted(self._store.records(where), key=lambda r: r.seq)
        return [HistoryEvent.model_validate_json(r.body) for r in found]

    def expired(self, user: UserKey, limit: int | None = None) -> list[str]:
        user, now = check_user(user), utcnow()
        entries = [r.entry for r in self._store.records(self._where(user))]
        gone = sorted(
            (e for e in entries if is_expired(e, now)), key=lambda e: (e.expires_at, e.id)
        )
        return [e.id for e in gone][: limit if limit and limit > 0 else None]

    # -- search -------------------------------------------------------------

    def _snapshot(self, user: UserKey) -> list[tuple[Entry, KeywordDoc]]:
        """The user's live entries with their keyword documents (cached by write seq)."""
        if len(self._docs) > DOC_CACHE:
            self._docs.clear()
        out = []
        for row in self._store.rows(self._where(user), ["key", "seq", "body"]):
            cached = self._docs.get(row["key"])
            if cached is None or cached[0] != row["seq"]:
                entry = Entry.model_validate_json(row["body"])
                doc = KeywordDoc.build(entry.text, entry.memory.topics, self.language)
                cached = self._docs[row["key"]] = (row["seq"], entry, doc)
            out.append((cached[1], cached[2]))
        return out

    def search(
        self, user: UserKey, query: str | None = None, options: SearchOptions | None = None
    ) -> list[Entry]:
        user = check_user(user)
        opts = resolve_options(query, options)
        if not opts.query.strip():
            return []
        query_vector = None
        if self._embeddings is not None:
            query_vector = unit_vector(self._embeddings.embed_query(opts.query))
        snapshot = self._snapshot(user)
        terms = QueryTerms.of(opts, self.language)
        stats = CorpusStats.from_docs(doc for _, doc in snapshot)

        def fetch(kind: Kind | None, pool: int) -> Legs:
            after, before = opts.time_after, opts.time_before
            pick = [
                (entry, doc)
                for entry, doc in snapshot
                if (kind is None or entry.memory.kind == kind)
                and passes_time(entry.memory.event_time, after, before)
            ]
            scored = [(entry, keyword_score(terms, doc, stats)) for entry, doc in pick]
            keyword = sorted((h for h in scored if h[1] > 0), key=lambda h: -h[1])[:pool]
            if query_vector is None:
                return Legs(vector=None, keyword=keyword)
            where = self._where(user) + (f" AND kind = '{kind.value}'" if kind else "")
            if after is not None or before is not None:
                low, high = micros(after), micros(before)
                bounds = [f"event_us >= {low}"] if low is not None else []
                bounds += [f"event_us <= {high}"] if high is not None else []
                where += f" AND (event_us IS NULL OR ({' AND '.join(bounds)}))"
            hits = self._store.nearest(query_vector, where, pool)
            return Legs(vector=[(r.entry, score) for r, score in hits], keyword=keyword)

        return execute_search(opts, fetch, self.language)

    # -- expiry ---------------------------------------------------------------

    def set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | None) -> bool:
        user = check_user(user)
        key = key_of(MEMORY, user, check_memory_id(memory_id))
        at = ensure_utc(expires_at, "expires_at") if expires_at is not None else None
        with self._store.lock:
            record = self._store.one(key)
            if record is None or not record.live:
                return False
            entry = record.entry.model_copy(update={"expires_at": at})
            self._store.commit([with_entry(record, entry)])
            return True

    # -- cursors, claims and dead letters -------------------------------------

    def get_cursor(self, user: UserKey, thread_id: str) -> ExtractionCursor | None:
        user = check_user(user)
        record = self._store.one(key_of(CURSOR, user, check_thread_id(thread_id)))
        if record is None:
            return None
        pending = len(self._claims(user, thread_id).retries(user, thread_id))
        return _cursor_of(record.body).model_copy(update={"pending_retries": pending})

    def _cursor_record(self, user: UserKey, cursor: ExtractionCursor) -> Record:
        stamped = cursor.model_copy(update={"updated_at": utcnow()})
        return _record(CURSOR, user, cursor.thread_id, _cursor_json(stamped))

    def set_cursor(self, user: UserKey, cursor: ExtractionCursor) -> None:
        user = check_user(user)
        record = self._cursor_record(user, check_cursor(cursor))
        with self._store.lock:
            self._store.commit([record])

    def _letters(self, where: str) -> dict[str, DeadLetter]:
        found = self._store.records(f"rec = '{LETTER}' AND {where}")
        letters = (DeadLetter.model_validate_json(r.body) for r in found)
        return {d.id: d for d in letters}

    def _claims(self, user: UserKey, thread_id: str) -> ClaimTable:
        """The thread's claim and dead letters, in the shared `ClaimTable` rules."""
        table = ClaimTable(self._store.lock)
        record = self._store.one(key_of(CLAIM, user, thread_id))
        if record is not None:
            table.claims[(user, thread_id)] = _Claim(**json.loads(record.body))
        letters = self._letters(f"scope = '{scope_of(user)}'")
        table.letters = {i: d for i, d in letters.items() if d.thread_id == thread_id}
        return table

    def _save(self, user: UserKey, thread_id: str, table: ClaimTable, *extra: Record) -> None:
        records = [*extra, *(_letter_record(d) for d in table.letters.values())]
        claim = table.claims.get((user, thread_id))
        if claim is not None:
            records.append(_record(CLAIM, user, thread_id, json.dumps(asdict(claim))))
        self._store.commit(records)

    def claim_thread(
        self, user: UserKey, thread_id: str, owner: str, ttl: float
    ) -> ThreadClaim | None:
        user = check_user(user)
        thread_id, owner = check_claim(thread_id, owner)
        seconds = check_ttl(ttl)
        assert seconds is not None
        with self._store.lock:
            table = self._claims(user, thread_id)
            claim = table.claim(user, thread_id, owner, seconds, self.get_cursor(user, thread_id))
            if claim is not None:
                self._save(user, thread_id, table)
            return claim

    def save_progress(
        self,
        user: UserKey,
        thread_id: str,
        owner: str,
        *,
        cursor: ExtractionCursor | None = None,
        ttl: float | None = None,
        dead_letter: DeadLetter | None = None,
        resolved: Sequence[str] = (),
    ) -> bool:
        user = check_user(user)
        thread_id, owner = check_claim(thread_id, owner)
        seconds = check_ttl(ttl, optional=True)
        cursor, letter, done = check_progress(user, thread_id, cursor, dead_letter, resolved)
        with self._store.lock:
            table = self._claims(user, thread_id)
            if not table.holds(user, thread_id, owner):
                return False
            table.progress(user, thread_id, owner, seconds, letter, done, cursor is not None)
            extra = [] if cursor is None else [self._cursor_record(user, cursor)]
            self._save(user, thread_id, table, *extra)
            return True

    def record_failure(
        self, user: UserKey, thread_id: str, owner: str, batch: str, error: str
    ) -> int:
        user = check_user(user)
        thread_id, owner = check_claim(thread_id, owner)
        with self._store.lock:
            table = self._claims(user, thread_id)
            attempts = table.failure(user, thread_id, str(batch), str(error))
            self._save(user, thread_id, table)
            return attempts

    def release_thread(self, user: UserKey, thread_id: str, owner: str) -> None:
        user = check_user(user)
        thread_id, owner = check_claim(thread_id, owner)
        with self._store.lock:
            table = self._claims(user, thread_id)
            table.release(user, thread_id, owner)
            self._save(user, thread_id, table)

    def dead_letters(
        self,
        app_name: str | None = None,
        *,
        status: DeadLetterStatus | str | None = None,
        limit: int | None = None,
    ) -> list[DeadLetter]:
        table = ClaimTable(letters=self._letters("true"))
        return table.listing(app_name, check_status(status), check_limit(limit))

    def retry_dead_letter(self, letter_id: str) -> DeadLetter | None:
        refh = digest(check_letter_id(letter_id))
        with self._store.lock:
            table = ClaimTable(letters=self._letters(f"refh = '{refh}'"))
            updated = table.retry(letter_id, utcnow())
            if updated is not None:
                self._store.commit([_letter_record(updated)])
            return updated

    def close(self) -> None:
        self._docs.clear()
