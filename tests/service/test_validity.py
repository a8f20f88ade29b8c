"""The validity rules' own pieces: the order of a supersede's steps (the unique index
of current content never sees two rows), the view rule, the input checks, and the
in-memory executor's rollback and predecessor choice. The behaviour every backend
shares is in `testing/_validity_conformance.py`."""

from __future__ import annotations

from collections.abc import Generator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from langmem_trpc import (
    CapacityExceededError,
    Entry,
    InMemoryMemoryService,
    InvalidTimeError,
    Limits,
    Memory,
    SearchOptions,
    UserKey,
)
from langmem_trpc.errors import InvalidInputError
from langmem_trpc.service import plans, rules, steps, validity
from langmem_trpc.service.steps import Plan
from langmem_trpc.testing import HashingEmbeddings

T = TypeVar("T")
ALICE = UserKey("app", "alice")
T0 = datetime(2024, 5, 1, tzinfo=UTC)
DAY = timedelta(days=1)


class Recording(InMemoryMemoryService):
    """Records the type of every step the plans it runs yield."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: list[str] = []

    def run_plan(self, plan: Plan[T]) -> T:
        return super().run_plan(self._spy(plan))

    def _spy(self, plan: Plan[T]) -> Generator[steps.Step, Any, T]:
        reply: object = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as done:
                result: T = done.value
                return result
            self.seen.append(type(step).__name__)
            reply = yield step


def _writes(seen: list[str]) -> list[str]:
    return [s for s in seen if s in {"SetValidity", "Insert", "RecordHistory"}]


def test_a_supersede_closes_the_old_version_before_it_inserts_the_new() -> None:
    svc = Recording()
    old = svc.add(ALICE, "Runs Go 1.23")
    svc.seen.clear()
    svc.update(ALICE, old.id, "Runs Go 1.24", supersede=True)
    assert _writes(svc.seen) == ["SetValidity", "Insert", "RecordHistory"]


def test_a_lapsed_re_add_closes_the_twin_before_it_inserts_the_same_content() -> None:
    svc = Recording()
    svc.add(ALICE, "Is in Tokyo", valid_from=T0, valid_until=T0 + DAY)
    svc.seen.clear()
    svc.add(ALICE, "Is in Tokyo")
    assert _writes(svc.seen) == ["SetValidity", "Insert", "RecordHistory"]


def test_restore_version_closes_the_head_before_it_reopens_the_old_version() -> None:
    svc = Recording()
    old = svc.add(ALICE, "Is in Tokyo", valid_from=T0, valid_until=T0 + DAY)
    head = svc.add(ALICE, "Is in Tokyo")
    svc.seen.clear()
    svc.restore_version(ALICE, old.id)
    assert _writes(svc.seen) == ["SetValidity", "SetValidity", "RecordHistory"]
    assert svc.get(ALICE, head.id).superseded_by == old.id  # type: ignore[union-attr]


def test_the_default_add_yields_no_validity_step() -> None:
    svc = Recording()
    svc.add(ALICE, "Keeps bees")
    svc.add(ALICE, "Keeps bees", topics=["bees"])
    assert "SetValidity" not in svc.seen and svc.seen.count("Now") == 2


def test_a_failed_supersede_leaves_the_old_version_as_it_was() -> None:
    svc = InMemoryMemoryService()
    old = svc.add(ALICE, "Runs Go 1.23")

    def failing() -> Plan[None]:
        yield steps.LockUser(ALICE)
        row = yield steps.FindById(ALICE, old.id)
        yield steps.SetValidity(ALICE, row, T0, "next", T0)
        raise RuntimeError("the insert of the new version fails")

    with pytest.raises(RuntimeError):
        svc.run_plan(failing())
    assert svc.get(ALICE, old.id) == old


def test_the_newest_of_several_predecessors_is_the_one_found() -> None:
    svc = InMemoryMemoryService()
    a = svc.add(ALICE, "Team size is 5")
    b = svc.update(ALICE, a.id, "Team size is 6", supersede=True)
    c = svc.update(ALICE, b.id, "Team size is 7", supersede=True)
    svc.restore_version(ALICE, b.id)  # c closed, linked to b: b has two predecessors
    found = svc.run_plan(_predecessor(b.id))
    assert found == c.id
    assert svc.run_plan(_predecessor(b.id, frozenset({c.id}))) == a.id  # the other one
    assert svc.run_plan(_predecessor(b.id, frozenset({a.id, c.id}))) is None
    for start in (a, b, c):  # every version, from any id, oldest first
        assert [e.id for e in svc.versions(ALICE, start.id)] == [a.id, b.id, c.id]


def _predecessor(memory_id: str, exclude: frozenset[str] = frozenset()) -> Plan[str | None]:
    row = yield steps.FindPredecessor(ALICE, memory_id, exclude)
    return None if row is None else row.entry.id


def test_superseded_versions_take_capacity() -> None:
    svc = InMemoryMemoryService(limits=Limits(capacity=2))
    first = svc.add(ALICE, "Runs Go 1.22")
    second = svc.update(ALICE, first.id, "Runs Go 1.23", supersede=True)
    with pytest.raises(CapacityExceededError):
        svc.update(ALICE, second.id, "Runs Go 1.24", supersede=True)
    assert svc.count(ALICE) == 1
    assert [e.text for e in svc.read(ALICE)] == ["Runs Go 1.23"]


def test_a_keyed_memory_superseded_gets_an_unkeyed_new_version() -> None:
    svc = InMemoryMemoryService()
    keyed = svc.add(ALICE, "Runs Go 1.23", memory_id="prefs/go")
    with pytest.raises(InvalidInputError) as refused:  # the key would name the old one
        svc.update(ALICE, keyed.id, "Runs Go 1.24", supersede=True)
    assert refused.value.field == "supersede"
    assert svc.read(ALICE, include_superseded=True) == [keyed]  # nothing written
    patch = rules.MemoryPatch("Runs Go 1.24")  # MemoryStore's path: it follows the link
    plan = plans.update(
        ALICE, keyed.id, patch, limits=svc.limits, supersede=True, keyed_versions=True
    )
    new = svc.run_plan(plan)
    assert new.id != "prefs/go"
    assert svc.add(ALICE, "Runs Go 1.24").id == new.id  # found by its plain fingerprint


def test_the_view_rule() -> None:
    now = T0 + 100 * DAY
    open_ = _entry(valid_from=T0)
    lapsed = _entry(valid_from=T0, valid_to=T0 + DAY)
    closed = _entry(valid_from=T0, valid_to=T0 + 2 * DAY, superseded_by="x")
    planned = _entry(valid_from=now + DAY)
    current = validity.CURRENT
    assert [current.visible(e, now) for e in (open_, lapsed, closed, planned)] == [
        True,
        False,
        False,
        True,
    ]
    at = validity.View(as_of=T0 + DAY)
    assert [at.visible(e, now) for e in (open_, lapsed, closed, planned)] == [
        True,
        False,
        True,
        False,
    ]
    every = validity.View(include_superseded=True)
    assert all(every.visible(e, now) for e in (open_, lapsed, closed, planned))


def _entry(**fields: Any) -> Entry:
    return Entry(
        id="m",
        app_name="app",
        user_id="alice",
        memory=Memory(text="t"),
        created_at=T0,
        updated_at=T0,
        **fields,
    )


def test_check_validity_compares_only_against_a_known_start() -> None:
    # an update's (no start); a bare date as the end means through that day
    assert rules.check_validity(None, "2024-05-01") == (None, T0 + DAY)
    assert rules.check_validity(None, "2024-05-01T00:00") == (None, T0)
    with pytest.raises(InvalidTimeError) as info:
        rules.check_validity("2024-05-02", "2024-05-01")
    assert info.value.field == "valid_until"
    with pytest.raises(InvalidTimeError):
        rules.check_validity(None, T0, start=T0)
    assert rules.check_validity(None, None) == (None, None)


def test_an_old_export_gets_its_start_from_a_zone_less_event_time() -> None:
    """`Entry`'s default `valid_from` reads the event time as `Memory` does (an import
    of a record without validity once failed on a zone-less event time)."""
    record = {
        "id": "m",
        "app_name": "app",
        "user_id": "alice",
        "memory": {"text": "Met Bob", "kind": "episode", "event_time": "2024-05-01T00:00:00"},
        "created_at": "2024-06-01T00:00:00Z",
        "updated_at": "2024-06-01T00:00:00Z",
    }
    entry = Entry.model_validate(record)
    assert entry.valid_from == T0 == entry.memory.event_time
    del record["memory"]["event_time"]  # type: ignore[attr-defined]
    assert Entry.model_validate(record).valid_from == T0 + 31 * DAY


def test_a_failed_rewrite_puts_every_field_of_the_row_back() -> None:
    """The in-memory undo log restores all of a `MemoryRow`'s fields (a slotted
    dataclass): entry, fingerprint, vector and keyword document."""
    svc = InMemoryMemoryService(HashingEmbeddings())
    old = svc.add(ALICE, "Keeps bees in the garden")
    assert [e.id for e in svc.search(ALICE, "bees")] == [old.id]  # builds the keyword doc

    def failing() -> Plan[None]:
        yield steps.LockUser(ALICE)
        row = yield steps.FindById(ALICE, old.id)
        memory = Memory(text="Sells honey at the market")
        yield steps.Rewrite(ALICE, row, memory, "other-fingerprint", [1.0] * 384, T0)
        raise RuntimeError("a later step fails")

    with pytest.raises(RuntimeError):
        svc.run_plan(failing())
    assert svc.get(ALICE, old.id) == old
    exact = svc.search(ALICE, old.text, SearchOptions(hybrid=False, similarity_threshold=0.0))
    assert exact[0].id == old.id and (exact[0].score or 0) > 0.99  # its vector is back
    assert svc.add(ALICE, "Keeps bees in the garden").id == old.id  # its fingerprint is back
