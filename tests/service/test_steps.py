"""The public step kit: one executor method per step, on every in-tree executor."""

from __future__ import annotations

import re
from typing import get_args

import pytest

from langmem_trpc.backends.memory.service import _Run
from langmem_trpc.backends.postgres._plans import SqlSteps
from langmem_trpc.backends.sqlite._executor import SQLiteRun
from langmem_trpc.service import steps


def _method(step: type) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", step.__name__).lower()


STEP_METHODS = {_method(step) for step in get_args(steps.Step)}
RETURN_NONE = {"lock_user", "insert", "rewrite", "set_topics", "set_validity", "record_history"}


def test_the_protocol_has_one_method_per_step():
    declared = {name for name in vars(steps.StepExecutor) if not name.startswith("_")}
    assert declared == STEP_METHODS


@pytest.mark.parametrize("executor", [_Run, SQLiteRun, SqlSteps])
def test_every_executor_implements_every_step(executor):
    assert STEP_METHODS <= {name for name in dir(executor) if not name.startswith("_")}


def test_dispatch_calls_the_method_of_the_step():
    class Recorder:
        def __getattr__(self, name: str):
            return lambda step: (name, step)

    for kind in get_args(steps.Step):
        step = kind.__new__(kind)
        name = _method(kind)
        expected = None if name in RETURN_NONE else (name, step)
        assert steps.dispatch(Recorder(), step) == expected  # type: ignore[arg-type]
