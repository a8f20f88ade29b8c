"""Extractor calls under a deadline: hung calls are cancelled or isolated, bounded per user."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

from langmem_trpc import AutoMemoryWorker, ExtractionError, LLMExtractor, UserKey
from langmem_trpc.extraction import ExtractionRequest, JobStatus, MemoryOp, VerbatimExtractor
from langmem_trpc.testing import ScriptedChatModel, tool_call

HUNG = 50
TIMEOUT = 1.0


def remember(messages: list[BaseMessage]) -> AIMessage:
    text = str(messages[-1].content)
    return AIMessage("", tool_calls=[tool_call("memory_add", {"memory": f"User said: {text}"})])


def hangs(messages: list[BaseMessage]) -> bool:
    return any("hang" in str(m.content) for m in messages[1:])


class HangingChatModel(ScriptedChatModel):
    """Calls whose messages say "hang" never answer: `ainvoke` awaits forever (and
    records its cancellation), sync `invoke` blocks on `release`. Other calls follow
    the script. It declares `request_timeout`, so the extractor binds `timeout`."""

    request_timeout: float | None = None
    _release: threading.Event = PrivateAttr(default_factory=threading.Event)
    _counts: dict[str, int] = PrivateAttr(default_factory=dict)
    _timeouts: list[Any] = PrivateAttr(default_factory=list)

    def count(self, name: str) -> int:
        with self._lock:
            return self._counts.get(name, 0)

    def _bump(self, name: str) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + 1

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:  # fmt: skip
        if hangs(messages):
            self._bump("sync_blocked")
            self._release.wait(30)
        return super()._generate(messages, stop, run_manager, **kwargs)

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:  # fmt: skip
        with self._lock:
            self._timeouts.append(kwargs.get("timeout"))
        if hangs(messages):
            self._bump("async_started")
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self._bump("async_cancelled")
                raise
        return ChatResult(generations=[ChatGeneration(message=self._next_reply(messages))])


class BlockingExtractor(VerbatimExtractor):
    """A sync-only extractor: jobs of users named hung-* or hog block until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        if request.user.user_id.startswith(("hung-", "hog")):
            self.release.wait(30)
        return super().extract(request)


def wait_until(predicate: Callable[[], bool], seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def hang_everyone(worker: AutoMemoryWorker) -> list[Any]:
    def one(i: int) -> Any:
        return worker.process(UserKey("app", f"hung-{i}"), "t", [HumanMessage("hang", id="h")])

    with ThreadPoolExecutor(HUNG) as pool:
        return list(pool.map(one, range(HUNG)))


def healthy_job(worker: AutoMemoryWorker) -> tuple[Any, float]:
    started = time.monotonic()
    report = worker.process(UserKey("app", "healthy"), "t", [HumanMessage("I like tea", id="1")])
    return report, time.monotonic() - started


def test_fifty_hung_async_calls_are_cancelled_and_a_healthy_user_is_served(service):
    model = HangingChatModel(default=remember)
    worker = AutoMemoryWorker(service, LLMExtractor(model), job_timeout=TIMEOUT)
    try:
        reports = hang_everyone(worker)
        assert all(r.status == JobStatus.FAILED and r.timed_out for r in reports)
        report, elapsed = healthy_job(worker)
        assert report.status == JobStatus.COMPLETED, report.error
        assert report.added == 1 and elapsed < TIMEOUT
        # Every hung call was awaited (never a blocking invoke) and saw CancelledError.
        assert model.count("async_started") >= 40
        assert wait_until(lambda: model.count("async_cancelled") == model.count("async_started"))
        assert model.count("sync_blocked") == 0
        assert wait_until(lambda: worker.stats().calls_in_flight == 0)
        stats = worker.stats()
        assert stats.calls_cancelled == model.count("async_started")
        assert stats.calls_abandoned == 0 and stats.jobs_timed_out == HUNG
    finally:
        model._release.set()
        worker.close()


def test_the_job_deadline_is_passed_to_the_model_client(service, user):
    model = HangingChatModel(default=remember)
    worker = AutoMemoryWorker(service, LLMExtractor(model), job_timeout=5)
    try:
        assert worker.process(user, "t", [HumanMessage("I like tea", id="1")]).added == 1
        [timeout] = model._timeouts
        assert 4 < timeout <= 5  # the job's remaining time, as the request timeout
    finally:
        worker.close()


def test_fifty_hung_blocking_calls_do_not_starve_a_healthy_user(service):
    extractor = BlockingExtractor()
    worker = AutoMemoryWorker(service, extractor, job_timeout=TIMEOUT)
    try:
        reports = hang_everyone(worker)
        assert all(r.status == JobStatus.FAILED and r.timed_out for r in reports)
        report, elapsed = healthy_job(worker)
        assert report.status == JobStatus.COMPLETED, report.error
        assert elapsed < TIMEOUT
        assert worker.stats().calls_abandoned == HUNG  # each still holds its thread
    finally:
        extractor.release.set()
    assert wait_until(lambda: worker.stats().calls_in_flight == 0)
    assert worker.stats().calls_abandoned == 0
    worker.close()


def test_one_user_holds_at_most_max_calls_per_user(service):
    extractor = BlockingExtractor()
    worker = AutoMemoryWorker(service, extractor, job_timeout=0.2, max_calls_per_user=2)
    hog = UserKey("app", "hog")
    try:
        for thread in ("t0", "t1"):
            assert worker.process(hog, thread, [HumanMessage("x", id="1")]).timed_out
        started = time.monotonic()
        busy = worker.process(hog, "t2", [HumanMessage("x", id="1")])
        assert time.monotonic() - started < 0.15  # failed fast, did not wait out its timeout
        assert busy.status == JobStatus.FAILED and not busy.timed_out
        assert "ExtractorBusyError" in (busy.error or "") and "max_calls_per_user=2" in busy.error
        assert service.get_cursor(hog, "t2") is None
        other = worker.process(UserKey("app", "other"), "t", [HumanMessage("y", id="1")])
        assert other.status == JobStatus.COMPLETED
        stats = worker.stats()
        assert stats.jobs_user_busy == 1 and stats.calls_abandoned == 2
    finally:
        extractor.release.set()
    assert wait_until(lambda: worker.stats().calls_in_flight == 0)
    assert worker.process(hog, "t2", [HumanMessage("x", id="1")]).status == JobStatus.COMPLETED
    worker.close()


class Stubborn(VerbatimExtractor):
    """An async extractor that, once cancelled, still runs for `linger` seconds."""

    def __init__(self, linger: float) -> None:
        super().__init__()
        self.linger = linger
        self.ended = threading.Event()

    async def aextract(self, request: ExtractionRequest) -> list[MemoryOp]:
        if request.thread_id == "slow":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                await asyncio.sleep(self.linger)  # ignores the cancellation for a while
                self.ended.set()
        return self.extract(request)


def test_a_cancelled_call_counts_against_its_user_until_it_really_ends(service, user):
    extractor = Stubborn(linger=0.5)
    worker = AutoMemoryWorker(service, extractor, job_timeout=0.2, max_calls_per_user=1)
    try:
        assert worker.process(user, "slow", [HumanMessage("x", id="1")]).timed_out
        busy = worker.process(user, "t", [HumanMessage("y", id="1")])
        assert "ExtractorBusyError" in (busy.error or "")
        assert worker.stats().calls_abandoned == 1
        assert extractor.ended.wait(5)
        assert wait_until(lambda: worker.stats().calls_in_flight == 0)
        assert worker.process(user, "t", [HumanMessage("y", id="1")]).status == JobStatus.COMPLETED
    finally:
        worker.close()


def test_blocking_calls_stuck_past_the_global_limit_fail_fast(service, monkeypatch):
    from langmem_trpc.extraction import calls

    monkeypatch.setattr(calls, "MAX_STUCK_CALLS", 3)
    extractor = BlockingExtractor()
    worker = AutoMemoryWorker(service, extractor, job_timeout=0.2)
    try:
        for i in range(3):
            hung = worker.process(UserKey("app", f"hung-{i}"), "t", [HumanMessage("x", id="1")])
            assert hung.timed_out
        started = time.monotonic()
        refused = worker.process(UserKey("app", "other"), "t", [HumanMessage("y", id="1")])
        assert time.monotonic() - started < 0.15
        assert "ExtractorBusyError" in (refused.error or "") and "looks hung" in refused.error
        assert worker.stats().jobs_extractor_stuck == 1
    finally:
        extractor.release.set()
    assert wait_until(lambda: worker.stats().calls_abandoned == 0)
    again = worker.process(UserKey("app", "other"), "t", [HumanMessage("y", id="1")])
    assert again.status == JobStatus.COMPLETED
    worker.close()


def test_a_call_past_the_limit_waits_for_a_slot_within_its_timeout(service):
    class Slow(VerbatimExtractor):
        def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
            time.sleep(0.2)
            return super().extract(request)

    worker = AutoMemoryWorker(service, Slow(), job_timeout=5, max_calls_per_user=1)
    user = UserKey("app", "alice")
    with ThreadPoolExecutor(2) as pool:
        reports = list(
            pool.map(
                lambda t: worker.process(user, t, [HumanMessage(f"in {t}", id="1")]), ["a", "b"]
            )
        )
    assert [r.status for r in reports] == [JobStatus.COMPLETED, JobStatus.COMPLETED]
    assert worker.stats().jobs_user_busy == 0
    worker.close()


def _helpers(worker: AutoMemoryWorker) -> list[threading.Thread]:
    """The worker's call loop thread and call threads that are alive."""
    calls = worker._calls
    threads = [calls._loop._thread] if calls._loop is not None else []
    if calls._threads is not None:
        threads += list(calls._threads._threads)
    return [t for t in threads if t.is_alive()]


def test_close_and_stop_end_the_call_loop_and_threads(service, user):
    model = HangingChatModel(default=remember)
    worker = AutoMemoryWorker(service, LLMExtractor(model), job_timeout=5)
    assert worker.process(user, "t", [HumanMessage("I like tea", id="1")]).added == 1
    worker._calls._call_threads().submit(time.sleep, 0).result(5)  # start a call thread too
    started = _helpers(worker)
    assert [t.name for t in started] == ["langmem-extract-loop", "langmem-extract-1"]
    worker.close()
    assert wait_until(lambda: not any(t.is_alive() for t in started))
    # A later process() starts the loop again; stop() of a started worker ends it.
    report = worker.process(user, "t2", [HumanMessage("I like jazz", id="1")])
    assert report.status == JobStatus.COMPLETED and model.count("async_started") == 0
    worker.start()
    worker.enqueue(user, "t3", [HumanMessage("I like chess", id="1")])
    again = _helpers(worker)
    assert again and not set(again) & set(started)
    assert worker.stop(timeout=10)
    assert wait_until(lambda: not any(t.is_alive() for t in again))


def test_max_calls_per_user_must_be_positive(service):
    from langmem_trpc import ConfigurationError

    with pytest.raises(ConfigurationError, match="max_calls_per_user"):
        AutoMemoryWorker(service, VerbatimExtractor(), max_calls_per_user=0)


class SilentServer:
    """A TCP server that reads requests and never answers; records each connection's
    open and close times (the close is when the client hangs up)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.connections: list[dict[str, float]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            record = {"opened": time.monotonic()}
            self.connections.append(record)
            threading.Thread(target=self._drain, args=(conn, record), daemon=True).start()

    def _drain(self, conn: socket.socket, record: dict[str, float]) -> None:
        conn.settimeout(0.1)
        with conn:
            while not self.stopping.is_set():
                try:
                    if not conn.recv(65536):
                        record["closed"] = time.monotonic()
                        return
                except TimeoutError:
                    continue
                except OSError:
                    record["closed"] = time.monotonic()
                    return

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def silent_server():
    server = SilentServer()
    yield server
    server.close()


def openai_model(server: SilentServer, **kwargs: Any) -> Any:
    openai = pytest.importorskip("langchain_openai")
    return openai.ChatOpenAI(
        model="local", base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none", **kwargs
    )


def test_a_cancelled_http_model_call_closes_its_request(service, user, silent_server):
    """ChatOpenAI (default retries) against a server that never answers: at the job's
    deadline the request's connection is closed and no retry follows."""
    worker = AutoMemoryWorker(service, LLMExtractor(openai_model(silent_server)), job_timeout=0.5)
    try:
        report = worker.process(user, "t", [HumanMessage("I like tea", id="1")])
        ended = time.monotonic()
        assert report.status == JobStatus.FAILED and report.timed_out
        assert wait_until(lambda: "closed" in silent_server.connections[0], 2.0)
        assert silent_server.connections[0]["closed"] - ended < 1.0
        time.sleep(1.5)  # openai's retry back-off is under a second
        assert len(silent_server.connections) == 1
        assert worker.stats().calls_cancelled == 1
    finally:
        worker.close()


def test_a_blocking_model_call_gets_the_deadline_as_its_request_timeout(user, silent_server):
    extractor = LLMExtractor(openai_model(silent_server, max_retries=0))
    request = ExtractionRequest(user, "t", [HumanMessage("I like tea", id="1")], timeout=0.3)
    started = time.monotonic()
    with pytest.raises(ExtractionError, match="Timeout"):
        extractor.extract(request)
    assert time.monotonic() - started < 2.0


class _Completions(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint (keep-alive) whose every reply is one memory_add call."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "memory_add", "arguments": json.dumps({"memory": "Likes tea"})},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        body = json.dumps(
            {
                "id": "r",
                "object": "chat.completion",
                "created": 0,
                "model": "local",
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, *args: Any) -> None:  # clients hanging up are expected
        pass


def test_worker_and_app_loops_never_share_an_async_http_client(service):
    """langchain-openai shares one async HTTP client per base URL across the process; the
    app's agent model on its loop and the extractor's on the worker loop must not both use
    it (cross-loop use fails about one call in ten)."""
    openai = pytest.importorskip("langchain_openai")
    server = _Quiet(("127.0.0.1", 0), _Completions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    agent = openai.ChatOpenAI(model="local", base_url=url, api_key="none", max_retries=0)
    extractor = LLMExtractor(
        openai.ChatOpenAI(model="local", base_url=url, api_key="none", max_retries=0)
    )
    worker = AutoMemoryWorker(service, extractor, job_timeout=10)
    app_loop = asyncio.new_event_loop()
    app_thread = threading.Thread(target=app_loop.run_forever, daemon=True)
    app_thread.start()
    app_errors: list[str] = []

    async def app_calls() -> None:
        for _ in range(60):
            try:
                await agent.ainvoke("hi")
            except Exception as exc:
                app_errors.append(repr(exc))

    try:
        app = asyncio.run_coroutine_threadsafe(app_calls(), app_loop)
        reports = [
            worker.process(UserKey("app", f"u{i}"), "t", [HumanMessage("I like tea", id="1")])
            for i in range(60)
        ]
        app.result(60)
        assert [r.error for r in reports if r.status != JobStatus.COMPLETED] == []
        assert app_errors == []
    finally:
        worker.close()
        app_loop.call_soon_threadsafe(app_loop.stop)
        app_thread.join(5)
        server.shutdown()
        server.server_close()
    assert len(extractor._loop_models._by_loop) == 0  # the worker loop's client was closed


def test_each_loop_gets_its_own_client_only_where_the_library_shares_one():
    anthropic = pytest.importorskip("langchain_anthropic")
    openai = pytest.importorskip("langchain_openai")
    import httpx

    from langmem_trpc.extraction.extractor import _LoopModels

    shared = anthropic.ChatAnthropic(model="m", api_key="k", base_url="http://127.0.0.1:9")
    own = openai.ChatOpenAI(
        model="m", api_key="k", base_url="http://127.0.0.1:9", http_async_client=httpx.AsyncClient()
    )

    async def on_a_loop() -> None:
        models = _LoopModels(shared)
        copy = models.get()
        assert copy is not shared and models.get() is copy
        assert copy._async_client._client is not shared._async_client._client
        await models.aclose()
        assert _LoopModels(own).get() is own  # the client you passed is yours to manage

    asyncio.run(on_a_loop())


def test_a_worker_dropped_without_close_ends_its_call_loop(service, user):
    import gc

    worker = AutoMemoryWorker(service, LLMExtractor(HangingChatModel(default=remember)))
    assert worker.process(user, "t", [HumanMessage("I like tea", id="1")]).added == 1
    [loop_thread] = _helpers(worker)
    del worker
    gc.collect()
    assert wait_until(lambda: not loop_thread.is_alive())


def test_a_job_that_never_gets_a_slot_fails_as_busy_not_as_a_timeout(user):
    from langmem_trpc import ExtractorBusyError
    from langmem_trpc.extraction.calls import ModelCalls

    calls = ModelCalls(max_calls_per_user=1, timeout_label=0.2)
    held = calls._acquire(user, None, blocking=True)  # a live call of the same user
    request = ExtractionRequest(user, "t", [HumanMessage("x", id="1")])
    started = time.monotonic()
    with pytest.raises(ExtractorBusyError, match="whole timeout"):
        calls.run(VerbatimExtractor(), request, 0.2)
    assert 0.15 < time.monotonic() - started < 1.0
    calls._release(held)
    assert calls.run(VerbatimExtractor(), request, 0.2)  # the slot is free again
    assert calls.counts()["jobs_user_busy"] == 1
    calls.close()
