"""Test helpers over the shared read plans (`service.reads`)."""

from __future__ import annotations

from collections.abc import Callable

from langmem_trpc.service import reads


def writing_between_tiers(plan: reads.ReadPlan, write: Callable[[], object]) -> reads.ReadPlan:
    """`plan`, with `write()` run just before its second `FetchLegs` (its next tier, or
    the first tier's masked-query refetch) reaches the executor."""
    fetches, reply = 0, None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as done:
            return done.value
        if isinstance(step, reads.FetchLegs):
            fetches += 1
            if fetches == 2:
                write()
        reply = yield step
