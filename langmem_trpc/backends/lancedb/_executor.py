"""The LanceDB step executor: performs a write plan's steps (`service/_steps.py`).

Reads go to the table and see this plan's own writes through `pending`;
writes are buffered and committed in one table version when the plan ends
(`commit`), so a plan that raises leaves nothing behind.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...service import _steps as s
from ...service._core import utcnow
from ...types import UserKey
from ._store import HISTORY, MEMORY, Record, Store, digest, key_of, scope_of, where

Embedder = Callable[[list[str]], list[Any]]


def _hex(value: str) -> str:
    if not value or any(c not in string.hexdigits for c in value):
        raise ValueError("fingerprints are hex digests")  # never spliced unchecked
    return value


class Executor:
    """One plan's executor: call it with each step, then `commit()`; always `release()`."""

    def __init__(self, store: Store, embed: Embedder) -> None:
        self.store, self.embed = store, embed
        self.pending: dict[str, Record] = {}
        self.fresh: set[str] = set()  # pending keys no stored row has
        self.purged: set[str] | None = set()  # refh digests, or None: the whole user
        self.purge_scope: str | None = None
        self.locked = False
        self._by_fp: dict[str, list[Record]] = {}

    def __call__(self, step: s.Step) -> Any:
        return getattr(self, "_" + type(step).__name__)(step)

    # -- reads: the table, minus what this plan rewrote or purged, plus `pending`

    def _hidden(self) -> str:
        hidden = [f"key IN ({', '.join(map(repr, self.pending))})"] if self.pending else []
        hidden += [f"refh IN ({', '.join(map(repr, self.purged))})"] if self.purged else []
        return f" AND NOT ({' OR '.join(hidden)})" if hidden else ""

    def _stored(self, user: UserKey, sql: str) -> list[Record]:
        if self.purged is None:
            return []
        found = self.store.records(f"{where(user, live=False)} AND {sql}")
        gone = self.purged
        return [r for r in found if r.key not in self.pending and digest(r.ref) not in gone]

    def _mine(self, user: UserKey, test: Callable[[Record], bool]) -> list[Record]:
        scope = scope_of(user)
        return [
            r for r in self.pending.values() if r.rec == MEMORY and r.scope == scope and test(r)
        ]

    def _fp(self, user: UserKey, fp: str) -> list[Record]:
        if fp not in self._by_fp:  # a fingerprint is read once per plan
            self._by_fp[fp] = self._stored(user, f"fp = '{_hex(fp)}'")
        stored = [r for r in self._by_fp[fp] if r.key not in self.pending]
        return stored + self._mine(user, lambda r: r.fp == fp)

    @staticmethod
    def _found(records: list[Record]) -> s.Stored | None:
        if not records:
            return None
        r = min(records, key=lambda r: r.seq)
        return s.Stored(r.entry, r.keyed, not r.live, r)

    def _Now(self, step: s.Now) -> Any:
        return utcnow()

    def _Embed(self, step: s.Embed) -> Any:
        return self.embed(list(step.texts))

    def _LockUser(self, step: s.LockUser) -> None:
        if not self.locked:
            self.store.lock.acquire()
            self.locked = True

    def _FindById(self, step: s.FindById) -> s.Stored | None:
        key = key_of(MEMORY, step.user, step.memory_id)
        mine = [self.pending[key]] if key in self.pending else []
        return self._found(mine or self._stored(step.user, f"key = '{key}'"))

    def _FindLiveByFingerprint(self, step: s.FindLiveByFingerprint) -> s.Stored | None:
        hits = self._fp(step.user, step.fingerprint)
        return self._found([r for r in hits if r.live and r.ref != step.exclude_id])

    def _FindDeletedByFingerprint(self, step: s.FindDeletedByFingerprint) -> s.Stored | None:
        return self._found([r for r in self._fp(step.user, step.fingerprint) if not r.live])

    def _KnownFingerprints(self, step: s.KnownFingerprints) -> set[str]:
        listed = ", ".join(f"'{_hex(fp)}'" for fp in step.fingerprints)
        found = self._stored(step.user, f"fp IN ({listed})") if listed else []
        return {r.fp for r in [*found, *self._mine(step.user, bool)] if r.fp in step.fingerprints}

    def _CountLive(self, step: s.CountLive) -> int:
        mine = len(self._mine(step.user, lambda r: r.live))
        return (
            mine
            if self.purged is None
            else self.store.count(where(step.user) + self._hidden()) + mine
        )

    # -- writes: buffered in `pending` -------------------------------------------

    def _put(self, record: Record, *, fresh: bool = False) -> None:
        if fresh and self.purged == set():  # after a purge, a new row's key may be stored
            self.fresh.add(record.key)
        self.pending[record.key] = record

    def _Insert(self, step: s.Insert) -> None:
        for row in step.rows:
            seq = self.store.next_seq()
            self._put(
                Record.memory(row.entry, row.fingerprint, row.keyed, row.vector, seq), fresh=True
            )

    def _rewrite(self, old: Record, entry: Any, fp: str, vector: Any) -> None:
        self._put(Record.memory(entry, fp, old.keyed, vector, self.store.next_seq()))

    def _Rewrite(self, step: s.Rewrite) -> None:
        old: Record = step.target.handle
        entry = step.target.entry.model_copy(update={"memory": step.memory, "updated_at": step.at})
        self._rewrite(
            old, entry, step.fingerprint, old.vector if step.vector is s.KEEP else step.vector
        )

    def _SetTopics(self, step: s.SetTopics) -> None:
        old: Record = step.target.handle
        memory = step.target.entry.memory.model_copy(update={"topics": list(step.topics)})
        entry = step.target.entry.model_copy(update={"memory": memory, "updated_at": step.at})
        self._rewrite(old, entry, old.fp or "", old.vector)

    def _live(self, user: UserKey) -> list[Record]:
        return self._stored(user, "live") + self._mine(user, lambda r: r.live)

    def _SoftDelete(self, step: s.SoftDelete) -> list[tuple[str, str]]:
        ids = None if step.memory_ids is None else set(step.memory_ids)
        hit = [r for r in self._live(step.user) if ids is None or r.ref in ids]
        for record in sorted(hit, key=lambda r: r.seq):
            self._put(replace(record, live=False))
        return [(r.ref, r.entry.text) for r in sorted(hit, key=lambda r: r.seq)]

    def _EvictOldest(self, step: s.EvictOldest) -> tuple[str, str] | None:
        rows = (
            []
            if self.purged is None
            else self.store.rows(where(step.user) + self._hidden(), ["key", "seq"])
        )
        oldest = self.store.one(min(rows, key=lambda r: r["seq"])["key"]) if rows else None
        live = [r for r in [oldest, *self._mine(step.user, lambda r: r.live)] if r is not None]
        if not live:
            return None
        record = min(live, key=lambda r: r.seq)
        self._put(replace(record, live=False))
        return record.ref, record.entry.text

    def _RecordHistory(self, step: s.RecordHistory) -> None:
        for event in step.events:
            seq = self.store.next_seq()
            key = f"{HISTORY}:{scope_of(step.user)}:{seq:020d}"
            body = event.model_dump_json()
            self._put(
                Record.of(HISTORY, step.user, event.memory_id, body, key=key, seq=seq), fresh=True
            )

    def _Purge(self, step: s.Purge) -> int:
        self.purge_scope = scope_of(step.user)
        if step.memory_id is None:
            gone = self.store.count(where(step.user, live=False)) if self.purged is not None else 0
            self.purged, self.fresh = None, set()
            self.pending.clear()
            return gone
        key = key_of(MEMORY, step.user, step.memory_id)
        gone = len(self._stored(step.user, f"key = '{key}'"))
        assert self.purged is not None
        self.purged.add(digest(step.memory_id))
        self.pending = {k: r for k, r in self.pending.items() if r.ref != step.memory_id}
        return gone

    def commit(self) -> None:
        drop = None
        if self.purge_scope is not None:
            drop = f"scope = '{self.purge_scope}'"
            if self.purged is not None:
                hashes = ", ".join(map(repr, sorted(self.purged)))
                drop += f" AND rec IN ('{MEMORY}', '{HISTORY}') AND refh IN ({hashes})"
        fresh = self.fresh.issuperset(self.pending)
        self.store.commit(self.pending.values(), fresh=fresh, drop=drop)

    def release(self) -> None:
        if self.locked:
            self.locked = False
            self.store.lock.release()
