"""The LanceDB step executor: performs a write plan's steps (`service/_steps.py`).

Reads answer from the user's state (`_state.py`, every memory row of the user)
with this plan's own writes laid over it (`pending`: a memory id's new row, or
None once purged). Writes are buffered and committed in one table version when
the plan ends (`commit`), then applied to the state: a plan that raises leaves
nothing behind, in the table or the state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...service import _steps as s
from ...service._core import utcnow
from ...types import UserKey
from ._state import States, UserState
from ._store import HISTORY, MEMORY, Record, Store, digest, scope_of

Embedder = Callable[[list[str]], list[Any]]


class Executor:
    """One plan's executor: call it with each step, then `commit()`; always `release()`."""

    def __init__(self, store: Store, states: States, embed: Embedder) -> None:
        self.store, self.states, self.embed = store, states, embed
        self.user: UserKey | None = None
        self.pending: dict[str, Record | None] = {}
        self.history: list[Record] = []
        self.purged: set[str] = set()
        self.wiped = self.locked = False  # wiped: a purge of the whole user

    def __call__(self, step: s.Step) -> Any:
        if isinstance(step, s.Now):
            return utcnow()
        if isinstance(step, s.Embed):
            return self.embed(list(step.texts))
        with self.store.lock:  # held from `LockUser` on; one step at a time before it
            self.user = step.user
            return getattr(self, "_" + type(step).__name__)(step)

    @property
    def _state(self) -> UserState:
        assert self.user is not None
        return self.states.get(self.user)

    def _row(self, ref: str) -> Record | None:
        return self.pending[ref] if ref in self.pending else self._state.rows.get(ref)

    def _rows(self) -> list[Record]:
        """Every memory row of the user, as this plan sees them."""
        stored = [r for r in self._state.rows if r not in self.pending]
        return [r for r in map(self._row, [*stored, *self.pending]) if r is not None]

    def _by_fp(self, fp: str) -> list[Record]:
        refs = set(self._state.by_fp.get(fp, ()))
        refs |= {ref for ref, r in self.pending.items() if r is not None and r.fp == fp}
        return [r for r in map(self._row, refs) if r is not None and r.fp == fp]

    @staticmethod
    def _found(records: list[Record]) -> s.Stored | None:
        if not records:
            return None
        r = min(records, key=lambda r: r.seq)
        return s.Stored(r.entry, r.keyed, not r.live, r)

    def _LockUser(self, step: s.LockUser) -> None:
        if not self.locked:
            self.store.lock.acquire()
            self.locked = True

    def _FindById(self, step: s.FindById) -> s.Stored | None:
        return self._found([r for r in [self._row(step.memory_id)] if r is not None])

    def _FindLiveByFingerprint(self, step: s.FindLiveByFingerprint) -> s.Stored | None:
        hits = self._by_fp(step.fingerprint)
        return self._found([r for r in hits if r.live and r.ref != step.exclude_id])

    def _FindDeletedByFingerprint(self, step: s.FindDeletedByFingerprint) -> s.Stored | None:
        return self._found([r for r in self._by_fp(step.fingerprint) if not r.live])

    def _KnownFingerprints(self, step: s.KnownFingerprints) -> set[str]:
        return {fp for fp in step.fingerprints if self._by_fp(fp)}

    def _CountLive(self, step: s.CountLive) -> int:
        live = len(self._state.live)
        for ref, row in self.pending.items():
            old = self._state.rows.get(ref)
            live += bool(row and row.live) - bool(old and old.live)
        return live

    # -- writes: buffered in `pending` -------------------------------------------

    def _Insert(self, step: s.Insert) -> None:
        for row in step.rows:
            seq = self.store.next_seq()
            record = Record.memory(row.entry, row.fingerprint, row.keyed, row.vector, seq)
            self.pending[record.ref] = record

    def _Rewrite(self, step: s.Rewrite) -> None:
        old: Record = step.target.handle
        entry = step.target.entry.model_copy(update={"memory": step.memory, "updated_at": step.at})
        vector = old.vector if step.vector is s.KEEP else step.vector
        seq = self.store.next_seq()
        self.pending[old.ref] = Record.memory(entry, step.fingerprint, old.keyed, vector, seq)

    def _SetTopics(self, step: s.SetTopics) -> None:
        memory = step.target.entry.memory.model_copy(update={"topics": list(step.topics)})
        fp = step.target.handle.fp or ""
        self._Rewrite(s.Rewrite(step.user, step.target, memory, fp, s.KEEP, step.at))

    def _delete(self, rows: list[Record]) -> list[tuple[str, str]]:
        for row in rows:
            self.pending[row.ref] = replace(row, live=False)
        return [(r.ref, r.entry.text) for r in rows]

    def _SoftDelete(self, step: s.SoftDelete) -> list[tuple[str, str]]:
        if step.memory_ids is None:
            rows = sorted((r for r in self._rows() if r.live), key=lambda r: r.seq)
        else:
            found = map(self._row, dict.fromkeys(step.memory_ids))
            rows = [r for r in found if r is not None and r.live]
        return self._delete(rows)

    def _EvictOldest(self, step: s.EvictOldest) -> tuple[str, str] | None:
        live = [r for r in self._rows() if r.live]
        return self._delete([min(live, key=lambda r: r.seq)])[0] if live else None

    def _RecordHistory(self, step: s.RecordHistory) -> None:
        for event in step.events:
            seq = self.store.next_seq()
            key = f"{HISTORY}:{scope_of(step.user)}:{seq:020d}"
            body = event.model_dump_json()
            self.history.append(
                Record.of(HISTORY, step.user, event.memory_id, body, key=key, seq=seq)
            )

    def _Purge(self, step: s.Purge) -> int:
        refs = [r.ref for r in self._rows()] if step.memory_id is None else [step.memory_id]
        gone = sum(self._row(ref) is not None for ref in refs)
        self.pending |= dict.fromkeys(refs)
        self.purged |= set(refs)
        self.wiped |= step.memory_id is None
        self.history = [h for h in self.history if h.ref not in refs and not self.wiped]
        return gone

    def commit(self) -> None:
        """Write the plan's rows in one table version, then mirror them in the state."""
        if self.user is None:
            return
        scope, state = scope_of(self.user), self._state
        drop = f"scope = '{scope}'" if self.purged or self.wiped else None
        if drop is not None and not self.wiped:  # one memory: its row and history
            hashes = ", ".join(f"'{digest(ref)}'" for ref in sorted(self.purged))
            drop += f" AND rec IN ('{MEMORY}', '{HISTORY}') AND refh IN ({hashes})"
        records = [*(r for r in self.pending.values() if r is not None), *self.history]
        fresh = not any(ref in state.rows for ref in self.pending)
        self.store.commit(records, fresh=fresh, drop=drop)
        for ref, row in self.pending.items():
            if row is None:
                state.drop(ref)
            else:
                state.put(row)

    def release(self) -> None:
        if self.locked:
            self.locked = False
            self.store.lock.release()
