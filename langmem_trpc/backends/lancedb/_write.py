"""The LanceDB `StepExecutor`: one write plan's run over the `records` table.

The run buffers the plan's writes like a transaction: the rows it changed (as
they are now), the ids it purged, the history events it recorded. Its find steps
read the user's cached rows (the table at the cache's version) overlaid with
those pending writes, so a plan sees its own writes. At the plan's end `commit`
stores everything as one table version (an append when every row is new, else
one merge by key that also deletes what a purge removed) and only then updates
the cache; a plan that raises leaves table and cache untouched.

Steps before `LockUser` (an update's first read) take the service's lock one at a
time; from `LockUser` to the end of the plan the run holds it. `Embed` runs
outside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, cast

import numpy as np

from ...service import steps as s
from ...service.rows import MemoryRow
from ...service.rules import utcnow
from ...types import Entry, HistoryEvent, Memory, UserKey
from ._records import HISTORY, MEMORY, digest, record, scope_of
from ._rows import to_record

if TYPE_CHECKING:
    from ._host import LanceDBHost


class WriteRun:
    """One write plan's run (see the module docstring); a `StepExecutor`."""

    def __init__(self, service: LanceDBHost) -> None:
        self._service = service
        self._held = False
        self.user: UserKey | None = None
        self.changed: dict[str, MemoryRow] = {}
        """Rows this plan inserted or changed, by id, as they are now."""
        self.inserted: set[str] = set()
        self.removed: set[str] = set()
        """Ids this plan purged."""
        self.everything = False
        """The plan purged everything the user has."""
        self.events: list[HistoryEvent] = []

    def execute(self, step: s.Step) -> object:
        """Perform one step: `Embed` outside the service's lock, every other in it."""
        if type(step) is s.Embed:
            return self.embed(step)
        with self._service._lock:  # re-entrant: held already from `LockUser` on
            return s.dispatch(self, step)

    def release(self) -> None:
        if self._held:
            self._held = False
            self._service._lock.release()

    # -- the pending view: the cached rows with this plan's writes over them ------

    def _base(self, user: UserKey) -> dict[str, MemoryRow]:
        if self.user not in (None, user):
            raise RuntimeError("a write plan writes one user's rows")
        self.user = user
        return {} if self.everything else self._service._cached(user).rows

    def _row(self, user: UserKey, memory_id: str) -> MemoryRow | None:
        base = self._base(user)
        if memory_id in self.changed:
            return self.changed[memory_id]
        return None if memory_id in self.removed else base.get(memory_id)

    def _rows(self, user: UserKey) -> Iterable[MemoryRow]:
        """The user's rows as this plan sees them, in write order of the cache."""
        base = self._base(user)
        if not self.changed and not self.removed:
            return base.values()  # nothing pending (most finds): the cached rows as they are
        return self._overlaid(base)

    def _overlaid(self, base: dict[str, MemoryRow]) -> Iterator[MemoryRow]:
        for ref, row in base.items():
            if ref not in self.removed:
                yield self.changed.get(ref, row)
        # new rows, and rows purged then inserted again (a restore over an existing id)
        yield from (r for ref, r in self.changed.items() if ref not in base or ref in self.removed)

    def _edit(self, user: UserKey, ref: str) -> MemoryRow:
        """The pending copy of row `ref` (made on its first change in this plan)."""
        row = self._row(user, ref)
        if row is None:
            raise RuntimeError(f"memory {ref!r} is not a row of this plan's user")
        if ref not in self.changed:
            self.changed[ref] = row = replace(row)
        return row

    def _touch(self, row: MemoryRow, entry: Entry) -> None:
        """`entry` as the row's newest write: it takes the next place in write order."""
        row.entry, row.seq = entry, self._service._next_seq()

    # -- the steps (`StepExecutor`) -------------------------------------------------

    def now(self, step: s.Now) -> datetime:
        return utcnow()

    def embed(self, step: s.Embed) -> list[np.ndarray | None]:
        return self._service._embed_texts(step.texts)

    def lock_user(self, step: s.LockUser) -> None:
        self._base(step.user)
        if not self._held:
            self._service._lock.acquire()
            self._held = True

    def find_by_id(self, step: s.FindById) -> s.Stored | None:
        return _stored(self._row(step.user, step.memory_id))

    def find_live_by_fingerprint(self, step: s.FindLiveByFingerprint) -> s.Stored | None:
        fp, skip = step.fingerprint, step.exclude_id
        found = (r for r in self._rows(step.user) if r.fingerprint == fp and r.current)
        return _stored(next((r for r in found if r.entry.id != skip), None))

    def find_by_fingerprint(self, step: s.FindByFingerprint) -> s.Stored | None:
        same = [
            r
            for r in self._rows(step.user)
            if r.fingerprint == step.fingerprint and r.entry.superseded_by is None
        ]
        return _stored(next((r for r in same if r.live), same[0] if same else None))

    def find_predecessor(self, step: s.FindPredecessor) -> s.Stored | None:
        before = [
            r
            for r in self._rows(step.user)
            if r.live and r.entry.superseded_by == step.memory_id and r.entry.id not in step.exclude
        ]
        return _stored(max(before, key=lambda r: r.seq) if before else None)

    def known_fingerprints(self, step: s.KnownFingerprints) -> set[str]:
        return {r.fingerprint for r in self._rows(step.user)} & step.fingerprints

    def count_live(self, step: s.CountLive) -> int:
        return sum(1 for r in self._rows(step.user) if r.live)

    def insert(self, step: s.Insert) -> None:
        self._base(step.user)
        for new in step.rows:
            vector = cast("np.ndarray | None", new.vector)
            row = MemoryRow(new.entry, new.fingerprint, vector=vector, keyed=new.keyed)
            self._touch(row, new.entry)
            self.changed[new.entry.id] = row
            self.inserted.add(new.entry.id)  # a purged id stays in `removed`: its old rows go

    def rewrite(self, step: s.Rewrite) -> None:
        row = self._edit(step.user, step.target.entry.id)
        row.fingerprint, row.deleted_at = step.fingerprint, None
        if not isinstance(step.vector, s.Keep):
            row.vector = cast("np.ndarray | None", step.vector)
        if not isinstance(step.expires_at, s.Keep):
            row.entry = row.entry.model_copy(update={"expires_at": step.expires_at})
        self._rewritten(row, step.memory, step.at)

    def set_topics(self, step: s.SetTopics) -> None:
        row = self._edit(step.user, step.target.entry.id)
        memory = row.entry.memory.model_copy(update={"topics": list(step.topics)})
        self._rewritten(row, memory, step.at)

    def set_validity(self, step: s.SetValidity) -> None:
        row = self._edit(step.user, step.target.entry.id)
        fields = {"valid_to": step.valid_to, "superseded_by": step.superseded_by}
        self._touch(row, row.entry.model_copy(update={**fields, "updated_at": step.at}))

    def _rewritten(self, row: MemoryRow, memory: Memory, at: datetime) -> None:
        self._touch(row, row.entry.model_copy(update={"memory": memory, "updated_at": at}))
        row.doc = None  # text or topics changed: its keyword document is rebuilt

    def soft_delete(self, step: s.SoftDelete) -> list[s.Gone]:
        wanted = None if step.memory_ids is None else set(step.memory_ids)
        live = [r for r in self._rows(step.user) if r.live]
        victims = [r for r in live if wanted is None or r.entry.id in wanted]
        return self._delete(step.user, victims, step.at)

    def evict_oldest(self, step: s.EvictOldest) -> s.Gone | None:
        live = [r for r in self._rows(step.user) if r.live]
        gone = self._delete(step.user, [min(live, key=lambda r: r.seq)] if live else [], step.at)
        return gone[0] if gone else None

    def _delete(self, user: UserKey, victims: list[MemoryRow], at: datetime) -> list[s.Gone]:
        for victim in victims:
            self._edit(user, victim.entry.id).deleted_at = at
        return [(r.entry.id, r.entry.text) for r in victims]

    def record_history(self, step: s.RecordHistory) -> None:
        self._base(step.user)
        self.events.extend(step.events)

    def purge(self, step: s.Purge) -> int:
        if step.memory_id is None:
            removed = sum(1 for _ in self._rows(step.user))
            self.everything = True
            self.changed.clear()
            self.removed.clear()
            self.events.clear()
            return removed
        ref = step.memory_id
        found = self._row(step.user, ref)
        self.changed.pop(ref, None)
        self.removed.add(ref)
        self.events = [e for e in self.events if e.memory_id != ref]
        return 0 if found is None else 1

    # -- the end of the plan ------------------------------------------------------

    def commit(self) -> None:
        """Store the plan's writes as one table version, then update the cache."""
        user, svc = self.user, self._service
        if user is None or not (self.changed or self.events or self.removed or self.everything):
            return
        rows = [to_record(user, row) for row in self.changed.values()]
        for event in self.events:
            body = event.model_dump_json()
            rows.append(record(HISTORY, user, event.memory_id, body, seq=svc._next_seq()))
        drop = f"scope = '{scope_of(user)}'" if self.everything or self.removed else ""
        if self.removed and not self.everything:  # those memories' rows and history
            hashes = ", ".join(f"'{digest(ref)}'" for ref in sorted(self.removed))
            drop += f" AND rec IN ('{MEMORY}', '{HISTORY}') AND refh IN ({hashes})"
        fresh = not drop and self.changed.keys() <= self.inserted
        try:
            svc._write(rows, fresh, drop)  # an append, or one merge_insert that also deletes
        except BaseException:  # it may have committed (a compaction failed): reload
            svc._forget(user, threads=self.everything)
            raise
        if self.everything:
            svc._forget(user)
            return
        cached = svc._users.get(user)
        if cached is not None:
            for ref in self.removed:
                cached.rows.pop(ref, None)
            cached.rows.update(self.changed)
            cached.stale |= self.removed | self.changed.keys()


def _stored(row: MemoryRow | None) -> s.Stored | None:
    return None if row is None else row.stored()
