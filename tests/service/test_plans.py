"""The write plans' own construction of entries, history events and ids, and the steps an
add makes (`service/plans.py`)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from langmem_trpc import (
    Entry,
    HistoryEvent,
    InMemoryMemoryService,
    Limits,
    Memory,
    Operation,
    Source,
    UserKey,
)
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.service import plans, rules, steps

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_new_entry_is_the_model_construct_entry() -> None:
    memory = Memory(text="likes tea", topics=["drinks"])
    entry = plans._new_entry(UserKey("app", "u"), "m1", memory, AT)
    twin = Entry.model_construct(
        id="m1",
        app_name="app",
        user_id="u",
        memory=memory,
        created_at=AT,
        updated_at=AT,
        valid_from=AT,
    )
    assert entry == twin
    assert entry.model_dump() == twin.model_dump()
    assert entry.model_fields_set == set(Entry.model_fields)
    assert entry.model_copy(update={"score": 0.5}).score == 0.5


def test_event_is_the_model_construct_event() -> None:
    source = Source(actor="tester")
    event = plans._event("m1", Operation.UPDATE, "old", "new", source, AT)
    twin = HistoryEvent.model_construct(
        memory_id="m1",
        operation=Operation.UPDATE,
        text_before="old",
        text_after="new",
        at=AT,
        source=source,
    )
    assert event == twin
    assert event.model_dump_json() == twin.model_dump_json()
    assert event.model_fields_set == twin.model_fields_set


def test_a_new_add_makes_one_fingerprint_lookup() -> None:
    user, seen = UserKey("app", "u"), []

    def execute(step: steps.Step) -> object:
        seen.append(type(step).__name__)
        return [None] if isinstance(step, steps.Embed) else AT if step is plans.NOW else None

    entry = steps.drive(plans.add(user, "likes tea", limits=Limits(capacity=None)), execute)
    assert entry.created_at == AT
    assert seen == ["Embed", "LockUser", "FindByFingerprint", "Now", "Insert", "RecordHistory"]


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_an_add_merges_into_the_live_row_before_reviving_a_deleted_twin(backend: str) -> None:
    svc = InMemoryMemoryService() if backend == "memory" else SQLiteMemoryService(":memory:")
    user = UserKey("app", "u")
    deleted = svc.add(user, "likes tea")
    svc.delete(user, deleted.id)
    live = svc.add(user, "likes coffee")
    svc.update(user, live.id, "likes tea")  # a live row now shares the deleted one's content
    again = svc.add(user, "likes tea", topics=["drinks"])
    assert again.id == live.id
    assert again.memory.topics == ["drinks"]
    assert svc.get(user, deleted.id) is None
    if isinstance(svc, SQLiteMemoryService):
        svc.close()


def test_new_memory_ids_are_random_version_4_uuids_as_hex() -> None:
    ids = [rules.new_memory_id() for _ in range(200)] + rules.new_memory_ids(200)
    assert len(set(ids)) == 400
    for memory_id in ids:
        parsed = uuid.UUID(memory_id)
        assert (parsed.hex, parsed.version, parsed.variant) == (memory_id, 4, uuid.RFC_4122)
