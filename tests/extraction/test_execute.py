"""execute_ops: one failing operation never takes the others with it."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest

from langmem_trpc.extraction import Action, MemoryOp
from langmem_trpc.extraction.execute import execute_ops
from langmem_trpc.testing._wrap import DelegatingService
from langmem_trpc.types import Source


class PoisonedAdds(DelegatingService):
    """A real service whose add raises `errors[text]` for the listed texts."""

    def __init__(self, inner: Any, errors: dict[str, BaseException]) -> None:
        super().__init__(inner)
        self.errors = errors

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "add" and args[1] in self.errors:
            raise self.errors[args[1]]
        return super()._call(name, *args, **kwargs)


ACTIONS = frozenset({Action.ADD, Action.UPDATE, Action.DELETE})


@pytest.mark.parametrize(
    "error", [OverflowError("date value out of range"), ValueError("bad"), TypeError("odd")]
)
def test_a_validation_failure_of_any_type_skips_only_that_op(service, user, error, caplog):
    poisoned = PoisonedAdds(service, {"poison": error})
    ops = [MemoryOp.add("Lives in Oslo"), MemoryOp.add("poison"), MemoryOp.add("Keeps bees")]
    with caplog.at_level(logging.WARNING):
        outcomes, finished = execute_ops(
            poisoned, user, ops, actions=ACTIONS, source=Source(actor="worker")
        )
    assert finished
    assert [o.result for o in outcomes] == ["added", "failed", "added"]
    assert not any(o.retry for o in outcomes)  # invalid input: replaying it cannot help
    assert type(error).__name__ in caplog.text and "skipped" in caplog.text
    assert {e.text for e in service.read(user)} == {"Lives in Oslo", "Keeps bees"}


def test_an_unknown_driver_error_still_marks_the_job_for_retry(service, user):
    poisoned = PoisonedAdds(service, {"poison": OSError("connection reset")})
    outcomes, _ = execute_ops(
        poisoned,
        user,
        [MemoryOp.add("poison"), MemoryOp.add("Keeps bees")],
        actions=ACTIONS,
        source=Source(actor="worker"),
    )
    assert [o.result for o in outcomes] == ["failed", "added"] and outcomes[0].retry


def test_each_write_records_its_decision_and_a_missing_update_target_says_so(service, user):
    ops = [MemoryOp.add("Lives in Oslo"), MemoryOp.update("0" * 32, "Keeps bees")]
    outcomes, _ = execute_ops(service, user, ops, actions=ACTIONS, source=Source(actor="worker"))
    assert [o.result for o in outcomes] == ["added", "added"]
    decisions = [service.history(user, o.memory_id)[0].source.decision for o in outcomes]
    assert decisions == ["add", "add:update-target-missing"]


def test_a_supersede_of_a_keyed_memory_becomes_an_update_in_place(service, user):
    """A keyed memory (a caller-chosen id) is refused a supersede; the worker's update
    lands in place instead, so the key keeps naming the current value."""
    service.add(user, "Team size is 5", memory_id="team")
    op = replace(MemoryOp.update("team", "Team size is 6"), supersede=True)
    outcomes, _ = execute_ops(service, user, [op], actions=ACTIONS, source=Source(actor="worker"))
    assert [(o.result, o.memory_id) for o in outcomes] == [("updated", "team")]
    assert [e.text for e in service.read(user, include_superseded=True)] == ["Team size is 6"]
