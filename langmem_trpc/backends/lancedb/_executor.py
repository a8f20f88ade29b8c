"""The LanceDB step executor: runs a write plan's steps (`service/_steps.py`).

Reads go to the table and see this plan's own writes through `pending`;
writes are buffered and committed in one table version when the plan ends
(`commit`), so a plan that raises leaves nothing behind.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from ...service import _steps as s
from ...service._core import utcnow
from ...service.memory import unit_vector
from ...types import UserKey
from ._store import HISTORY, MEMORY, Record, Store, digest, key_of, memory_record, scope_of

Embedder = Callable[[list[str]], list[np.ndarray | None]]


def _hex(value: str) -> str:
    if not value or any(c not in string.hexdigits for c in value):
        raise ValueError("fingerprints are hex digests")  # never spliced unchecked
    return value


class Executor:
    """One write plan's executor; `release()` must follow, `commit()` keeps its writes."""

    def __init__(self, store: Store, embed: Embedder) -> None:
        self.store, self.embed = store, embed
        self.pending: dict[str, Record] = {}
        self.purged: set[str] | None = set()  # refh digests, or None: the whole user
        self.purge_scope: str | None = None
        self.locked = False

    def __call__(self, step: s.Step) -> Any:
        method = getattr(self, "_" + type(step).__name__)
        return method(step)

    # -- reads ------------------------------------------------------------

    def _memories(self, user: UserKey, sql: str, test: Callable[[Record], bool]) -> list[Record]:
        scope = scope_of(user)
        found = [
            r
            for r in self.store.records(f"rec = '{MEMORY}' AND scope = '{scope}' AND {sql}")
            if r.key not in self.pending and not self._gone(r)
        ]
        mine = [r for r in self.pending.values() if r.rec == MEMORY and r.scope == scope]
        return found + [r for r in mine if test(r)]

    def _gone(self, record: Record) -> bool:
        return self.purged is None or digest(record.ref) in self.purged

    def _stored(self, record: Record | None) -> s.Stored | None:
        if record is None:
            return None
        return s.Stored(record.entry, record.keyed, not record.live, record)

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
        hits = self._memories(step.user, f"key = '{key}'", lambda r: r.key == key)
        return self._stored(hits[0] if hits else None)

    def _FindLiveByFingerprint(self, step: s.FindLiveByFingerprint) -> s.Stored | None:
        fp = _hex(step.fingerprint)
        hits = self._memories(step.user, f"live AND fp = '{fp}'", lambda r: r.live and r.fp == fp)
        hits = [r for r in hits if r.live and r.ref != step.exclude_id]
        return self._stored(min(hits, key=lambda r: r.seq) if hits else None)

    def _FindDeletedByFingerprint(self, step: s.FindDeletedByFingerprint) -> s.Stored | None:
        fp = _hex(step.fingerprint)
        hits = self._memories(step.user, f"NOT live AND fp = '{fp}'", lambda r: r.fp == fp)
        hits = [r for r in hits if not r.live]
        return self._stored(min(hits, key=lambda r: r.seq) if hits else None)

    def _KnownFingerprints(self, step: s.KnownFingerprints) -> set[str]:
        if not step.fingerprints:
            return set()
        listed = ", ".join(f"'{_hex(fp)}'" for fp in step.fingerprints)
        hits = self._memories(step.user, f"fp IN ({listed})", lambda r: True)
        return {r.fp for r in hits if r.fp in step.fingerprints}

    def _live(self, user: UserKey) -> list[Record]:
        return [r for r in self._memories(user, "live", lambda r: r.live) if r.live]

    def _mine(self, user: UserKey) -> list[Record]:
        scope = scope_of(user)
        return [r for r in self.pending.values() if r.rec == MEMORY and r.scope == scope and r.live]

    def _unseen(self) -> str:
        """SQL excluding the rows this plan rewrote or purged (they are read from `pending`)."""
        hidden = [f"key IN ({', '.join(repr(k) for k in self.pending)})"] if self.pending else []
        hidden += (
            [f"refh IN ({', '.join(repr(h) for h in self.purged or ())})"] if self.purged else []
        )
        return f" AND NOT ({' OR '.join(hidden)})" if hidden else ""

    def _CountLive(self, step: s.CountLive) -> int:
        if self.purged is None:
            return len(self._mine(step.user))
        where = f"rec = '{MEMORY}' AND scope = '{scope_of(step.user)}' AND live"
        return self.store.count(where + self._unseen()) + len(self._mine(step.user))

    # -- writes (buffered) --------------------------------------------------

    def _put(self, record: Record) -> None:
        self.pending[record.key] = record

    def _Insert(self, step: s.Insert) -> None:
        for row in step.rows:
            seq = self.store.next_seq()
            self._put(
                memory_record(
                    row.entry, row.fingerprint, keyed=row.keyed, vector=row.vector, seq=seq
                )
            )

    def _Rewrite(self, step: s.Rewrite) -> None:
        old: Record = step.target.handle
        entry = step.target.entry.model_copy(update={"memory": step.memory, "updated_at": step.at})
        vector = old.vector if step.vector is s.KEEP else step.vector
        new = memory_record(entry, step.fingerprint, keyed=old.keyed, vector=vector)
        self._put(replace(new, seq=self.store.next_seq()))

    def _SetTopics(self, step: s.SetTopics) -> None:
        old: Record = step.target.handle
        memory = step.target.entry.memory.model_copy(update={"topics": list(step.topics)})
        entry = step.target.entry.model_copy(update={"memory": memory, "updated_at": step.at})
        new = memory_record(entry, old.fp or "", keyed=old.keyed, vector=old.vector)
        self._put(replace(new, seq=self.store.next_seq()))

    def _SoftDelete(self, step: s.SoftDelete) -> list[tuple[str, str]]:
        live = self._live(step.user)
        ids = None if step.memory_ids is None else set(step.memory_ids)
        hit = sorted((r for r in live if ids is None or r.ref in ids), key=lambda r: r.seq)
        for record in hit:
            self._put(replace(record, live=False))
        return [(r.ref, r.entry.text) for r in hit]

    def _EvictOldest(self, step: s.EvictOldest) -> tuple[str, str] | None:
        where = f"rec = '{MEMORY}' AND scope = '{scope_of(step.user)}' AND live" + self._unseen()
        rows = [] if self.purged is None else self.store.rows(where, ["key", "seq"])
        stored = [self.store.one(min(rows, key=lambda r: r["seq"])["key"])] if rows else []
        live = [r for r in [*stored, *self._mine(step.user)] if r is not None]
        if not live:
            return None
        oldest = min(live, key=lambda r: r.seq)
        self._put(replace(oldest, live=False))
        return oldest.ref, oldest.entry.text

    def _RecordHistory(self, step: s.RecordHistory) -> None:
        user, scope = step.user, scope_of(step.user)
        for event in step.events:
            seq = self.store.next_seq()
            self._put(
                Record(
                    key=f"{HISTORY}:{scope}:{seq:020d}",
                    rec=HISTORY,
                    scope=scope,
                    app=user.app_name,
                    user=user.user_id,
                    ref=event.memory_id,
                    body=event.model_dump_json(),
                    seq=seq,
                )
            )

    def _Purge(self, step: s.Purge) -> int:
        scope = scope_of(step.user)
        self.purge_scope = scope
        if step.memory_id is None:
            gone = len(self._memories(step.user, "true", lambda r: True))
            self.purged = None
            self.pending.clear()
            return gone
        refh = digest(step.memory_id)
        key = key_of(MEMORY, step.user, step.memory_id)
        gone = len(self._memories(step.user, f"key = '{key}'", lambda r: r.key == key))
        assert self.purged is not None
        self.purged.add(refh)
        for k in [k for k, r in self.pending.items() if r.ref == step.memory_id]:
            del self.pending[k]
        return gone

    # -- end of plan -------------------------------------------------------

    def commit(self) -> None:
        drop = None
        if self.purge_scope is not None:
            drop = f"scope = '{self.purge_scope}'"
            if self.purged is not None:
                hashes = ", ".join(f"'{h}'" for h in sorted(self.purged))
                drop += f" AND rec IN ('{MEMORY}', '{HISTORY}') AND refh IN ({hashes})"
        if self.pending or drop is not None:
            self.store.commit(self.pending.values(), drop=drop)

    def release(self) -> None:
        if self.locked:
            self.locked = False
            self.store.lock.release()


def make_embedder(embeddings: Any) -> Embedder:
    def embed(texts: list[str]) -> list[np.ndarray | None]:
        if embeddings is None:
            return [None] * len(texts)
        return [unit_vector(v) for v in embeddings.embed_documents(texts)]

    return embed
