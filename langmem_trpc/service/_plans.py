"""The write rules, written once: every write operation as a sans-I/O plan.

Each public function validates its input (raising before any step, so bad input
never opens a transaction) and returns a plan over the steps of `steps.py`.
Every backend runs the same plans with its own executor, so fingerprint
idempotence, topic merge, soft-delete revive, keyed upsert, capacity eviction,
compare-and-set updates and history behave the same everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..errors import CapacityExceededError, MemoryConflictError, MemoryNotFoundError
from ..types import (
    Entry,
    HistoryEvent,
    Memory,
    Operation,
    Source,
    UserKey,
    canonical_topics,
    check_source,
)
from ._core import (
    Limits,
    MemoryPatch,
    build_memory,
    check_items,
    check_memory_id,
    check_new_memory_id,
    check_restorable,
    check_user,
    checked_model,
    embedding_text,
    fingerprint,
    memory_from,
    new_memory_id,
    new_memory_ids,
)
from .steps import (
    KEEP,
    CountLive,
    Embed,
    EvictOldest,
    FindByFingerprint,
    FindById,
    FindLiveByFingerprint,
    Insert,
    KnownFingerprints,
    LockUser,
    NewRow,
    Now,
    Plan,
    Purge,
    RecordHistory,
    Rewrite,
    SetTopics,
    SoftDelete,
    Stored,
)

CAPACITY = Source(actor="capacity")
"""The source of an eviction's history entry."""

NOW = Now()
"""The one `Now` every plan yields: it has no fields, and building one (1.9k
instructions) per added row was waste."""


def _event(
    memory_id: str,
    op: Operation,
    before: str | None,
    after: str | None,
    source: Source | None,
    at: datetime,
) -> HistoryEvent:
    return checked_model(
        HistoryEvent, memory_id=memory_id, operation=op, text_before=before, text_after=after,
        at=at, source=source,
    )  # fmt: skip


def _new_entry(user: UserKey, memory_id: str, memory: Memory, now: datetime) -> Entry:
    return checked_model(
        Entry, id=memory_id, app_name=user.app_name, user_id=user.user_id, memory=memory,
        created_at=now, updated_at=now, score=None, rrf_score=None, expires_at=None,
    )  # fmt: skip


# --- add ---------------------------------------------------------------------


def add(
    user: UserKey,
    text: object,
    *,
    limits: Limits,
    memory_id: str | None = None,
    source: Source | None = None,
    **fields: object,
) -> Plan[Entry]:
    """Idempotent add by content fingerprint (a live duplicate gets the new topics
    merged in); explicit ids are upserts; deleted content revives under its old id."""
    user = check_user(user)
    if memory_id is not None:
        check_memory_id(memory_id)
    check_source(source)
    memory = build_memory(text, limits=limits, **fields)
    return _add(user, memory, memory_id, source, limits)


def _add(
    user: UserKey,
    memory: Memory,
    memory_id: str | None,
    source: Source | None,
    limits: Limits,
    batched: tuple[str, object] | None = None,
) -> Plan[Entry]:
    """One add. `add_many` passes the item's `batched` (fingerprint, vector), computed
    for the whole batch, from inside its write section; alone, an add embeds and enters
    the section itself (one plan, not a plan delegating to another: each level costs
    every later step a resume)."""
    if batched is None:
        fp = fingerprint(memory, memory_id)
        (vector,) = yield Embed((embedding_text(memory.text),))
        yield LockUser(user)
    else:
        fp, vector = batched
    row: Stored | None = None
    if memory_id is not None:
        row = yield FindById(user, memory_id)
    if row is None:
        row = yield FindByFingerprint(user, fp)
        if row is not None and not row.deleted:
            return (yield from _merge_topics(user, row, memory))
        if memory_id is not None:  # a new id (an existing one, even an old odd one, upserts)
            check_new_memory_id(memory_id)
    now: datetime = yield NOW
    if row is not None and not row.deleted:  # explicit id, live: upsert in place
        yield Rewrite(user, row, memory, fp, vector, now)
        event = _event(row.entry.id, Operation.UPDATE, row.entry.text, memory.text, source, now)
        yield RecordHistory(user, (event,))
        return row.entry.model_copy(update={"memory": memory, "updated_at": now})
    if limits.capacity is not None:  # no generator at all for the common case
        yield from _make_room(user, limits, now)
    if row is not None:  # revive a soft-deleted memory under its old id
        yield Rewrite(user, row, memory, fp, vector, now)
        entry = row.entry.model_copy(update={"memory": memory, "updated_at": now})
    else:
        entry = _new_entry(user, memory_id or new_memory_id(), memory, now)
        yield Insert(user, (NewRow(entry, fp, memory_id is not None, vector),))
    yield RecordHistory(user, (_event(entry.id, Operation.ADD, None, memory.text, source, now),))
    return entry


def _merge_topics(user: UserKey, live: Stored, memory: Memory) -> Plan[Entry]:
    """Idempotent re-add: merge the new topics into the live memory."""
    merged = canonical_topics([*live.entry.memory.topics, *memory.topics])
    if merged == live.entry.memory.topics:
        return live.entry
    now: datetime = yield NOW
    yield SetTopics(user, live, tuple(merged), now)
    new_memory = live.entry.memory.model_copy(update={"topics": merged})
    return live.entry.model_copy(update={"memory": new_memory, "updated_at": now})


def _make_room(user: UserKey, limits: Limits, now: datetime) -> Plan[None]:
    """The capacity policy before one more live memory: evict the oldest, or raise."""
    capacity = limits.capacity
    assert capacity is not None
    live: int = yield CountLive(user)
    if live < capacity:
        return
    if limits.on_capacity == "error":
        raise CapacityExceededError(capacity)
    evicted: tuple[str, str] | None = yield EvictOldest(user, now)
    if evicted is not None:
        event = _event(evicted[0], Operation.DELETE, evicted[1], None, CAPACITY, now)
        yield RecordHistory(user, (event,))


def add_many(
    user: UserKey,
    items: Sequence[str | Memory],
    *,
    limits: Limits,
    source: Source | None = None,
) -> Plan[list[Entry]]:
    """`add` of each item in order, in one write section (all or nothing): the
    same merge, revive and capacity rules; every text embedded in one step first.

    Content the user has nowhere (no row, live or deleted, with its fingerprint)
    with room under the capacity needs no lookups: such runs of items become one
    multi-row `Insert`. Raises on the first invalid item, before any step.
    """
    user = check_user(user)
    check_source(source)
    memories = [memory_from(item, limits=limits) for item in check_items(items)]
    return _add_many(user, memories, source, limits)


def _add_many(
    user: UserKey, memories: list[Memory], source: Source | None, limits: Limits
) -> Plan[list[Entry]]:
    if not memories:
        return []
    fps = [fingerprint(m) for m in memories]
    vectors = yield Embed(tuple(embedding_text(m.text) for m in memories))
    yield LockUser(user)
    known: set[str] = set((yield KnownFingerprints(user, frozenset(fps))))
    capacity = limits.capacity
    live: int = 0 if capacity is None else (yield CountLive(user))
    ids = iter(new_memory_ids(len(memories)))
    pending: list[NewRow] = []
    entries: list[Entry] = []
    for memory, fp, vector in zip(memories, fps, vectors, strict=True):
        if fp in known or (capacity is not None and live >= capacity):
            yield from _flush(user, pending, source)
            entries.append((yield from _add(user, memory, None, source, limits, (fp, vector))))
            if capacity is not None:
                live = yield CountLive(user)
            continue
        known.add(fp)
        now: datetime = yield NOW
        entry = _new_entry(user, next(ids), memory, now)
        pending.append(NewRow(entry, fp, False, vector))
        entries.append(entry)
        live += 1
    yield from _flush(user, pending, source)
    return entries


def _flush(user: UserKey, pending: list[NewRow], source: Source | None) -> Plan[None]:
    if not pending:
        return
    rows = tuple(pending)
    pending.clear()
    yield Insert(user, rows)
    events = tuple(
        _event(r.entry.id, Operation.ADD, None, r.entry.text, source, r.entry.created_at)
        for r in rows
    )
    yield RecordHistory(user, events)


# --- update ------------------------------------------------------------------


def update(
    user: UserKey,
    memory_id: str,
    patch: MemoryPatch,
    *,
    limits: Limits,
    source: Source | None = None,
) -> Plan[Entry]:
    """Change a memory in place (the id never changes), compare-and-set.

    The patch is applied to the memory as read and embedded outside the write
    section; if another write changed the memory meanwhile, the patch is applied
    again to the newer version inside it (embedding again only when that changes
    the embedded text), so concurrent updates of different fields all land.
    """
    user = check_user(user)
    check_memory_id(memory_id)
    check_source(source)
    patch.check(limits)
    return _update(user, memory_id, patch, source, limits)


def _update(
    user: UserKey, memory_id: str, patch: MemoryPatch, source: Source | None, limits: Limits
) -> Plan[Entry]:
    seen: Stored | None = yield FindById(user, memory_id)
    if seen is None or seen.deleted:
        raise MemoryNotFoundError(memory_id)
    memory = patch.apply(seen.entry.memory, limits)
    embedded = embedding_text(memory.text)
    vector: object = KEEP
    if embedded != embedding_text(seen.entry.memory.text):
        (vector,) = yield Embed((embedded,))
    yield LockUser(user)
    row: Stored | None = yield FindById(user, memory_id)
    if row is None or row.deleted:
        raise MemoryNotFoundError(memory_id)
    if row.entry != seen.entry:  # changed meanwhile: patch the newer version
        memory = patch.apply(row.entry.memory, limits)
        now_embedded = embedding_text(memory.text)
        if now_embedded == embedding_text(row.entry.memory.text):
            vector = KEEP
        elif now_embedded != embedded:
            (vector,) = yield Embed((now_embedded,))
    fp = fingerprint(memory, memory_id if row.keyed else None)
    clash: Stored | None = yield FindLiveByFingerprint(user, fp, exclude_id=memory_id)
    if clash is not None:
        raise MemoryConflictError(memory_id, clash.entry.id)
    now: datetime = yield NOW
    yield Rewrite(user, row, memory, fp, vector, now)
    event = _event(memory_id, Operation.UPDATE, row.entry.text, memory.text, source, now)
    yield RecordHistory(user, (event,))
    return row.entry.model_copy(update={"memory": memory, "updated_at": now})


# --- delete, clear, purge, restore -------------------------------------------


def delete(user: UserKey, memory_id: str, *, source: Source | None = None) -> Plan[bool]:
    """Soft-delete one live memory; False when there was none with that id."""
    user = check_user(user)
    check_memory_id(memory_id)
    check_source(source)
    return _delete(user, memory_id, source)


def _delete(user: UserKey, memory_id: str, source: Source | None) -> Plan[bool]:
    return (yield from _soft_delete(user, (memory_id,), Operation.DELETE, source)) > 0


def clear(user: UserKey, *, source: Source | None = None) -> Plan[int]:
    """Soft-delete every live memory of the user; returns how many."""
    user = check_user(user)
    check_source(source)
    return _soft_delete(user, None, Operation.CLEAR, source)


def _soft_delete(
    user: UserKey, ids: tuple[str, ...] | None, op: Operation, source: Source | None
) -> Plan[int]:
    yield LockUser(user)
    now: datetime = yield NOW
    gone: list[tuple[str, str]] = yield SoftDelete(user, ids, now)
    if gone:
        yield RecordHistory(user, tuple(_event(i, op, t, None, source, now) for i, t in gone))
    return len(gone)


def purge(user: UserKey, memory_id: str | None = None) -> Plan[int]:
    """Remove one memory, or everything the user has, for good; returns rows removed."""
    user = check_user(user)
    if memory_id is not None:
        check_new_memory_id(memory_id)
    return _purge(user, memory_id)


def _purge(user: UserKey, memory_id: str | None) -> Plan[int]:
    yield LockUser(user)
    removed: int = yield Purge(user, memory_id)
    return removed


def undelete(
    user: UserKey, memory_id: str, *, limits: Limits, source: Source | None = None
) -> Plan[Entry]:
    """Bring a soft-deleted memory back as it was (every field, same id), recorded
    as a restore; a live one is returned as it is."""
    user = check_user(user)
    check_memory_id(memory_id)
    check_source(source)
    return _undelete(user, memory_id, source, limits)


def _undelete(user: UserKey, memory_id: str, source: Source | None, limits: Limits) -> Plan[Entry]:
    seen: Stored | None = yield FindById(user, memory_id)
    if seen is None:
        raise MemoryNotFoundError(memory_id)
    if not seen.deleted:
        return seen.entry
    memory = seen.entry.memory
    (vector,) = yield Embed((embedding_text(memory.text),))  # outside the write section
    yield LockUser(user)
    row: Stored | None = yield FindById(user, memory_id)
    if row is None:
        raise MemoryNotFoundError(memory_id)
    if not row.deleted:
        return row.entry
    if row.entry.memory.text != memory.text:  # revived, edited and deleted meanwhile
        raise MemoryConflictError(memory_id, memory_id, concurrent=True)
    memory = row.entry.memory
    fp = fingerprint(memory, memory_id if row.keyed else None)
    clash: Stored | None = yield FindLiveByFingerprint(user, fp, memory_id)
    if clash is not None:
        raise MemoryConflictError(memory_id, clash.entry.id)
    now: datetime = yield NOW
    if limits.capacity is not None:
        yield from _make_room(user, limits, now)
    yield Rewrite(user, row, memory, fp, vector, now)
    event = _event(memory_id, Operation.RESTORE, None, memory.text, source, now)
    yield RecordHistory(user, (event,))
    return row.entry.model_copy(update={"updated_at": now})


def restore(user: UserKey, entry: Entry, history: Sequence[HistoryEvent] = ()) -> Plan[Entry]:
    """Write an exported entry back exactly (id, timestamps, content, expiry) with its
    history, replacing any memory with that id. If another live memory holds the
    same content, the restored one keeps its own identity (its fingerprint includes its id)."""
    user = check_user(user)
    entry = check_restorable(entry, history).model_copy(
        update={
            "app_name": user.app_name,
            "user_id": user.user_id,
            "score": None,
            "rrf_score": None,
        }
    )
    events = tuple(h.model_copy(update={"memory_id": entry.id}) for h in history)
    return _restore(user, entry, events)


def _restore(user: UserKey, entry: Entry, events: tuple[HistoryEvent, ...]) -> Plan[Entry]:
    (vector,) = yield Embed((embedding_text(entry.memory.text),))
    yield LockUser(user)
    yield Purge(user, entry.id)
    clash: Stored | None = yield FindLiveByFingerprint(user, fingerprint(entry.memory))
    keyed = clash is not None
    fp = fingerprint(entry.memory, entry.id if keyed else None)
    yield Insert(user, (NewRow(entry, fp, keyed, vector),))
    if events:
        yield RecordHistory(user, events)
    return entry
