"""CPU per `run_job` on PostgreSQL: this process plus the server's processes, from /proc.

One verbatim memory per job, `peek_cursor=False` (as `QueueWorker` runs a queued job),
1,000 jobs of 200 users by default after 50 warm-up jobs, on the embedded test server.
CPU figures are what to compare on a loaded machine: wall time mostly waits for a core.
Linux only (reads /proc). Not a test.

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_job_cpu.py [JOBS]
"""

from __future__ import annotations

import os
import sys
import time

import psycopg
from langchain_core.messages import HumanMessage

from langmem_trpc import UserKey
from langmem_trpc.backends.postgres import PostgresMemoryService
from langmem_trpc.extraction import VerbatimExtractor
from langmem_trpc.extraction.job import JobSettings, run_job
from langmem_trpc.testing.postgres import PostgresTestServer

TICK = os.sysconf("SC_CLK_TCK")


def stat(pid: int) -> tuple[int, list[int]]:
    """(parent pid, [utime, stime, cutime, cstime]) in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[1]), [int(x) for x in parts[11:15]]


def server_cpu(postmaster: int) -> float:
    """CPU seconds of the postmaster and its live children."""
    total = sum(stat(postmaster)[1])
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            ppid, times = stat(int(name))
        except (OSError, IndexError):
            continue
        if ppid == postmaster:
            total += times[0] + times[1]
    return total / TICK


def main(jobs: int) -> None:
    with PostgresTestServer() as server:
        url = server.create_database("jobcpu")
        with PostgresMemoryService(url) as service, psycopg.connect(url) as conn:
            service.setup()
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            postmaster = stat(row[0])[0]
            settings, extractor = JobSettings(peek_cursor=False), VerbatimExtractor()
            for i in range(50):
                user = UserKey("warm", f"u{i}")
                run_job(
                    service, extractor, settings, user, "t", [HumanMessage(f"warm {i}", id="m0")]
                )
            server0, client0, wall0 = (
                server_cpu(postmaster),
                time.process_time(),
                time.perf_counter(),
            )
            for i in range(jobs):
                message = HumanMessage(f"I like item number {i}", id="m0")
                report = run_job(
                    service, extractor, settings, UserKey("app", f"u{i % 200}"), f"t{i}", [message]
                )
                assert report.status.value == "completed", report
            server1, client1, wall1 = (
                server_cpu(postmaster),
                time.process_time(),
                time.perf_counter(),
            )
    client, srv = (client1 - client0) / jobs * 1000, (server1 - server0) / jobs * 1000
    print(
        f"jobs={jobs} client {client:.2f} ms/job  server {srv:.2f} ms/job  total {client + srv:.2f}"
        f" ms/job  wall {(wall1 - wall0) / jobs * 1000:.2f} ms/job  load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
