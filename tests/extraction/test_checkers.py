from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langmem_trpc import (
    AutoMemoryWorker,
    ConfigurationError,
    ExtractionContext,
    UserKey,
    check_message_threshold,
    check_time_interval,
    checks_all,
    checks_any,
)
from langmem_trpc.extraction import JobStatus, VerbatimExtractor

USER = UserKey("app", "u")
NOW = datetime(2024, 5, 20, 12, tzinfo=timezone.utc)


def ctx(n: int, last: datetime | None = None) -> ExtractionContext:
    return ExtractionContext(USER, [HumanMessage(f"m{i}") for i in range(n)], last)


def test_message_threshold_is_strict():
    check = check_message_threshold(2)
    assert not check(ctx(2))
    assert check(ctx(3))
    assert check_message_threshold(0)(ctx(1))
    assert not check_message_threshold(0)(ctx(0))


def test_message_threshold_rejects_bad_n():
    with pytest.raises(ConfigurationError):
        check_message_threshold(-1)


def test_time_interval_true_without_previous_extraction():
    assert check_time_interval(timedelta(hours=1), clock=lambda: NOW)(ctx(1, None))


def test_time_interval_needs_strictly_more_than_interval():
    check = check_time_interval(timedelta(minutes=10), clock=lambda: NOW)
    assert not check(ctx(1, NOW - timedelta(minutes=5)))
    assert not check(ctx(1, NOW - timedelta(minutes=10)))
    assert check(ctx(1, NOW - timedelta(minutes=10, seconds=1)))
    assert check_time_interval(60, clock=lambda: NOW)(ctx(1, NOW - timedelta(minutes=2)))


def test_checks_all_and_any():
    yes, no = (lambda c: True), (lambda c: False)
    assert checks_all()(ctx(1))
    assert not checks_any()(ctx(1))
    assert checks_all(yes, yes)(ctx(1)) and not checks_all(yes, no)(ctx(1))
    assert checks_any(no, yes)(ctx(1)) and not checks_any(no, no)(ctx(1))


class CountingExtractor(VerbatimExtractor):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []

    def extract(self, request):
        self.calls.append([m.content for m in request.messages])
        return super().extract(request)


def test_false_checker_is_a_noop_and_messages_accumulate(service, user):
    extractor = CountingExtractor()
    worker = AutoMemoryWorker(service, extractor, checkers=[check_message_threshold(2)])
    history = [HumanMessage("I like tea", id="h1"), AIMessage("Noted", id="a1")]
    report = worker.process(user, "t", history)
    assert report.status == JobStatus.SKIPPED_BY_CHECKER
    assert extractor.calls == [] and service.count(user) == 0
    assert service.get_cursor(user, "t") is None
    history.append(HumanMessage("I live in Oslo", id="h2"))
    report = worker.process(user, "t", history)
    assert report.status == JobStatus.COMPLETED
    assert extractor.calls == [["I like tea", "Noted", "I live in Oslo"]]
    assert service.count(user) == 2
    assert worker.stats().jobs_skipped_by_checker == 1


def test_no_checkers_always_extract(service, user):
    extractor = CountingExtractor()
    AutoMemoryWorker(service, extractor).process(user, "t", [HumanMessage("hi there", id="1")])
    assert len(extractor.calls) == 1


def test_time_interval_checker_sees_last_extraction_time(service, user):
    extractor = CountingExtractor()
    worker = AutoMemoryWorker(
        service, extractor, checkers=[check_time_interval(timedelta(hours=1))]
    )
    msgs = [HumanMessage("first", id="1")]
    assert worker.process(user, "t", msgs).status == JobStatus.COMPLETED
    msgs.append(HumanMessage("second", id="2"))
    assert worker.process(user, "t", msgs).status == JobStatus.SKIPPED_BY_CHECKER
