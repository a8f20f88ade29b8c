"""The write plans' own construction of entries and history events (`service/_plans.py`)."""

from __future__ import annotations

from datetime import UTC, datetime

from langmem_trpc import Entry, HistoryEvent, Memory, Operation, Source, UserKey
from langmem_trpc.service import _plans

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_new_entry_is_the_model_construct_entry() -> None:
    memory = Memory(text="likes tea", topics=["drinks"])
    entry = _plans._new_entry(UserKey("app", "u"), "m1", memory, AT)
    twin = Entry.model_construct(
        id="m1", app_name="app", user_id="u", memory=memory, created_at=AT, updated_at=AT
    )
    assert entry == twin
    assert entry.model_dump() == twin.model_dump()
    assert entry.model_fields_set == set(Entry.model_fields)
    assert entry.model_copy(update={"score": 0.5}).score == 0.5


def test_event_is_the_model_construct_event() -> None:
    source = Source(actor="tester")
    event = _plans._event("m1", Operation.UPDATE, "old", "new", source, AT)
    twin = HistoryEvent.model_construct(
        memory_id="m1", operation=Operation.UPDATE, text_before="old", text_after="new",
        at=AT, source=source,
    )  # fmt: skip
    assert event == twin
    assert event.model_dump_json() == twin.model_dump_json()
    assert event.model_fields_set == twin.model_fields_set
