"""`LanceDBMemoryService`: the contract on an embedded LanceDB directory.

Writes are the shared plans (`service/_plans.py`) run by `Executor`. Reads
and search answer from the user's state (`_state.py`, loaded from the table
once, kept equal to it by every commit): the keyword leg scores the live rows
holding a query term with the shared BM25F scorer, the vector leg is one
matrix product, and the shared `plan_search` / `rank_search` rank them:
rankings equal the reference's.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ..._time import ensure_utc
from ...service import _claims as c
from ...service import _core
from ...service import _search as ks
from ...service._language import Language, resolve_language
from ...service._periods import TimeMentions
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
from ..sqlite._scoring import score_candidates
from ._executor import Executor
from ._state import States
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
    scope_of,
    where,
)

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["LanceDBMemoryService"]

T = TypeVar("T")
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


def _top(
    entries: list[Entry], scores: np.ndarray, keep: Callable[[Entry], bool], pool: int
) -> list[tuple[Entry, float]]:
    """The `pool` entries `keep` accepts with the highest scores (clipped at 0), best
    first; equal scores keep their row order, as the reference's stable sort does."""
    hits: list[tuple[Entry, float]] = []
    for i in np.argsort(-scores, kind="stable").tolist():
        if len(hits) == pool:
            break
        if keep(entries[i]):
            hits.append((entries[i], max(0.0, float(scores[i]))))
    return hits


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
        self._store = Store(path, None if embeddings is None else dims)
        self._states = States(lambda u: self._store.records(where(u, live=False)), self.language)
        self._time_mentions = TimeMentions(self.language)

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
        executor = Executor(self._store, self._states, self._embed)
        try:
            result = drive(plan, executor)
            executor.commit()
            return result
        finally:
            executor.release()

    # -- reads: the user's state ------------------------------------------------

    def _live(self, user: UserKey, expired: bool = False) -> list[Entry]:
        """The user's live entries whose expiry has (or, by default, has not) passed."""
        with self._store.lock:
            state = self._states.get(_core.check_user(user))
            entries = [state.entries[ref] for ref in state.docs]
        now = _core.utcnow()
        return [e for e in entries if _core.is_expired(e, now) == expired]

    def get(self, user: UserKey, memory_id: str) -> Entry | None:
        memory_id = _core.check_memory_id(memory_id)
        with self._store.lock:
            state = self._states.get(_core.check_user(user))
            live = memory_id in state.docs
            entry = state.entries[memory_id] if live else None
        return entry if entry is not None and not _core.is_expired(entry) else None

    def read(self, user: UserKey, limit: int | None = None) -> list[Entry]:
        entries = self._live(user)
        entries.sort(key=lambda e: (e.updated_at, e.created_at, e.id), reverse=True)
        return entries[:limit] if limit is not None and limit > 0 else entries

    def count(self, user: UserKey) -> int:
        with self._store.lock:
            return len(self._states.get(_core.check_user(user)).docs)

    def users(self, app_name: str | None = None) -> list[UserKey]:
        app = _core.check_app_filter(app_name)
        rows = self._store.rows(f"rec = '{MEMORY}' AND live", ["app", "user"])
        keys = {(r["app"], r["user"]) for r in rows if app is None or r["app"] == app}
        return [UserKey(a, u) for a, u in sorted(keys)]

    def history(self, user: UserKey, memory_id: str) -> list[HistoryEvent]:
        refh = digest(_core.check_memory_id(memory_id))
        sql = f"{where(_core.check_user(user), HISTORY, live=False)} AND refh = '{refh}'"
        found = sorted(self._store.rows(sql, ["seq", "body"]), key=lambda r: r["seq"])
        return [HistoryEvent.model_validate_json(r["body"]) for r in found]

    def expired(self, user: UserKey, limit: int | None = None) -> list[str]:
        gone = sorted(self._live(user, expired=True), key=lambda e: (e.expires_at, e.id))
        return [e.id for e in gone][: limit if limit and limit > 0 else None]

    def set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | None) -> bool:
        user, memory_id = _core.check_user(user), _core.check_memory_id(memory_id)
        at = ensure_utc(expires_at, "expires_at") if expires_at is not None else None
        with self._store.lock:
            state = self._states.get(user)
            found = state.rows.get(memory_id)
            if found is None or not found.live:
                return False
            entry = state.entries[memory_id].model_copy(update={"expires_at": at})
            record = Record.memory(entry, found.fp or "", found.keyed, found.vector, found.seq)
            self._store.commit([record])
            state.put(record)
            return True

    # -- search ---------------------------------------------------------------

    def search(
        self, user: UserKey, query: str | None = None, options: SearchOptions | None = None
    ) -> list[Entry]:
        user, opts = _core.check_user(user), _core.resolve_options(query, options)
        plan = ks.plan_search(opts)
        if not plan.kinds:
            return []
        vector = None
        if self._embeddings is not None:
            vector = unit_vector(self._embeddings.embed_query(opts.query))
        terms = ks.QueryTerms.of(opts, self.language)
        with self._store.lock:
            state = self._states.get(user)
            stats = state.stats(terms)
            pool = state.candidates(terms) if vector is None or opts.hybrid else []
            near = None if vector is None else state.similar(vector)
        scores = score_candidates(terms, [d for _, d in pool], stats)
        hit = np.flatnonzero(scores > 0)
        keyword = [pool[i][0] for i in hit.tolist()], scores[hit]

        def fetch(kind: Kind | None) -> ks.Legs:
            def keep(entry: Entry) -> bool:
                return (kind is None or entry.memory.kind == kind) and ks.passes_time(
                    entry.memory.event_time, opts.time_after, opts.time_before
                )

            vectors = None if near is None else _top(*near, keep, plan.pool)
            return ks.Legs(vectors, _top(*keyword, keep, plan.pool))

        fetched = {kind: fetch(kind) for kind in plan.kinds}
        return ks.rank_search(plan, fetched, opts, self.language, self._time_mentions)

    # -- cursors, claims and dead letters (the shared `ClaimTable` rules) ---------

    def get_cursor(self, user: UserKey, thread_id: str) -> ExtractionCursor | None:
        user, thread_id = _core.check_user(user), _core.check_thread_id(thread_id)
        found = self._store.one(key_of(CURSOR, user, thread_id))
        if found is None:
            return None
        pending = len(self._claims(user, thread_id).retries(user, thread_id))
        return _cursor_of(found.body).model_copy(update={"pending_retries": pending})

    def _cursor(self, user: UserKey, cursor: ExtractionCursor) -> Record:
        stamped = cursor.model_copy(update={"updated_at": _core.utcnow()})
        return Record.of(CURSOR, user, cursor.thread_id, _cursor_json(stamped))

    def set_cursor(self, user: UserKey, cursor: ExtractionCursor) -> None:
        record = self._cursor(_core.check_user(user), _core.check_cursor(cursor))
        with self._store.lock:
            self._store.commit([record])

    def _letters(self, sql: str) -> dict[str, DeadLetter]:
        found = self._store.records(f"rec = '{LETTER}' AND {sql}")
        return {d.id: d for d in (DeadLetter.model_validate_json(r.body) for r in found)}

    def _claims(self, user: UserKey, thread_id: str) -> c.ClaimTable:
        table = c.ClaimTable(self._store.lock)
        found = self._store.one(key_of(CLAIM, user, thread_id))
        if found is not None:
            table.claims[(user, thread_id)] = c._Claim(**json.loads(found.body))
        letters = self._letters(f"scope = '{scope_of(user)}'").values()
        table.letters = {d.id: d for d in letters if d.thread_id == thread_id}
        return table

    def _claimed(
        self, user: UserKey, thread_id: str, act: Callable[[c.ClaimTable], T], *extra: Record
    ) -> T:
        """`act` on the thread's claim table, then its rows (and `extra`, if `act` returns
        something true) written back in one commit."""
        with self._store.lock:
            table = self._claims(user, thread_id)
            result = act(table)
            records = [*(extra if result else ()), *map(_letter, table.letters.values())]
            claim = table.claims.get((user, thread_id))
            if claim is not None:
                records.append(Record.of(CLAIM, user, thread_id, json.dumps(asdict(claim))))
            self._store.commit(records)
            return result

    def claim_thread(
        self, user: UserKey, thread_id: str, owner: str, ttl: float
    ) -> ThreadClaim | None:
        user, (thread_id, owner) = _core.check_user(user), c.check_claim(thread_id, owner)
        seconds = c.check_ttl(ttl) or 0.0
        with self._store.lock:
            cursor = self.get_cursor(user, thread_id)
            return self._claimed(
                user, thread_id, lambda t: t.claim(user, thread_id, owner, seconds, cursor)
            )

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
        user, (thread_id, owner) = _core.check_user(user), c.check_claim(thread_id, owner)
        seconds = c.check_ttl(ttl, optional=True)
        cursor, letter, done = c.check_progress(user, thread_id, cursor, dead_letter, resolved)

        def act(t: c.ClaimTable) -> bool:
            if not t.holds(user, thread_id, owner):
                return False
            t.progress(user, thread_id, owner, seconds, letter, done, cursor is not None)
            return True

        extra = [] if cursor is None else [self._cursor(user, cursor)]
        return self._claimed(user, thread_id, act, *extra)

    def record_failure(
        self, user: UserKey, thread_id: str, owner: str, batch: str, error: str
    ) -> int:
        user, (thread_id, owner) = _core.check_user(user), c.check_claim(thread_id, owner)
        return self._claimed(
            user, thread_id, lambda t: t.failure(user, thread_id, str(batch), str(error))
        )

    def release_thread(self, user: UserKey, thread_id: str, owner: str) -> None:
        user, (thread_id, owner) = _core.check_user(user), c.check_claim(thread_id, owner)
        self._claimed(user, thread_id, lambda t: t.release(user, thread_id, owner))

    def dead_letters(
        self,
        app_name: str | None = None,
        *,
        status: DeadLetterStatus | str | None = None,
        limit: int | None = None,
    ) -> list[DeadLetter]:
        table = c.ClaimTable(letters=self._letters("true"))
        return table.listing(app_name, c.check_status(status), c.check_limit(limit))

    def retry_dead_letter(self, letter_id: str) -> DeadLetter | None:
        refh = digest(c.check_letter_id(letter_id))
        with self._store.lock:
            table = c.ClaimTable(letters=self._letters(f"refh = '{refh}'"))
            updated = table.retry(letter_id, _core.utcnow())
            if updated is not None:
                self._store.commit([_letter(updated)])
            return updated

    def close(self) -> None:
        self._states.held.clear()
