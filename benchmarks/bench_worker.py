"""Throughput and overhead of AutoMemoryWorker (the write path), on SQLite by default.

Scenarios (median of --runs runs each):

1. instant extractor (VerbatimExtractor: one add per job, no model), `workers`
   threads, every job queued, timed from the first enqueue until `stop()` has
   drained the queues: end-to-end jobs/s. Peer in the same run: the same
   writes done directly (`service.add` + `set_cursor` per job, no worker).
2. instant "model-like" extractor proposing one add per job, which goes
   through reconcile (one probe search) as an LLM proposal would.
3. extractor sleeping 200 ms (stand-in for model latency), 8 workers:
   saturation jobs/s, and an offered load of 35 jobs/s with the default
   queue (10) and on_full="sync" from one producer thread.
4. worker overhead per job, p50/p90, excluding the extractor call
   (`JobReport.seconds - extract_seconds`), sequential `process()`.
5. `LLMExtractor` over an instant chat model with native async (one
   memory_add call per job), sequential `process()` with job_timeout=30:
   the extractor call's latency p50/p90 (`extract_seconds`), which includes
   the hop to the worker's event loop (before #12.6: to a pool thread).
6. hung model calls: 50 users whose calls never return (job_timeout=1 s, run
   at once), then one healthy user's job: its status and seconds.

Run: .venv/bin/python benchmarks/bench_worker.py [--backend sqlite|memory|postgres] [--runs 3]
     [--scenarios 1,2,3,4]   (postgres: an embedded server, a fresh database per run)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult

import langmem_trpc
from langmem_trpc import AutoMemoryWorker, LLMExtractor, UserKey
from langmem_trpc.extraction import ExtractionRequest, MemoryOp, VerbatimExtractor
from langmem_trpc.extraction.delta import advance_cursor
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.testing import ScriptedChatModel, tool_call

TOPICS = ["tea", "hiking", "Go", "Oslo", "piano", "dogs", "chess", "sushi", "running", "jazz"]


_PG: list[object] = []  # the embedded server of a --backend postgres run


def make_service(backend: str, folder: Path, tag: str) -> MemoryService:
    """A fresh store of `--backend` (a scheme), opened with `langmem_trpc.open`:
    memory://, a new file under `folder`, or a new database on one embedded
    PostgreSQL server per run."""
    if backend == "memory":
        return langmem_trpc.open("memory://")
    if backend.startswith("postgres"):
        from langmem_trpc.testing.postgres import PostgresTestServer

        if not _PG:
            _PG.append(PostgresTestServer().start())
        server = _PG[0]
        assert isinstance(server, PostgresTestServer)
        return langmem_trpc.open(server.create_database("bench"))
    return langmem_trpc.open(f"{backend}://{folder / f'{tag}.{backend}'}")


def message(user: int, turn: int) -> HumanMessage:
    topic = TOPICS[(user + turn) % len(TOPICS)]
    return HumanMessage(
        f"User {user} mentions {topic} detail number {turn} today", id=f"{user}-{turn}"
    )


def workload(users: int, turns: int) -> list[tuple[UserKey, list[HumanMessage]]]:
    """Jobs in arrival order: each turn of each user, with the thread so far."""
    histories: dict[int, list[HumanMessage]] = {u: [] for u in range(users)}
    jobs = []
    for turn in range(turns):
        for u in range(users):
            histories[u].append(message(u, turn))
            jobs.append((UserKey("bench", f"user-{u}"), list(histories[u])))
    return jobs


class ModelLike:
    """Answers instantly with one add per job, as an LLM would propose (goes through reconcile)."""

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        return [MemoryOp.add(str(request.messages[-1].content), topics=["bench"])]


class Sleepy(VerbatimExtractor):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        time.sleep(self.seconds)
        return super().extract(request)


def queued_rate(service: MemoryService, extractor: object, jobs: list, workers: int) -> float:
    worker = AutoMemoryWorker(service, extractor, workers=workers, queue_size=len(jobs))  # type: ignore[arg-type]
    worker.start()
    started = time.perf_counter()
    for user, messages in jobs:
        worker.enqueue(user, "t", messages)
    assert worker.stop(timeout=600)
    elapsed = time.perf_counter() - started
    stats = worker.stats()
    assert stats.jobs_run == len(jobs) and stats.jobs_failed == 0, stats
    return len(jobs) / elapsed


def direct_rate(service: MemoryService, jobs: list) -> float:
    """Peer: the same writes without the worker (add the message, write the cursor)."""
    started = time.perf_counter()
    for user, messages in jobs:
        service.add(user, str(messages[-1].content), kind="episode")
        service.set_cursor(user, advance_cursor("t", messages, started_at()))
    return len(jobs) / (time.perf_counter() - started)


def started_at() -> datetime:
    return datetime.now(timezone.utc)


def offered_load(
    service: MemoryService, rate: float, seconds: float, users: int
) -> dict[str, float]:
    """One producer offers `rate` jobs/s to 8 workers with the default queue (10) and on_full="sync"."""
    worker = AutoMemoryWorker(service, Sleepy(0.2), workers=8).start()
    histories: dict[int, list[HumanMessage]] = {u: [] for u in range(users)}
    total = int(rate * seconds)
    started = time.perf_counter()
    for i in range(total):
        u = i % users
        histories[u].append(message(u, len(histories[u])))
        target = started + i / rate
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        worker.enqueue(UserKey("bench", f"user-{u}"), "t", list(histories[u]))
    offered_until = time.perf_counter()
    assert worker.stop(timeout=120)
    drained = time.perf_counter()
    stats = worker.stats()
    return {
        "offered": total / (offered_until - started),
        "completed": stats.jobs_run + stats.jobs_nothing_new,
        "total": total,
        "drain_s": drained - offered_until,
        "sync_fallbacks": stats.jobs_sync,
        "failed": stats.jobs_failed,
    }


def overhead(service: MemoryService, jobs: list, job_timeout: float | None) -> tuple[float, float]:
    worker = AutoMemoryWorker(service, VerbatimExtractor(), job_timeout=job_timeout)
    samples = []
    for user, messages in jobs:
        report = worker.process(user, "t", messages)
        samples.append((report.seconds - report.extract_seconds) * 1e6)
    samples.sort()
    return samples[len(samples) // 2], samples[int(len(samples) * 0.9)]


class AsyncModel(ScriptedChatModel):
    """Answers at once with one memory_add call, natively async; "hang" messages never answer
    (`ainvoke` awaits forever; `invoke` blocks until `release` is set)."""

    release: Any = None

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        if "hang" in str(messages[-1].content):
            self.release.wait(60)
        return ChatResult(generations=[ChatGeneration(message=self._next_reply(messages))])

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        if "hang" in str(messages[-1].content):
            await asyncio.Event().wait()
        return ChatResult(generations=[ChatGeneration(message=self._next_reply(messages))])


def remember(messages: list[BaseMessage]) -> AIMessage:
    text = str(messages[-1].content)
    return AIMessage("", tool_calls=[tool_call("memory_add", {"memory": text})])


def llm_call_latency(service: MemoryService, jobs: list) -> tuple[float, float]:
    worker = AutoMemoryWorker(service, LLMExtractor(AsyncModel(default=remember)), job_timeout=30)
    samples = []
    for user, messages in jobs:
        report = worker.process(user, "t", messages)
        assert report.error is None, report.error
        samples.append(report.extract_seconds * 1e6)
    getattr(worker, "close", lambda: None)()  # older workers have no close()
    samples.sort()
    return samples[len(samples) // 2], samples[int(len(samples) * 0.9)]


def after_hung_calls(service: MemoryService, hung: int = 50) -> tuple[str, float]:
    logging.getLogger("langmem_trpc").setLevel(logging.ERROR)  # 50 expected timeouts
    model = AsyncModel(default=remember, release=threading.Event())
    worker = AutoMemoryWorker(service, LLMExtractor(model), job_timeout=1.0)

    def hang(i: int) -> object:
        return worker.process(UserKey("bench", f"hung-{i}"), "t", [HumanMessage("hang", id="h")])

    with ThreadPoolExecutor(hung) as pool:
        list(pool.map(hang, range(hung)))
    started = time.perf_counter()
    report = worker.process(UserKey("bench", "healthy"), "t", [HumanMessage("I like tea", id="1")])
    elapsed = time.perf_counter() - started
    model.release.set()
    getattr(worker, "close", lambda: None)()
    return report.status.value, elapsed


def median_of(runs: int, fn: Callable[[int], float]) -> tuple[float, list[float]]:
    values = [fn(i) for i in range(runs)]
    return statistics.median(values), values


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--backend", default="sqlite", help="a scheme: sqlite, memory, postgres, ..."
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument(
        "--turns", type=int, default=40, help="jobs per user in the instant scenarios"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--load-seconds", type=float, default=10.0)
    parser.add_argument(
        "--scenarios", default="1,2,3,4", help="comma-separated scenario numbers to run"
    )
    args = parser.parse_args()
    wanted = {int(n) for n in args.scenarios.split(",")}
    jobs = workload(args.users, args.turns)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"backend={args.backend} jobs={len(jobs)} users={args.users} runs={args.runs}")

        def run(name: str, fn: Callable[[MemoryService], float]) -> float:
            med, values = median_of(
                args.runs, lambda i: fn(make_service(args.backend, folder, f"{name}{i}"))
            )
            print(f"  {name:<34} median {med:8.1f} jobs/s   runs {[round(v, 1) for v in values]}")
            return med

        if 1 in wanted:
            scenario_1(args, run, jobs)
        if 2 in wanted:
            print("2. instant model-like extractor (reconcile probe per add)")
            run("model-like (worker)", lambda s: queued_rate(s, ModelLike(), jobs, args.workers))
        if 3 in wanted:
            scenario_3(args, run, folder)
        if 4 in wanted:
            scenario_4(args, folder)
    for server in _PG:
        server.stop()  # type: ignore[attr-defined]


def scenario_1(args: argparse.Namespace, run: Callable[..., float], jobs: list) -> None:
    print(f"1. instant extractor, {args.workers} workers, queued, end to end")
    verbatim = run(
        "verbatim (worker)", lambda s: queued_rate(s, VerbatimExtractor(), jobs, args.workers)
    )
    direct = run("peer: direct add + set_cursor", lambda s: direct_rate(s, jobs))
    print(f"  ratio worker/direct = {verbatim / direct:.2f}")


def scenario_3(args: argparse.Namespace, run: Callable[..., float], folder: Path) -> None:
    print("3. extractor sleeping 200 ms, 8 workers")
    sleepy_jobs = workload(160, 2)
    run("saturation (320 jobs, 160 users)", lambda s: queued_rate(s, Sleepy(0.2), sleepy_jobs, 8))
    load = offered_load(make_service(args.backend, folder, "load"), 35.0, args.load_seconds, 200)
    print(
        f"  offered {load['offered']:.1f} jobs/s for {args.load_seconds:.0f} s: completed "
        f"{load['completed']:.0f}/{load['total']:.0f}, queues drained {load['drain_s']:.2f} s after the last "
        f"offer, sync fallbacks {load['sync_fallbacks']:.0f}, failed {load['failed']:.0f}"
    )


def scenario_4(args: argparse.Namespace, folder: Path) -> None:
    print("4. worker overhead per job excluding the extractor (sequential process())")
    small = workload(20, 25)
    for timeout in (30.0, None):
        p50s, p90s = zip(
            *(
                overhead(make_service(args.backend, folder, f"oh{timeout}{i}"), small, timeout)
                for i in range(args.runs)
            ),
            strict=True,
        )
        print(
            f"  job_timeout={timeout!s:<5} p50 {statistics.median(p50s):7.0f} us   p90 {statistics.median(p90s):7.0f} us"
        )

        print("5. LLMExtractor, instant async chat model: extractor call latency (process())")
        p50s, p90s = zip(
            *(
                llm_call_latency(make_service(args.backend, folder, f"llm{i}"), small)
                for i in range(args.runs)
            ),
            strict=True,
        )
        print(
            f"  job_timeout=30  p50 {statistics.median(p50s):7.0f} us   p90 {statistics.median(p90s):7.0f} us"
        )
        status, seconds = after_hung_calls(make_service(args.backend, folder, "hung"))
        print(f"6. after 50 hung calls, a healthy user's job: {status} in {seconds:.3f} s")


if __name__ == "__main__":
    main()
