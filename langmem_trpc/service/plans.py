"""The write rules, written once: every write operation as a sans-I/O plan.

Each public function validates its input (raising before any step, so bad input
never opens a transaction) and returns a plan over the steps of `steps.py`.
Every backend runs the same plans with its own executor, so fingerprint
idempotence, topic merge, soft-delete revive, keyed upsert, capacity eviction,
compare-and-set updates, validity and supersede (`service/validity.py`) and
history behave the same everywhere.

A version chain is linked by `superseded_by`: closing a version sets its
`valid_to` and names the newer one; at most one row per fingerprint is current
(not superseded), so a plan closes a row before it opens another with the same
content.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..errors import (
    CapacityExceededError,
    InvalidInputError,
    MemoryConflictError,
    MemoryNotFoundError,
)
from ..types import (
    Entry,
    HistoryEvent,
    Kind,
    Memory,
    Operation,
    Source,
    UserKey,
    canonical_topics,
    check_source,
)
from .rules import (
    Limits,
    MemoryPatch,
    build_memory,
    check_flag,
    check_items,
    check_memory_id,
    check_new_memory_id,
    check_restorable,
    check_user,
    check_valid_until,
    check_validity,
    checked_model,
    embedding_text,
    fingerprint,
    memory_from,
    new_memory_id,
    new_memory_ids,
    unexpired,
    utcnow,
)
from .steps import (
    KEEP,
    CountLive,
    Embed,
    EvictOldest,
    FindByFingerprint,
    FindById,
    FindLiveByFingerprint,
    FindPredecessor,
    Insert,
    Keep,
    KnownFingerprints,
    LockUser,
    NewRow,
    Now,
    Plan,
    Purge,
    RecordHistory,
    Rewrite,
    SetTopics,
    SetValidity,
    SoftDelete,
    Stored,
)

__all__ = [
    "CAPACITY",
    "NOW",
    "OPEN",
    "Validity",
    "add",
    "add_many",
    "clear",
    "delete",
    "purge",
    "restore",
    "restore_version",
    "undelete",
    "update",
    "versions",
]

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
        HistoryEvent,
        memory_id=memory_id,
        operation=op,
        text_before=before,
        text_after=after,
        at=at,
        source=source,
    )


@dataclass(frozen=True, slots=True)
class Validity:
    """A write's business time as given (`check_validity`): `start` (None: the event
    time, else the write time) and `until` (None: open, true until superseded)."""

    start: datetime | None = None
    until: datetime | None = None


OPEN = Validity()
"""No business time given: the defaults (what `add_many` items and old callers get)."""


def _new_entry(
    user: UserKey, memory_id: str, memory: Memory, now: datetime, validity: Validity = OPEN
) -> Entry:
    return checked_model(
        Entry,
        id=memory_id,
        app_name=user.app_name,
        user_id=user.user_id,
        memory=memory,
        created_at=now,
        updated_at=now,
        score=None,
        rrf_score=None,
        expires_at=None,
        valid_from=validity.start or memory.event_time or now,
        valid_to=validity.until,
        superseded_by=None,
    )


# --- add ---------------------------------------------------------------------


def add(
    user: UserKey,
    text: object,
    *,
    limits: Limits,
    memory_id: str | None = None,
    source: Source | None = None,
    valid_from: object = None,
    valid_until: object = None,
    **fields: object,
) -> Plan[Entry]:
    """Idempotent add by content fingerprint (a live duplicate gets the new topics
    merged in); explicit ids are upserts; deleted content revives under its old id.

    `valid_from` defaults to the event time, else the write time; `valid_until`
    becomes `valid_to`. Content whose held version lapsed gets a new version.
    """
    user = check_user(user)
    if memory_id is not None:
        check_memory_id(memory_id)
    check_source(source)
    memory = build_memory(text, limits=limits, **fields)
    start, until = check_validity(valid_from, valid_until, memory.event_time or utcnow())
    return _add(user, memory, memory_id, source, limits, Validity(start, until))


def _add(
    user: UserKey,
    memory: Memory,
    memory_id: str | None,
    source: Source | None,
    limits: Limits,
    validity: Validity = OPEN,
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
            return (yield from _readd(user, row, memory, (fp, vector), source, limits, validity))
        if memory_id is not None:  # a new id (an existing one, even an old odd one, upserts)
            check_new_memory_id(memory_id)
    now: datetime = yield NOW
    if row is not None and not row.deleted:  # explicit id, live: upsert in place
        yield Rewrite(user, row, memory, fp, vector, now)
        event = _event(row.entry.id, Operation.UPDATE, row.entry.text, memory.text, source, now)
        yield RecordHistory(user, (event,))
        entry = row.entry.model_copy(update={"memory": memory, "updated_at": now})
        return (yield from _set_until(user, row, entry, validity.until, now))
    if limits.capacity is not None:  # no generator at all for the common case
        yield from _make_room(user, limits, now)
    if row is not None and (memory_id is not None or not _lapsed(row.entry, now)):
        entry = yield from _revive(user, row, memory, (fp, vector), now)  # under its old id
        entry = yield from _set_until(user, row, entry, validity.until, now)
    else:  # new content, or deleted content whose validity lapsed: a new memory
        entry = _new_entry(user, memory_id or new_memory_id(), memory, now, validity)
        check_valid_until(validity.until, entry.valid_from)
        yield Insert(user, (NewRow(entry, fp, memory_id is not None, vector),))
    yield RecordHistory(user, (_event(entry.id, Operation.ADD, None, memory.text, source, now),))
    return entry


def _lapsed(entry: Entry, now: datetime) -> bool:
    """Whether the entry's business time ended (a `valid_to` at or before `now`)."""
    return entry.valid_to is not None and entry.valid_to <= now


def _revive(
    user: UserKey, row: Stored, memory: Memory, fp_vector: tuple[str, object], now: datetime
) -> Plan[Entry]:
    """Bring a soft-deleted row back with `memory`; an expiry that has passed is
    cleared, or the re-added content would come back hidden by its old TTL."""
    fp, vector = fp_vector
    expiry = row.entry.expires_at
    cleared = expiry is not None and expiry <= now
    yield Rewrite(user, row, memory, fp, vector, now, None if cleared else KEEP)
    update: dict[str, object] = {"memory": memory, "updated_at": now}
    if cleared:
        update["expires_at"] = None
    return row.entry.model_copy(update=update)


def _set_until(
    user: UserKey, row: Stored, entry: Entry, until: datetime | None, now: datetime
) -> Plan[Entry]:
    """Record a said end of validity (`valid_until`) on a held row: `entry`, updated."""
    if until is None or until == entry.valid_to:
        return entry
    check_valid_until(until, entry.valid_from)
    yield SetValidity(user, row, until, entry.superseded_by, now)
    return entry.model_copy(update={"valid_to": until, "updated_at": now})


def _readd(
    user: UserKey,
    live: Stored,
    memory: Memory,
    fp_vector: tuple[str, object],
    source: Source | None,
    limits: Limits,
    validity: Validity,
) -> Plan[Entry]:
    """Content the user holds, added again: merge the topics in (and record a said
    `valid_until`); if the held version's validity lapsed, a new version replaces it."""
    if live.entry.valid_to is None and validity.until is None:  # the common case
        return (yield from _merge_topics(user, live, memory))
    now: datetime = yield NOW
    if _lapsed(live.entry, now):
        return (yield from _renew(user, live, memory, fp_vector, source, limits, validity, now))
    entry = yield from _merge_topics(user, live, memory, now)
    return (yield from _set_until(user, live, entry, validity.until, now))


def _renew(
    user: UserKey,
    lapsed: Stored,
    memory: Memory,
    fp_vector: tuple[str, object],
    source: Source | None,
    limits: Limits,
    validity: Validity,
    now: datetime,
) -> Plan[Entry]:
    """Content true again after its validity lapsed: the lapsed row is closed
    (`valid_to` kept: the gap is a time it was not true) and linked to a new version."""
    old = lapsed.entry
    assert old.valid_to is not None
    start = validity.start or max(memory.event_time or now, old.valid_to)
    check_valid_until(validity.until, start)
    topics = canonical_topics([*old.memory.topics, *memory.topics])
    memory = memory.model_copy(update={"topics": topics})
    entry = _new_entry(user, new_memory_id(), memory, now, Validity(start, validity.until))
    yield SetValidity(user, lapsed, old.valid_to, entry.id, now)  # before the twin's insert
    if limits.capacity is not None:
        yield from _make_room(user, limits, now)
    yield Insert(user, (NewRow(entry, fp_vector[0], False, fp_vector[1]),))
    yield RecordHistory(user, _supersede_events(old, entry, source, now))
    return entry


def _supersede_events(
    old: Entry, new: Entry, source: Source | None, now: datetime
) -> tuple[HistoryEvent, ...]:
    """A supersede in history: SUPERSEDE on the closed version, ADD on the new one."""
    return (
        _event(old.id, Operation.SUPERSEDE, old.text, new.text, source, now),
        _event(new.id, Operation.ADD, None, new.text, source, now),
    )


def _merge_topics(
    user: UserKey, live: Stored, memory: Memory, now: datetime | None = None
) -> Plan[Entry]:
    """Idempotent re-add: merge the new topics into the live memory."""
    merged = canonical_topics([*live.entry.memory.topics, *memory.topics])
    if merged == live.entry.memory.topics:
        return live.entry
    if now is None:
        now = yield NOW
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
    An item carries no business time: each gets the defaults of `add`.

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
            entry = yield from _add(user, memory, None, source, limits, OPEN, (fp, vector))
            entries.append(entry)
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


# --- update and supersede ----------------------------------------------------


def update(
    user: UserKey,
    memory_id: str,
    patch: MemoryPatch,
    *,
    limits: Limits,
    source: Source | None = None,
    supersede: object = False,
    valid_from: object = None,
    valid_until: object = None,
    keyed_versions: bool = False,
) -> Plan[Entry]:
    """Change a memory in place (the id never changes), compare-and-set; with
    `supersede=True` and a content change, close it and add the new version.
    A keyed memory (added under a caller-chosen id) is refused a supersede: its
    key would name the closed version. `keyed_versions=True` allows it for a
    caller that follows `superseded_by` from the key itself (`MemoryStore`).

    The patch is applied to the memory as read and embedded outside the write
    section; if another write changed the memory meanwhile, the patch is applied
    again to the newer version inside it (embedding again only when that changes
    the embedded text), so concurrent updates of different fields all land.
    """
    user = check_user(user)
    check_memory_id(memory_id)
    check_source(source)
    patch.check(limits)
    superseding = check_flag("supersede", supersede)
    start, until = check_validity(valid_from, valid_until)
    if start is not None and not superseding:
        raise InvalidInputError(
            "valid_from", "is the start of a new version: pass it with supersede=True"
        )
    if superseding and patch.kind is not None and _is_episode(patch.kind):
        raise _episode_refused()
    change = _Change(patch, superseding, Validity(start, until), keyed_versions)
    return _update(user, memory_id, change, source, limits)


@dataclass(frozen=True, slots=True)
class _Change:
    """An update's request: the patch, whether it supersedes, the business time given,
    whether a keyed memory may be superseded."""

    patch: MemoryPatch
    supersede: bool
    validity: Validity
    keyed_versions: bool = False


def _is_episode(kind: object) -> bool:
    value = kind.value if isinstance(kind, Kind) else str(kind).strip().lower()
    return value == Kind.EPISODE.value


def _episode_refused() -> InvalidInputError:
    return InvalidInputError(
        "supersede",
        "an episode is never superseded; something that happened stays true "
        "(update it in place, or add the new episode)",
    )


def _update(
    user: UserKey, memory_id: str, change: _Change, source: Source | None, limits: Limits
) -> Plan[Entry]:
    row, memory, vector = yield from _patched(user, memory_id, change, limits)
    fp = fingerprint(memory, memory_id if row.keyed else None)
    if change.supersede and fingerprint(memory) != fingerprint(row.entry.memory):
        return (yield from _supersede(user, row, memory, vector, source, limits, change))
    check_valid_until(change.validity.until, row.entry.valid_from)
    clash: Stored | None = yield FindLiveByFingerprint(user, fp, exclude_id=memory_id)
    if clash is not None:
        raise MemoryConflictError(memory_id, clash.entry.id)
    now: datetime = yield NOW
    yield Rewrite(user, row, memory, fp, vector, now)
    event = _event(memory_id, Operation.UPDATE, row.entry.text, memory.text, source, now)
    yield RecordHistory(user, (event,))
    entry = row.entry.model_copy(update={"memory": memory, "updated_at": now})
    return (yield from _set_until(user, row, entry, change.validity.until, now))


def _patched(
    user: UserKey, memory_id: str, change: _Change, limits: Limits
) -> Plan[tuple[Stored, Memory, object]]:
    """Read, patch and embed outside the write section, then enter it and read again:
    (the row as locked, the patched memory, its vector or `KEEP`)."""
    patch = change.patch
    seen: Stored | None = yield FindById(user, memory_id)
    if seen is None or seen.deleted:
        raise MemoryNotFoundError(memory_id)
    if change.supersede and seen.entry.memory.kind is Kind.EPISODE:
        raise _episode_refused()
    if change.supersede and seen.keyed and not change.keyed_versions:
        raise InvalidInputError(
            "supersede",
            "a memory added under a caller-chosen id is updated in place; its id "
            "would name the closed version (update it without supersede, or add "
            "the new value under a new id)",
        )
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
        if change.supersede and row.entry.memory.kind is Kind.EPISODE:
            raise _episode_refused()
        memory = patch.apply(row.entry.memory, limits)
        now_embedded = embedding_text(memory.text)
        if now_embedded == embedding_text(row.entry.memory.text):
            vector = KEEP
        elif now_embedded != embedded:
            (vector,) = yield Embed((now_embedded,))
    return row, memory, vector


def _supersede(
    user: UserKey,
    old: Stored,
    memory: Memory,
    vector: object,
    source: Source | None,
    limits: Limits,
    change: _Change,
) -> Plan[Entry]:
    """Close `old` and add `memory` as its new version (a new id): `old.valid_to`
    becomes the new `valid_from` (given, else a patched event time, else now)."""
    if old.entry.superseded_by is not None:
        later = yield from _later(user, old, {old.entry.id})
        head = later[-1].entry.id if later else old.entry.superseded_by
        raise MemoryConflictError(old.entry.id, head)
    fp = fingerprint(memory)  # the new version is never keyed: it has a new id
    clash: Stored | None = yield FindLiveByFingerprint(user, fp, exclude_id=old.entry.id)
    if clash is not None:
        raise MemoryConflictError(old.entry.id, clash.entry.id)
    if isinstance(vector, Keep):  # same text, other event fields: the new row needs one
        (vector,) = yield Embed((embedding_text(memory.text),))
    now: datetime = yield NOW
    patched_time = memory.event_time if change.patch.event_time is not None else None
    start = change.validity.start or patched_time or now
    check_valid_until(change.validity.until, start)
    entry = _new_entry(user, new_memory_id(), memory, now, Validity(start, change.validity.until))
    was = old.entry
    end = max(was.valid_from, start if was.valid_to is None else min(start, was.valid_to))
    yield SetValidity(user, old, end, entry.id, now)
    if limits.capacity is not None:
        yield from _make_room(user, limits, now)
    yield Insert(user, (NewRow(entry, fp, False, vector),))
    yield RecordHistory(user, _supersede_events(was, entry, source, now))
    return entry


# --- version chains ----------------------------------------------------------


def _later(user: UserKey, row: Stored, seen: set[str]) -> Plan[list[Stored]]:
    """The live versions after `row`, oldest first, by `superseded_by` (ids in `seen`
    are skipped, so a damaged chain cannot loop). The last one is the chain's
    current head unless the chain ends in a deleted or purged row."""
    found: list[Stored] = []
    link = row.entry.superseded_by
    while link is not None and link not in seen:
        nxt: Stored | None = yield FindById(user, link)
        if nxt is None or nxt.deleted:
            break
        seen.add(link)
        found.append(nxt)
        link = nxt.entry.superseded_by
    return found


def _earlier(user: UserKey, rows: list[Stored], seen: set[str]) -> Plan[list[Stored]]:
    """The live versions before any of `rows`, breadth-first: after restores a version
    can have several predecessors, so each is asked for (`FindPredecessor` with the
    ids seen so far excluded) until there is none."""
    found: list[Stored] = []
    queue = list(rows)
    while queue:
        current = queue.pop(0)
        while True:
            before: Stored | None = yield FindPredecessor(user, current.entry.id, frozenset(seen))
            if before is None:
                break
            seen.add(before.entry.id)
            found.append(before)
            queue.append(before)
    return found


def versions(user: UserKey, memory_id: str) -> Plan[list[Entry]]:
    """The version chain `memory_id` belongs to, from any version's id, oldest first
    (by `valid_from`, then creation, then id), superseded versions marked by their
    fields; [] for an unknown or deleted id."""
    user = check_user(user)
    check_memory_id(memory_id)
    return _versions(user, memory_id)


def _versions(user: UserKey, memory_id: str) -> Plan[list[Entry]]:
    row: Stored | None = yield FindById(user, memory_id)
    if row is None or row.deleted:
        return []
    seen = {memory_id}
    later = yield from _later(user, row, seen)
    earlier = yield from _earlier(user, [row, *later], seen)
    chain = sorted((r.entry for r in (row, *later, *earlier)), key=_oldest_first)
    return unexpired(chain)


def _oldest_first(entry: Entry) -> tuple[datetime, datetime, str]:
    return (entry.valid_from, entry.created_at, entry.id)


def restore_version(user: UserKey, memory_id: str, *, source: Source | None = None) -> Plan[Entry]:
    """Make a superseded version current again. A correction: each later version is
    closed as never true (`valid_to` = its `valid_from`), the head linked to this one,
    then this one reopened. A current id is returned as it is."""
    user = check_user(user)
    check_memory_id(memory_id)
    check_source(source)
    return _restore_version(user, memory_id, source)


def _restore_version(user: UserKey, memory_id: str, source: Source | None) -> Plan[Entry]:
    yield LockUser(user)
    row: Stored | None = yield FindById(user, memory_id)
    if row is None or row.deleted:
        raise MemoryNotFoundError(memory_id)
    if row.entry.superseded_by is None:
        return row.entry
    later = yield from _later(user, row, {memory_id})
    head = later[-1] if later and later[-1].entry.superseded_by is None else None
    fp = fingerprint(row.entry.memory, memory_id if row.keyed else None)
    clash: Stored | None = yield FindLiveByFingerprint(user, fp, exclude_id=memory_id)
    if clash is not None and (head is None or clash.entry.id != head.entry.id):
        raise MemoryConflictError(memory_id, clash.entry.id)
    now: datetime = yield NOW
    text, events = row.entry.text, []
    for closed in reversed(later):  # the head first: the unique index never sees two twins
        if closed is head or closed.entry.valid_to != closed.entry.valid_from:
            link = memory_id if closed is head else closed.entry.superseded_by
            yield SetValidity(user, closed, closed.entry.valid_from, link, now)
            old = closed.entry.text
            events.append(_event(closed.entry.id, Operation.SUPERSEDE, old, text, source, now))
    yield SetValidity(user, row, None, None, now)
    events.append(_event(memory_id, Operation.RESTORE, None, text, source, now))
    yield RecordHistory(user, tuple(events))
    update = {"valid_to": None, "superseded_by": None, "updated_at": now}
    return row.entry.model_copy(update=update)


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
    if row.entry.superseded_by is None:  # a superseded version may share its content
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
    """Write an exported entry back exactly (id, timestamps, content, expiry, validity
    and supersede link) with its history, replacing any memory with that id. If another
    current memory holds the same content, a current restored one keeps its own
    identity (its fingerprint includes its id); a superseded one needs none."""
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
    keyed = False
    if entry.superseded_by is None:
        clash: Stored | None = yield FindLiveByFingerprint(user, fingerprint(entry.memory))
        keyed = clash is not None
    fp = fingerprint(entry.memory, entry.id if keyed else None)
    yield Insert(user, (NewRow(entry, fp, keyed, vector),))
    if events:
        yield RecordHistory(user, events)
    return entry
