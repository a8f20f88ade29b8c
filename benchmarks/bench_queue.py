"""The PostgreSQL job queue and `langmem-trpc worker` processes, against the in-process worker.

Scenarios (medians of --runs runs, a fresh database per run on one embedded server):

1. enqueue latency from one producer: `PostgresJobQueue.enqueue` of a new thread's first
   turn (a one-message delta), sequential, p50 / p99 ms; the same for `aenqueue`.
2. end to end with an instant extractor (`--extractor verbatim`): 1, 2 and 4 worker
   processes (`--concurrency 4` each) already running; jobs/s from the first enqueue
   until no job is waiting or running. Every job is a distinct thread of one of
   --users users, enqueued by 4 producer threads.
3. the same with an extractor sleeping 200 ms (a model's latency), `--concurrency 8`
   per process: jobs/s, and per process (ideal: 8 / 0.2 s = 40); and one process with
   64 jobs of only 8 users (per-user order: at most one job of a user runs at a time).
4. the in-process `AutoMemoryWorker` in the same run, on the same PostgreSQL: the
   same jobs, instant (2 threads) and sleeping 200 ms (8 threads).
5. a backlog: --jobs jobs queued with no worker running, then one worker process
   (`--concurrency 4`, instant) drains it: jobs/s; and the cost of one
   `procrastinate_fetch_job_v2` call with 100 / 1,000 / 3,000 jobs waiting (p50 of 20).
6. the floor: bare procrastinate, a no-op async task, worker processes with the same
   settings as `langmem-trpc worker` (`--concurrency 4`; 1, 2 and 4 processes) on the
   same server; 4 producer threads defer the same jobs with the same locks, one
   `procrastinate_defer_jobs_v1` each. What the queue costs with no memory work at all.

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_queue.py [--runs 3] [--jobs 1000]
     [--scenarios 1,2,3,4,5,6] [--processes 1,2,4]
The machine's load average is printed before and after; see docs/bench-worker.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_job_cpu import TICK, server_cpu, stat  # benchmarks/ is sys.path[0] (or on PYTHONPATH)
from langchain_core.messages import HumanMessage

from langmem_trpc import AutoMemoryWorker, UserKey
from langmem_trpc.extraction import ExtractionRequest, MemoryOp, VerbatimExtractor
from langmem_trpc.testing.postgres import PostgresTestServer

ROOT = Path(__file__).resolve().parents[1]
SLEEPY = "bench_queue:Sleepy"  # importable by the workers: benchmarks/ is on their PYTHONPATH
FLOOR_QUEUE = "floor"
POLL = 0.05
"""Seconds between the drain checks (each a count of waiting jobs, on the measured server)."""


class Rows(list[tuple[str, str, str]]):
    """The table's rows; each is also printed (stderr) as soon as it is measured."""

    def append(self, row: tuple[str, str, str]) -> None:
        super().append(row)
        print(" | ".join(row), file=sys.stderr, flush=True)


class Sleepy(VerbatimExtractor):
    """Verbatim extraction after a 200 ms sleep (a model call's latency)."""

    seconds = 0.2

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        time.sleep(self.seconds)
        return super().extract(request)


def jobs(count: int, users: int, tag: str) -> list[tuple[UserKey, str, list[HumanMessage]]]:
    """`count` one-message deltas, each on a thread of its own, spread over `users` users."""
    return [
        (
            UserKey("bench", f"user-{n % users}"),
            f"{tag}-{n}",
            [HumanMessage(f"user {n % users} says fact {n} ({tag})", id=f"{tag}-{n}")],
        )
        for n in range(count)
    ]


def fresh_database(server: PostgresTestServer) -> str:
    from langmem_trpc.backends.postgres import PostgresMemoryService
    from langmem_trpc.queue import PostgresJobQueue

    for conn in _CONNECTIONS.values():  # the previous run's drain-check connection
        conn.close()
    _CONNECTIONS.clear()
    url = server.create_database("bench_queue")
    service = PostgresMemoryService(url, pool_size=1)
    service.setup()
    service.close()
    with PostgresJobQueue(url) as queue:
        queue.setup()
    return url


_CONNECTIONS: dict[str, Any] = {}


def count(url: str, query: str) -> int:
    """One number; one connection per database for the whole run (a connection per drain
    check cost the measured server a backend start every 10 ms)."""
    import psycopg

    conn = _CONNECTIONS.get(url)
    if conn is None or conn.closed:
        conn = _CONNECTIONS[url] = psycopg.connect(url, autocommit=True)
    row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


def last_finish(url: str) -> float:
    """Epoch seconds of the last job's end (its succeeded event), so a run's window ends there
    and not at the drain check's next poll."""
    conn = _CONNECTIONS[url]
    row = conn.execute(
        "SELECT extract(epoch FROM max(at)) FROM procrastinate_events WHERE type = 'succeeded'"
    ).fetchone()
    return float(row[0]) if row and row[0] is not None else time.time()


Run = tuple[float, tuple[float, float, float]]
"""Jobs/s, and CPU ms per job of (worker processes, PostgreSQL, producers) (`Cpu`)."""


class Cpu:
    """CPU seconds of the worker processes, of the PostgreSQL server (the postmaster and its
    children, from /proc) and of this process (the producers) over a run's window."""

    def __init__(self, url: str, workers: list[int]) -> None:
        row = _CONNECTIONS[url].execute("SELECT pg_backend_pid()").fetchone()
        self.postmaster, self.workers = stat(row[0])[0], workers
        self.start = self.now()

    def now(self) -> tuple[float, float, float]:
        workers = sum(sum(stat(pid)[1][:2]) for pid in self.workers) / TICK
        return workers, server_cpu(self.postmaster), time.process_time()

    def per_job(self, jobs: int) -> tuple[float, float, float]:
        """(workers, PostgreSQL, producers) ms of CPU per job since the start."""
        (w0, s0, p0), (w1, s1, p1) = self.start, self.now()
        return (w1 - w0) / jobs * 1000, (s1 - s0) / jobs * 1000, (p1 - p0) / jobs * 1000


def pending(url: str) -> int:
    return count(url, "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo','doing')")


def worker_argv(url: str, extractor: str, concurrency: int) -> list[str]:
    return [sys.executable, "-m", "langmem_trpc.cli", "worker", "--db", url,
            "--extractor", extractor, "--concurrency", str(concurrency)]  # fmt: skip


def floor_argv(url: str, concurrency: int) -> list[str]:
    return [sys.executable, __file__, "--floor-worker", url, "--concurrency", str(concurrency)]


@contextmanager
def worker_processes(url: str, n: int, argv: list[str]) -> Iterator[list[int]]:
    """`n` running worker processes (`argv`), registered with the queue; SIGTERM on exit."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")]))
    procs = [
        subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )  # fmt: skip
        for _ in range(n)
    ]
    try:
        deadline = time.monotonic() + 120
        while count(url, "SELECT count(*) FROM procrastinate_workers") < n:
            dead = [p for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(
                    f"workers did not start: {dead[0].stderr.read() if dead else ''}"
                )
            time.sleep(0.1)
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def floor_worker(url: str, concurrency: int) -> None:
    """A bare procrastinate worker: a no-op task, `QueueWorker`'s settings; stops on SIGTERM."""
    from procrastinate import App, PsycopgConnector
    from procrastinate import worker as worker_module

    connector = PsycopgConnector(conninfo=url, min_size=1, max_size=concurrency + 4)
    app = App(connector=connector)

    @app.task(name="bench.noop", queue=FLOOR_QUEUE)
    async def noop(**_: Any) -> None:
        return None

    async def main() -> None:
        async with app.open_async():
            worker = worker_module.Worker(
                app=app, queues=[FLOOR_QUEUE], concurrency=concurrency,
                fetch_job_polling_interval=5.0, abort_job_polling_interval=5.0,
                update_heartbeat_interval=10.0, stalled_worker_timeout=30.0,
                delete_jobs="never", install_signal_handlers=True,
            )  # fmt: skip
            await worker.run()

    asyncio.run(main())


def floor_rate(url: str, workload: list[Any], processes: int) -> Run:
    """Jobs/s of bare procrastinate (scenario 6): defer with the same locks, no-op task."""
    from psycopg_pool import ConnectionPool

    from langmem_trpc.queue._payload import JobPayload, lock_keys
    from langmem_trpc.queue.producer import DEFER

    def defer(job: tuple[UserKey, str, list[HumanMessage]]) -> None:
        lock, queueing = lock_keys(FLOOR_QUEUE, job[0], job[1])
        args = JobPayload(*job[:2], tuple(job[2])).chunked_json(1_000_000)[0]
        with pool.connection() as conn:
            conn.execute(DEFER, (FLOOR_QUEUE, "bench.noop", lock, queueing, args))

    with worker_processes(url, processes, floor_argv(url, 4)) as pids:
        with ConnectionPool(url, min_size=4, max_size=4, kwargs={"autocommit": True}) as pool:
            pool.wait()
            cpu, started = Cpu(url, pids), time.time()
            with ThreadPoolExecutor(4) as threads:
                list(threads.map(defer, workload))
            while pending(url):
                time.sleep(POLL)
            per_job = cpu.per_job(len(workload))
    return len(workload) / (last_finish(url) - started), per_job


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def enqueue_latency(url: str, n: int) -> tuple[float, float, float, float]:
    """(sync p50, sync p99, async p50, async p99) in ms."""
    from langmem_trpc.queue import PostgresJobQueue

    sync_ms: list[float] = []
    with PostgresJobQueue(url) as queue:
        for user, thread, messages in jobs(n, 100, "lat"):
            started = time.perf_counter()
            queue.enqueue(user, thread, messages)
            sync_ms.append((time.perf_counter() - started) * 1000)

    async def run_async() -> list[float]:
        out = []
        async with PostgresJobQueue(url) as queue:
            for user, thread, messages in jobs(n, 100, "alat"):
                started = time.perf_counter()
                await queue.aenqueue(user, thread, messages)
                out.append((time.perf_counter() - started) * 1000)
        return out

    async_ms = asyncio.run(run_async())
    return (percentile(sync_ms, 0.5), percentile(sync_ms, 0.99),
            percentile(async_ms, 0.5), percentile(async_ms, 0.99))  # fmt: skip


def queue_rate(
    url: str, workload: list[Any], processes: int, extractor: str, concurrency: int
) -> Run:
    """Jobs/s through worker processes, first enqueue to the last job's end."""
    from langmem_trpc.queue import PostgresJobQueue

    argv = worker_argv(url, extractor, concurrency)
    with worker_processes(url, processes, argv) as pids, PostgresJobQueue(url) as queue:
        cpu, started = Cpu(url, pids), time.time()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda job: queue.enqueue(*job), workload))
        while pending(url):
            time.sleep(POLL)
        per_job = cpu.per_job(len(workload))
    failed = count(url, "SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'")
    if failed:
        raise RuntimeError(f"{failed} jobs did not succeed")
    return len(workload) / (last_finish(url) - started), per_job


def in_process_rate(url: str, workload: list[Any], threads: int, extractor: Any) -> float:
    """Jobs/s through AutoMemoryWorker threads on the same database, first enqueue to drained."""
    from langmem_trpc.backends.postgres import PostgresMemoryService

    service = PostgresMemoryService(url, pool_size=max(4, threads))
    try:
        worker = AutoMemoryWorker(service, extractor, workers=threads, queue_size=len(workload))
        worker.start()
        started = time.perf_counter()
        for job in workload:
            worker.enqueue(*job)
        assert worker.stop(timeout=600)
        elapsed = time.perf_counter() - started
        stats = worker.stats()
        assert stats.jobs_failed == 0, stats
    finally:
        service.close()
    return len(workload) / elapsed


def backlog_rate(url: str, workload: list[Any]) -> float:
    """Jobs/s of one worker process started after `workload` was queued (start-up excluded)."""
    from langmem_trpc.queue import PostgresJobQueue

    with PostgresJobQueue(url) as queue:
        for job in workload:
            queue.enqueue(*job)
    with worker_processes(url, 1, worker_argv(url, "verbatim", 4)):
        started, left = time.perf_counter(), pending(url)
        while pending(url):
            time.sleep(POLL)
        return left / (time.perf_counter() - started)


def fetch_cost(url: str, waiting: int) -> float:
    """p50 ms of one fetch (and release) with `waiting` jobs of distinct users waiting."""
    import psycopg

    from langmem_trpc.queue import PostgresJobQueue

    with PostgresJobQueue(url) as queue:
        for user, thread, messages in jobs(waiting, waiting, f"f{waiting}"):
            queue.enqueue(user, thread, messages)
    times = []
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT * FROM procrastinate_register_worker_v1()").fetchone()
        assert row is not None
        for _ in range(20):
            started = time.perf_counter()
            with conn.transaction():
                conn.execute(
                    "SELECT id FROM procrastinate_fetch_job_v2(ARRAY['langmem@bench'], %s)",
                    (row[0],),
                ).fetchone()
                times.append((time.perf_counter() - started) * 1000)
                raise psycopg.Rollback()  # every sample sees the same waiting jobs
    return statistics.median(times)


def scenario_rows(
    server: PostgresTestServer, args: argparse.Namespace
) -> list[tuple[str, str, str]]:
    """Run the chosen scenarios; one (name, median, every run) row per figure."""
    scenarios = {int(s) for s in args.scenarios.split(",")}
    counts = [int(p) for p in args.processes.split(",")]
    runs = range(args.runs)
    rows = Rows()
    if 1 in scenarios:
        lat = [enqueue_latency(fresh_database(server), args.enqueues) for _ in runs]
        p50, p99, ap50, ap99 = (statistics.median(r[i] for r in lat) for i in range(4))
        every = ", ".join(f"{r[0]:.2f}/{r[1]:.2f}" for r in lat)
        rows.append(("1. enqueue p50 / p99 (sync)", f"{p50:.2f} / {p99:.2f} ms", every))
        every = ", ".join(f"{r[2]:.2f}/{r[3]:.2f}" for r in lat)
        rows.append(("1. aenqueue p50 / p99", f"{ap50:.2f} / {ap99:.2f} ms", every))
    for n in counts if 2 in scenarios else []:
        work = jobs(args.jobs, args.users, "i")
        runs_ = [queue_rate(fresh_database(server), work, n, "verbatim", 4) for _ in runs]
        rate_rows(rows, f"2. instant, {n} worker process(es) x 4", runs_, "{:.0f} jobs/s")
    for n in counts if 3 in scenarios else []:
        work = jobs(200 * n, 32 * n, "s")  # 5 s of work at the ideal 40 jobs/s per process
        runs_ = [queue_rate(fresh_database(server), work, n, SLEEPY, 8) for _ in runs]
        name = f"3. 200 ms extractor, {n} process(es) x 8"
        rate_rows(rows, name, runs_, "{:.1f} jobs/s ({per:.1f}/process)", n)
    if 3 in scenarios:
        work = jobs(64, 8, "u")
        runs_ = [queue_rate(fresh_database(server), work, 1, SLEEPY, 8) for _ in runs]
        rate_rows(
            rows, "3. 200 ms extractor, 1 process x 8, 8 users x 8 jobs", runs_, "{:.1f} jobs/s"
        )
    if 4 in scenarios:
        work = jobs(args.jobs, args.users, "p")
        values = [
            in_process_rate(fresh_database(server), work, 2, VerbatimExtractor()) for _ in runs
        ]
        name = "4. AutoMemoryWorker instant, 2 threads"
        rows.append((name, f"{statistics.median(values):.0f} jobs/s", _fmt(values)))
        work = jobs(200, 64, "ps")
        values = [in_process_rate(fresh_database(server), work, 8, Sleepy()) for _ in runs]
        name = "4. AutoMemoryWorker 200 ms, 8 threads"
        rows.append((name, f"{statistics.median(values):.1f} jobs/s", _fmt(values)))
    if 5 in scenarios:
        work = jobs(args.jobs, args.jobs, "b")
        values = [backlog_rate(fresh_database(server), work) for _ in runs]
        name = f"5. backlog of {args.jobs}, 1 process x 4"
        rows.append((name, f"{statistics.median(values):.0f} jobs/s", _fmt(values)))
        for waiting in (100, 1000, 3000):
            values = [fetch_cost(fresh_database(server), waiting) for _ in runs]
            name = f"5. one fetch_job, {waiting} waiting"
            rows.append((name, f"{statistics.median(values):.1f} ms", _fmt(values)))
    for n in counts if 6 in scenarios else []:
        work = jobs(args.jobs, args.users, "f")
        runs_ = [floor_rate(fresh_database(server), work, n) for _ in runs]
        name = f"6. floor: bare procrastinate no-op, {n} process(es) x 4"
        rate_rows(rows, name, runs_, "{:.0f} jobs/s")
    return rows


def rate_rows(rows: Rows, name: str, runs: list[Run], shown: str, processes: int = 1) -> None:
    """The jobs/s row, then the CPU per job row of the same runs."""
    rates = [r[0] for r in runs]
    median = statistics.median(rates)
    rows.append((name, shown.format(median, per=median / processes), _fmt(rates)))
    cpu = [statistics.median(r[1][i] for r in runs) for i in range(3)]
    every = " / ".join("+".join(f"{v:.1f}" for v in r[1]) for r in runs)
    total = f"{sum(cpu):.1f} ms ({cpu[0]:.1f} + {cpu[1]:.1f} + {cpu[2]:.1f})"
    rows.append((f"{name}: CPU per job (workers + PostgreSQL + producers)", total, every))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1000, help="jobs per instant-extractor run")
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--enqueues", type=int, default=1000)
    parser.add_argument("--scenarios", default="1,2,3,4,5,6")
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--floor-worker", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_worker:  # one worker process of scenario 6
        floor_worker(args.floor_worker, args.concurrency)
        return
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"load average before: {load}; {os.cpu_count()} CPUs; runs={args.runs}")
    with PostgresTestServer() as server:
        rows = scenario_rows(server, args)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    width = max(len(r[0]) for r in rows)
    print(f"| {'scenario':<{width}} | median | runs |")
    print(f"|{'-' * (width + 2)}|---|---|")
    for name, median, every in rows:
        print(f"| {name:<{width}} | {median} | {every} |")


def _fmt(values: list[float]) -> str:
    return " / ".join(f"{v:.1f}" for v in values)


if __name__ == "__main__":
    main()
