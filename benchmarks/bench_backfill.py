"""Backfill throughput: threads per second and CPU per message, beside the live hook's job cost.

The source is a SqliteSaver file of THREADS threads x MESSAGES messages (one user
message and one reply per checkpoint, 30 minutes apart, a day's gap half way: two
sittings, so two batches per thread), 10 threads per user, messages without their own
times (the backfill walks each thread's checkpoints for them). The verbatim extractor.

Targets: SQLite (in-process backfill), PostgreSQL (in-process, and `--queue` to two
`langmem-trpc worker --drain` processes). Each run starts from an empty store; the
median of REPEATS runs is printed. CPU: this process (`time.process_time`), the worker
processes (`RUSAGE_CHILDREN`) and, on PostgreSQL, the server's processes (/proc).
"live job" is the live hook's steady-state job on the same store in the same run: a
20-message thread whose last run added 2 messages (`AutoMemoryWorker.process`).

Run: PYTHONPATH=$PWD python benchmarks/bench_backfill.py [--threads 1000] [--messages 20]
     [--repeats 3] [--skip-postgres] [--skip-queue]
Linux only (reads /proc). Not a test.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.sqlite import SqliteSaver

import langmem_trpc
from langmem_trpc import AutoMemoryWorker, UserKey, VerbatimExtractor
from langmem_trpc.history import backfill  # imported before any timing

TICK = os.sysconf("SC_CLK_TCK")
START = datetime(2025, 1, 1, tzinfo=timezone.utc)


def make_source(path: Path, threads: int, messages: int) -> None:
    """THREADS threads of MESSAGES messages in a SqliteSaver file, one checkpoint per turn."""
    saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    turns = messages // 2
    for t in range(threads):
        ident = {"user_id": f"u{t // 10}", "app_name": "bench"}
        config: Any = {"configurable": {"thread_id": f"t{t}", "checkpoint_ns": "", **ident}}
        history: list[BaseMessage] = []
        version = None
        for turn in range(turns):
            when = START + timedelta(days=t % 300, minutes=30 * turn)
            if turn >= turns // 2:
                when += timedelta(days=1)
            history = [
                *history,
                HumanMessage(
                    f"thread {t} turn {turn}: I went hiking near lake {turn}", id=f"{t}-h{turn}"
                ),
                AIMessage(f"Noted, turn {turn}.", id=f"{t}-a{turn}"),
            ]
            checkpoint = empty_checkpoint()
            checkpoint["id"] = str(uuid6(clock_seq=turn))
            checkpoint["ts"] = when.isoformat()
            version = saver.get_next_version(version, None)
            checkpoint["channel_values"] = {"messages": history}
            checkpoint["channel_versions"] = {"messages": version}
            saved = saver.put(
                config, checkpoint, {"source": "loop", "step": turn}, {"messages": version}
            )
            config = {"configurable": {**config["configurable"], **saved["configurable"]}}
    saver.conn.commit()
    saver.conn.close()


def stat(pid: int) -> tuple[int, list[int]]:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[1]), [int(x) for x in parts[11:15]]


def server_cpu(postmaster: int | None) -> float:
    """CPU seconds of the postmaster and its live children (0 without one)."""
    if postmaster is None:
        return 0.0
    total = sum(stat(postmaster)[1])
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                ppid, times = stat(int(name))
            except (OSError, IndexError):
                continue
            if ppid == postmaster:
                total += times[0] + times[1]
    return total / TICK


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(run: Callable[[], Any], postmaster: int | None) -> dict[str, float]:
    wall, cpu, kids, server = (
        time.perf_counter(),
        time.process_time(),
        children_cpu(),
        server_cpu(postmaster),
    )
    run()
    return {
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "workers_cpu": children_cpu() - kids,
        "server_cpu": server_cpu(postmaster) - server,
    }


def live_jobs(service: Any, jobs: int, messages: int) -> dict[str, float]:
    """The hook's steady-state job: 2 new messages on a thread whose cursor covers the rest."""
    worker = AutoMemoryWorker(service, VerbatimExtractor())
    threads = []
    for j in range(jobs):
        history: list[BaseMessage] = []
        for turn in range(messages // 2):
            history += [
                HumanMessage(f"live {j} turn {turn}: I cooked pasta", id=f"l{j}-h{turn}"),
                AIMessage("ok", id=f"l{j}-a{turn}"),
            ]
        user = UserKey("live", f"u{j % 50}")
        worker.process(user, f"live-{j}", history[:-2])
        threads.append((user, f"live-{j}", history))
    wall, cpu = time.perf_counter(), time.process_time()
    for user, tid, history in threads:
        worker.process(user, tid, history)
    worker.close()
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def report(name: str, runs: list[dict[str, float]], threads: int, messages: int) -> None:
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    total_cpu = med["cpu"] + med["workers_cpu"] + med["server_cpu"]
    print(
        f"{name:<28} {threads / med['wall']:8.1f} threads/s  wall {med['wall']:7.2f} s  "
        f"CPU/message {1e6 * total_cpu / (threads * messages):7.0f} us "
        f"(client {1e6 * med['cpu'] / (threads * messages):.0f}, workers "
        f"{1e6 * med['workers_cpu'] / (threads * messages):.0f}, server "
        f"{1e6 * med['server_cpu'] / (threads * messages):.0f})  [{len(runs)} runs]"
    )


def bench_target(
    name: str,
    open_store: Callable[[], Any],
    args: argparse.Namespace,
    source: Path,
    postmaster: int | None,
) -> None:
    runs, live = [], []
    for _ in range(args.repeats):
        with open_store() as service:
            saver = SqliteSaver(sqlite3.connect(source, check_same_thread=False))
            done: list[Any] = []

            def run(saver: Any = saver, service: Any = service, done: list[Any] = done) -> None:
                extractor = VerbatimExtractor()
                done.append(backfill(saver, service, extractor, concurrency=args.concurrency))

            runs.append(measure(run, postmaster))
            assert done[0].ok and done[0].batches == 2 * args.threads, done[0]
            live.append(live_jobs(service, args.live_jobs, args.messages))
    report(f"{name} backfill", runs, args.threads, args.messages)
    med = {k: statistics.median(r[k] for r in live) for k in live[0]}
    print(
        f"{name + ' live job':<28} {1e3 * med['cpu'] / args.live_jobs:8.2f} ms CPU/job (client), "
        f"{1e3 * med['wall'] / args.live_jobs:.2f} ms wall/job, 2 new messages each"
    )


def enqueue_and_drain(url: str, saver: Any, service: Any, queue: Any, threads: int) -> None:
    """Queue every thread, then drain the queue with two `langmem-trpc worker` processes."""
    report = backfill(saver, service, queue=queue)
    assert report.enqueued == threads, report
    command = [sys.executable, "-m", "langmem_trpc.cli", "worker", "--db", url]
    command += ["--extractor", "verbatim", "--drain", "--concurrency", "2"]
    workers = [subprocess.Popen(command, stderr=subprocess.DEVNULL) for _ in range(2)]
    for worker in workers:
        assert worker.wait() == 0


def bench_queue(
    url_for: Callable[[str], str], args: argparse.Namespace, source: Path, postmaster: int | None
) -> None:
    from langmem_trpc.queue import PostgresJobQueue

    runs = []
    for repeat in range(args.repeats):
        url = url_for(f"queue{repeat}")
        with langmem_trpc.open(url) as service, PostgresJobQueue(url, service=service) as queue:
            queue.setup()
            saver = SqliteSaver(sqlite3.connect(source, check_same_thread=False))

            run = functools.partial(enqueue_and_drain, url, saver, service, queue, args.threads)
            runs.append(measure(run, postmaster))
            assert service.count(UserKey("bench", "u0")) == 10 * args.messages // 2
    report("postgres queue, 2 workers", runs, args.threads, args.messages)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--live-jobs", type=int, default=200)
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-queue", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "checkpoints.db"
        started = time.perf_counter()
        make_source(source, args.threads, args.messages)
        print(
            f"source: {args.threads} threads x {args.messages} messages "
            f"({time.perf_counter() - started:.1f} s to write); concurrency {args.concurrency}"
        )
        counter = iter(range(1_000_000))
        bench_target(
            "sqlite",
            lambda: langmem_trpc.open(str(Path(tmp) / f"m{next(counter)}.db")),
            args,
            source,
            None,
        )
        if args.skip_postgres:
            return
        import psycopg

        from langmem_trpc.testing.postgres import PostgresTestServer

        with PostgresTestServer() as server:
            url = server.create_database("postmaster")
            with psycopg.connect(url) as conn:
                row = conn.execute("SELECT pg_backend_pid()").fetchone()
                assert row is not None
                postmaster = stat(row[0])[0]
            bench_target(
                "postgres",
                lambda: langmem_trpc.open(server.create_database(f"bf{next(counter)}")),
                args,
                source,
                postmaster,
            )
            if not args.skip_queue:
                bench_queue(server.create_database, args, source, postmaster)


if __name__ == "__main__":
    main()
