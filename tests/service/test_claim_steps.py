"""The claim kit: one executor method per thread-level step on every in-tree
executor, and each op's plan is the same on every backend."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import get_args

import pytest

from langmem_trpc.backends.postgres import _claims as pg
from langmem_trpc.backends.postgres._plans import Sql
from langmem_trpc.backends.sqlite._claims import SQLiteClaimSteps
from langmem_trpc.service import claim_steps as cs
from langmem_trpc.service import claims as c
from langmem_trpc.types import ExtractionCursor, UserKey

ALICE = UserKey("app", "alice")


def _method(step: type) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", step.__name__).lower()


STEP_METHODS = {_method(step) for step in get_args(cs.ClaimStep)}


def test_the_protocol_has_one_method_per_step():
    declared = {name for name in vars(cs.ClaimExecutor) if not name.startswith("_")}
    assert declared == STEP_METHODS


@pytest.mark.parametrize("executor", [c.ClaimTable, SQLiteClaimSteps, pg.ClaimSql])
def test_every_executor_implements_every_step(executor):
    assert STEP_METHODS <= {name for name in dir(executor) if not name.startswith("_")}


def test_dispatch_calls_the_method_of_the_step():
    class Recorder:
        def __getattr__(self, name: str):
            return lambda step: (name, step)

    for kind in get_args(cs.ClaimStep):
        step = kind.__new__(kind)
        name = _method(kind)
        expected = None if name == "unlock_thread" else (name, step)
        assert cs.dispatch(Recorder(), step) == expected  # type: ignore[arg-type]


def _cursor() -> ExtractionCursor:
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return ExtractionCursor(thread_id="t1", message_count=1, last_extracted_at=at)


def _statements(op: c.ClaimOp[object], replies: list[list[dict[str, object]]]) -> list[str]:
    """The statements PostgreSQL runs for `op`, each answered from `replies` in turn."""
    plan, seen, reply = pg.op_for(op).plan, [], None
    try:
        while True:
            step = plan.send(reply)
            assert isinstance(step, Sql)
            seen.append(step.sql)
            reply = replies.pop(0)
    except StopIteration:
        return seen


def test_postgres_saves_a_cursor_under_a_claim_in_one_statement():
    op = c.SaveProgress(ALICE, "t1", "job", _cursor(), None, None, [])
    assert not pg.op_for(op).write  # atomic alone: no BEGIN / COMMIT round trips
    assert _statements(op, [[{"held": 1}]]) == [pg.HOLD[True, True, True]]
    assert _statements(op, [[]]) == [pg.HOLD[True, True, True]]  # not held: nothing more


def test_postgres_takes_a_claim_and_reads_the_thread_in_two_statements():
    op = c.ClaimThread(ALICE, "t1", "job", 30.0)
    taken = [{"attempts": 2, "batch": "b"}]
    assert _statements(op, [taken, []]) == [pg.TAKE_CLAIM, pg.SELECT_CURSOR]
    assert _statements(op, [[]]) == [pg.TAKE_CLAIM]


def test_postgres_reads_the_attempts_when_no_lock_step_returned_them():
    read = pg.ClaimSql().read_thread(cs.ReadThread(ALICE, "t1", attempts=True))
    assert read.send(None).sql == pg.SELECT_CURSOR
    assert read.send([]).sql == pg.SELECT_ATTEMPTS
    with pytest.raises(StopIteration) as done:
        read.send([{"attempts": 2, "batch": "b"}])
    assert done.value.value == cs.ThreadState(None, 2, "b", [])
