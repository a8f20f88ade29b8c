"""Long deltas run in batches, and the cursor moves after each one."""

from __future__ import annotations

import time

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from langmem_trpc import AutoMemoryWorker, VerbatimExtractor
from langmem_trpc.extraction.delta import compute_delta
from langmem_trpc.extraction.extractor import ExtractionRequest
from langmem_trpc.extraction.job import JobStatus, split_batches
from langmem_trpc.extraction.ops import MemoryOp


class RecordingExtractor:
    """VerbatimExtractor that records batch sizes and can be slow."""

    uses_existing = False

    def __init__(self, delay: float = 0.0) -> None:
        self.inner = VerbatimExtractor()
        self.delay = delay
        self.sizes: list[int] = []

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        self.sizes.append(len(request.messages))
        time.sleep(self.delay)
        return self.inner.extract(request)


def thread(n: int) -> list:
    return [HumanMessage(f"Fact number {i} about the user", id=f"m{i}") for i in range(n)]


def test_a_long_delta_runs_in_batches_with_the_cursor_after_the_last(service, user):
    extractor = RecordingExtractor()
    worker = AutoMemoryWorker(service, extractor, batch_messages=50)
    report = worker.process(user, "t", thread(120))
    assert report.status == JobStatus.COMPLETED
    assert extractor.sizes == [50, 50, 20]
    assert report.batches == 3 and report.added == 120
    cursor = service.get_cursor(user, "t")
    assert cursor is not None and cursor.last_message_id == "m119"


def test_time_running_out_keeps_finished_batches_and_resumes(service, user):
    extractor = RecordingExtractor(delay=0.15)
    worker = AutoMemoryWorker(service, extractor, batch_messages=10, job_timeout=0.4)
    messages = thread(100)
    first = worker.process(user, "t", messages)
    assert first.status in (JobStatus.PARTIAL, JobStatus.FAILED)
    assert 1 <= first.batches < 10
    assert service.get_cursor(user, "t").last_message_id == f"m{first.batches * 10 - 1}"
    assert service.count(user) == first.batches * 10
    reports = [first]
    while reports[-1].status != JobStatus.COMPLETED:
        reports.append(worker.process(user, "t", messages))
        assert len(reports) < 30
    assert sum(r.batches for r in reports) == 10
    assert service.count(user) == 100  # every message once, none twice
    assert worker.stats().jobs_partial >= 1


def test_batches_cut_after_memorable_messages_only():
    messages = [
        HumanMessage("one", id="1"),
        AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "c1"}], id="2"),
        ToolMessage("tool output", tool_call_id="c1", id="3"),
        HumanMessage("two", id="4"),
        AIMessage("three", id="5"),
        ToolMessage("late tool output", tool_call_id="c2", id="6"),
    ]
    batches = split_batches(messages, compute_delta(messages, None), 2)
    assert [(end, [m.id for m in batch]) for end, batch in batches] == [(4, ["1", "4"]), (6, ["5"])]
    exact = split_batches(messages[:5], compute_delta(messages[:5], None), 3)
    assert [(end, [m.id for m in batch]) for end, batch in exact] == [(5, ["1", "4", "5"])]
