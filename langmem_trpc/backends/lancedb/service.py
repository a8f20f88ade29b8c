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
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

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
    Entry,
    ExtractionCursor,
    HistoryEvent,
    Kind,
    SearchOptions,
    UserKey,
)
from ..sqlite._scoring import score_candidates
from . import _store as st
from ._executor import Executor
from ._state import STATE_ROWS, States

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


def _letter(letter: DeadLetter) -> st.Record:
    key = f"{st.LETTER}:{st.digest(letter.id)}"
    return st.Record.of(st.LETTER, letter.user, letter.id, letter.model_dump_json(), key=key)


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
        state_rows: memory rows of the users read last kept in memory (their rows,
            keyword documents and vectors), past which the least recently used are dropped.

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
        state_rows: int = STATE_ROWS,
    ) -> None:
        self.language = resolve_language(language)
        self._embeddings = embeddings
        self._limits = limits or _core.Limits()
        if embeddings is not None and dims is None:
            dims = len(embeddings.embed_query("dimension probe"))
        self._store = st.Store(path, None if embeddings is None else dims)
        self._states = States(self._store, self.language, state_rows)
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
            with self._store.lock:  # held already unless the plan ended before `LockUser`
                executor.commit()
            return result
        finally:
            executor.release()

    # -- reads: the user's state ------------------------------------------------

    def _live(self, user: UserKey, expired: bool = False) -> list[Entry]:
        """The user's live entries whose expiry has (or, by default, has not) passed."""
        with self._store.lock:
            state = self._states.get(_core.check_user(user))
            entries = [state.entries[ref] for ref in state.live]
        now = _core.utcnow()
        return [e for e in entries if _core.is_expired(e, now) == expired]

    def get(self, user: UserKey, memory_id: str) -> Entry | None:
        memory_id = _core.check_memory_id(memory_id)
        with self._store.lock:
            state = self._states.get(_core.check_user(user))
            entry = state.entries[memory_id] if memory_id in state.live else None
        return entry if entry is not None and not _core.is_expired(entry) else None

    def read(self, user: UserKey, limit: int | None = None) -> list[Entry]:
        entries = self._live(user)
        entries.sort(key=lambda e: (e.updated_at, e.created_at, e.id), reverse=True)
        return entries[:limit] if limit is not None and limit > 0 else entries

    def count(self, user: UserKey) -> int:
        with self._store.lock:
            return len(self._states.get(_core.check_user(user)).live)

    def users(self, app_name: str | None = None) -> list[UserKey]:
        app = _core.check_app_filter(app_name)
        rows = self._store.rows(f"rec = '{st.MEMORY}' AND live", ["app", "user"])
        keys = {(r["app"], r["user"]) for r in rows if app is None or r["app"] == app}
        return [UserKey(a, u) for a, u in sorted(keys)]

    def history(self, user: UserKey, memory_id: str) -> list[HistoryEvent]:
        refh = st.digest(_core.check_memory_id(memory_id))
        sql = f"{st.where(_core.check_user(user), st.HISTORY, live=False)} AND refh = '{refh}'"
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
            record = st.Record.memory(entry, found.fp or "", found.keyed, found.vector, found.seq)
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
                    records.append(
                        st.Record.of(st.CLAIM, user, thread_id, json.dumps(asdict(claim)))
                    )
                for cursor in table.cursors.values():
                    records.append(st.Record.of(st.CURSOR, user, thread_id, _cursor_json(cursor)))
                self._store.commit(records)
            return result

    def _admin(self, op: c.ListDeadLetters | c.RetryDeadLetter) -> Any:
        """An admin call across users, on a table of the dead letters it reads."""
        retry = op.letter_id if isinstance(op, c.RetryDeadLetter) else None
        sql = "true" if retry is None else f"refh = '{st.digest(retry)}'"
        table = c.ClaimTable(self._store.lock, letters=self._letters(sql))
        result = table.apply(op)
        if retry is not None and result is not None:
            self._store.commit([_letter(table.letters[retry])])
        return result

    def _letters(self, sql: str) -> dict[str, DeadLetter]:
        found = self._store.records(f"rec = '{st.LETTER}' AND {sql}")
        return {d.id: d for d in (DeadLetter.model_validate_json(r.body) for r in found)}

    def _claims(self, user: UserKey, thread_id: str) -> c.ClaimTable:
        """A table with the thread's cursor, claim and dead letters."""
        table = c.ClaimTable(self._store.lock)
        cursor = self._store.one(st.key_of(st.CURSOR, user, thread_id))
        if cursor is not None:
            table.cursors[(user, thread_id)] = _cursor_of(cursor.body)
        claim = self._store.one(st.key_of(st.CLAIM, user, thread_id))
        if claim is not None:
            table.claims[(user, thread_id)] = c.Claim(**json.loads(claim.body))
        letters = self._letters(f"scope = '{st.scope_of(user)}'").values()
        table.letters = {d.id: d for d in letters if d.thread_id == thread_id}
        return table

    def close(self) -> None:
        self._states.held.clear()
