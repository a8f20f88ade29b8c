"""The reconcile decision and tier that fired, recorded per write in history (issue #18).

A worker job runs the merge_similar policy; every write it makes carries the
batch's `Source` with that op's `decision` label, on every backend.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from langmem_trpc import AutoMemoryWorker, UserKey
from langmem_trpc.extraction import JobStatus, MemoryOp
from langmem_trpc.extraction.reconcile import JACCARD_MID, UPDATE_SCORE
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.types import Operation

from .conftest import make_service

UPDATE = re.compile(r"^update tier=update score=(\d\.\d\d) jaccard=(\d\.\d\d)$")
ADD = re.compile(r"^add( tier=none score=\d\.\d\d jaccard=\d\.\d\d)?$")
SUPERSEDE = re.compile(r"^supersede tier=update score=\d\.\d\d jaccard=\d\.\d\d change=number$")


class Facts:
    """An instant extractor: every message is one proposed fact."""

    def extract(self, request):
        return [MemoryOp.add(str(m.content)) for m in request.messages]


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryService]:
    if request.param == "postgres":
        from langmem_trpc.backends.postgres import PostgresMemoryService

        svc: MemoryService = PostgresMemoryService(request.getfixturevalue("pg_url"))
        svc.setup()  # type: ignore[attr-defined]
    else:
        svc = make_service(request.param, tmp_path)
    yield svc
    svc.close()


def test_a_worker_job_records_add_and_the_update_tier_that_fired(any_service, user: UserKey):
    worker = AutoMemoryWorker(any_service, Facts())
    first = [HumanMessage("Production runs Go 1.23", id="m0")]
    assert worker.process(user, "t", first).status == JobStatus.COMPLETED
    second = [*first, HumanMessage("Production runs Go 1.23 on Kubernetes", id="m1")]
    assert worker.process(user, "t", second).status == JobStatus.COMPLETED
    (entry,) = any_service.read(user)  # an enrichment: updated in place
    added, updated = any_service.history(user, entry.id)
    assert added.operation == Operation.ADD and updated.operation == Operation.UPDATE
    assert added.source is not None and ADD.match(added.source.decision or "")
    assert added.source.actor == "worker" and added.source.message_ids == ["m0"]
    assert updated.source is not None and updated.source.message_ids == ["m1"]
    found = UPDATE.match(updated.source.decision or "")
    assert found is not None, updated.source.decision
    score, jaccard = float(found.group(1)), float(found.group(2))
    assert score >= UPDATE_SCORE or jaccard >= JACCARD_MID  # the figure that crossed the tier


def test_a_changed_value_records_the_supersede_and_its_change(any_service, user: UserKey):
    worker = AutoMemoryWorker(any_service, Facts())
    first = [HumanMessage("Production runs Go 1.23 on Kubernetes", id="m0")]
    worker.process(user, "t", first)
    second = [*first, HumanMessage("Production runs Go 1.24 on Kubernetes", id="m1")]
    assert worker.process(user, "t", second).superseded == 1
    (current,) = any_service.read(user)
    old, new = any_service.versions(user, current.id)
    assert old.superseded_by == new.id == current.id
    closed = any_service.history(user, old.id)[-1]
    assert closed.operation == Operation.SUPERSEDE and closed.source is not None
    assert SUPERSEDE.match(closed.source.decision or ""), closed.source.decision
    assert closed.source.message_ids == ["m1"]


def test_a_brand_new_fact_records_add(any_service, user: UserKey):
    worker = AutoMemoryWorker(any_service, Facts())
    worker.process(user, "t", [HumanMessage("Production runs Go 1.23 on Kubernetes", id="m0")])
    thread = [
        HumanMessage("Production runs Go 1.23 on Kubernetes", id="m0"),
        HumanMessage("Alice keeps three beehives in her garden", id="m1"),
    ]
    assert worker.process(user, "t", thread).status == JobStatus.COMPLETED
    (bees,) = [e for e in any_service.read(user) if "beehives" in e.text]
    (event,) = any_service.history(user, bees.id)
    assert event.source is not None and ADD.match(event.source.decision or "")
