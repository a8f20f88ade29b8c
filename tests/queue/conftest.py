"""Helpers for the multi-process queue scenarios: a fresh database, worker and producer processes.

Everything is real: the suite's PostgreSQL (tests/conftest.py), `langmem-trpc worker`
processes started with `python -m langmem_trpc.cli` from the worktree root (so the
worktree's package is imported), producers in processes of their own
(`tests/queue/scenario_procs.py`). The workers load `RecordingExtractor` by import path, so
the test reads which process was given which message.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from langmem_trpc.testing.postgres import PostgresTestServer

from .scenario_procs import RECORDS_ENV, SLEEP_ENV, THREAD, message_id, text, user

ROOT = Path(__file__).resolve().parents[2]
EXTRACTOR = "tests.queue.scenario_procs:RecordingExtractor"
READY = "langmem-trpc worker ready"  # what a worker prints on stderr once it fetches jobs


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def setup_database(url: str) -> None:
    """Apply the memory schema and the queue's schema once, before any process starts."""
    from langmem_trpc.backends.postgres import PostgresMemoryService
    from langmem_trpc.queue import PostgresJobQueue

    service = PostgresMemoryService(url, pool_size=1)
    try:
        service.setup()
    finally:
        service.close()
    with PostgresJobQueue(url) as queue:
        queue.setup()


def sql_value(url: str, query: str, *, attempts: int = 20) -> int:
    """One number from the database; retried while the server is starting (after an outage)."""
    import psycopg

    for attempt in range(attempts):
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
                row = conn.execute(query).fetchone()
            return int(row[0]) if row and row[0] is not None else 0
        except psycopg.OperationalError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def pending_jobs(url: str) -> int:
    """Jobs not finished yet: waiting or running."""
    return sql_value(
        url, "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo','doing')"
    )


def live_workers(url: str) -> int:
    """Workers registered with the queue (a worker registers once it is connected)."""
    return sql_value(url, "SELECT count(*) FROM procrastinate_workers")


class Processes:
    """Worker and producer processes of one test; stopped (then killed) at teardown."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url = url
        self.tmp = tmp_path
        self.records = tmp_path / "records.txt"
        self.workers: list[subprocess.Popen[str]] = []
        self.others: list[subprocess.Popen[str]] = []
        self._count = 0

    def _spawn(self, argv: Sequence[str], name: str, **env: str) -> subprocess.Popen[str]:
        self._count += 1
        log = open(self.tmp / f"{self._count:02d}-{name}.log", "w")
        proc = subprocess.Popen(
            [sys.executable, *argv], cwd=ROOT, env=_env(**env), stdout=log,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        log.close()
        proc.log_path = log.name  # type: ignore[attr-defined]
        return proc

    def start_worker(
        self, *, concurrency: int = 4, sleep: float = 0.0, args: Sequence[str] = ()
    ) -> subprocess.Popen[str]:
        argv = [
            "-m", "langmem_trpc.cli", "worker", "--db", self.url, "--extractor", EXTRACTOR,
            "--concurrency", str(concurrency), *args,
        ]  # fmt: skip
        proc = self._spawn(
            argv, "worker", **{RECORDS_ENV: str(self.records), SLEEP_ENV: str(sleep)}
        )
        self.workers.append(proc)
        return proc

    def wait_workers(self, count: int, timeout: float = 60.0) -> None:
        """Until `count` workers are registered with the queue."""
        deadline = time.monotonic() + timeout
        while live_workers(self.url) < count:
            self.check_alive()
            assert time.monotonic() < deadline, f"workers not ready:\n{self.logs()}"
            time.sleep(0.1)

    def _release(self, procs: Sequence[subprocess.Popen[str]], names: Sequence[str]) -> None:
        """Wait until every process wrote GO.<name>.ready, then create GO."""
        go = self.tmp / "go"
        deadline = time.monotonic() + 120
        while not all(Path(f"{go}.{name}.ready").exists() for name in names):
            assert all(p.poll() is None for p in procs), self.logs()
            assert time.monotonic() < deadline, self.logs()
            time.sleep(0.01)
        go.touch()

    def start_producers(
        self, groups: Sequence[Sequence[int]], turns: int
    ) -> list[subprocess.Popen[str]]:
        """One producer process per group of user indexes, released together once all connected."""
        go = self.tmp / "go"
        procs = []
        for n, group in enumerate(groups):
            argv = ["-m", "tests.queue.scenario_procs", "produce", self.url, str(go), f"p{n}",
                    ",".join(map(str, group)), str(turns)]  # fmt: skip
            procs.append(self._spawn(argv, f"producer{n}"))
        self.others.extend(procs)
        self._release(procs, [f"p{n}" for n in range(len(groups))])
        return procs

    def wait_producers(
        self, procs: Sequence[subprocess.Popen[str]], timeout: float = 180
    ) -> list[str]:
        """Wait for the producers to exit 0; their outputs."""
        for proc in procs:
            assert proc.wait(timeout=timeout) == 0, self.logs()
        return [Path(p.log_path).read_text() for p in procs]  # type: ignore[attr-defined]

    def wait_ready(self, proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
        """Until the worker printed its ready line (connected, fetching jobs)."""
        deadline = time.monotonic() + timeout
        while READY not in self.log_of(proc):
            assert proc.poll() is None and time.monotonic() < deadline, self.logs()
            time.sleep(0.05)

    def run_producers(self, groups: Sequence[Sequence[int]], turns: int) -> list[str]:
        return self.wait_producers(self.start_producers(groups, turns))

    def run_agents(self, turns: int, timeout: float = 180) -> list[str]:
        """Two agent processes taking turns on one thread (scenario_procs.agent); their outputs."""
        go = self.tmp / "go"
        procs = [
            self._spawn(
                [
                    "-m",
                    "tests.queue.scenario_procs",
                    "agent",
                    self.url,
                    str(go),
                    str(role),
                    str(turns),
                ],
                f"agent{role}",
            )  # fmt: skip
            for role in (0, 1)
        ]
        self.others.extend(procs)
        self._release(procs, ["0", "1"])
        return self.wait_producers(procs, timeout)

    def check_alive(self) -> None:
        dead = [p for p in self.workers if p.poll() is not None and p.returncode != -signal.SIGKILL]
        assert not dead, f"a worker exited ({[p.returncode for p in dead]}):\n{self.logs()}"

    def wait_drained(self, timeout: float, *, url: str | None = None) -> float:
        """Until no job is waiting or running; returns the seconds it took."""
        started = time.monotonic()
        while pending_jobs(url or self.url):
            self.check_alive()
            assert time.monotonic() - started < timeout, f"queue not drained:\n{self.logs()}"
            time.sleep(0.1)
        return time.monotonic() - started

    def kill(self, proc: subprocess.Popen[str]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def log_of(self, proc: subprocess.Popen[str]) -> str:
        return Path(proc.log_path).read_text()  # type: ignore[attr-defined]

    def logs(self, tail: int = 3000) -> str:
        parts = []
        for path in sorted(self.tmp.glob("*.log")):
            parts.append(f"--- {path.name}\n{path.read_text()[-tail:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """SIGTERM every process still running, SIGKILL what is left after 20 s."""
        running = [p for p in self.workers + self.others if p.poll() is None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in running:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@dataclass
class Record:
    pid: int
    call: int
    message_id: str


def read_records(path: Path) -> list[Record]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        pid, call, mid = line.split(" ", 2)
        out.append(Record(int(pid), int(call), mid))
    return out


def check_users(url: str, users: Sequence[int], turns: int) -> None:
    """Every user's memories: each message once, in message order; the cursor covers them all
    (its last message, and `message_count` the thread's length, though a queue-fed cursor
    keeps only a window of keys)."""
    from langmem_trpc.backends.postgres import PostgresMemoryService

    service = PostgresMemoryService(url, pool_size=2)
    try:
        wrong = {}
        for index in users:
            entries = sorted(service.read(user(index)), key=lambda e: (e.created_at, e.id))
            got = [e.text for e in entries]
            if got != [text(index, t) for t in range(turns)]:
                wrong[index] = got
            cursor = service.get_cursor(user(index), THREAD)
            covered = None if cursor is None else (cursor.last_message_id, cursor.message_count)
            if covered != (message_id(index, turns - 1), turns) or cursor.pending_retries:
                wrong[index] = f"cursor {cursor!r}"
        assert not wrong, dict(list(wrong.items())[:3])
    finally:
        service.close()


def check_records_once(
    records: list[Record], users: Sequence[int], turns: int, *, killed: set[int] = frozenset()
) -> dict[int, int]:  # type: ignore[assignment]
    """Each message reached an extractor once, in message order per user; messages first given to a
    SIGKILLed process (`killed` pids) may be given once more. Returns messages per pid."""
    seen: dict[str, list[int]] = defaultdict(list)
    order: dict[int, list[int]] = defaultdict(list)
    for rec in records:
        seen[rec.message_id].append(rec.pid)
        if rec.pid not in killed:
            index, turn = rec.message_id[1:].split("/m")
            order[int(index)].append(int(turn))
    wanted = {message_id(i, t) for i in users for t in range(turns)}
    assert set(seen) == wanted, (
        f"missing {sorted(wanted - set(seen))[:5]}, extra {sorted(set(seen) - wanted)[:5]}"
    )
    twice = {
        m: pids
        for m, pids in seen.items()
        if len(pids) > 1 and not (len(pids) == 2 and pids[0] in killed)
    }
    assert not twice, f"extracted twice: {dict(list(twice.items())[:5])}"
    unordered = {i: t for i, t in order.items() if t != sorted(t)}
    assert not unordered, f"out of order: {dict(list(unordered.items())[:3])}"
    per_pid: dict[int, int] = defaultdict(int)
    for rec in records:
        per_pid[rec.pid] += 1
    return dict(per_pid)


@pytest.fixture
def queue_url(pg_server: PostgresTestServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database with the memory and queue schemas applied."""
    url = pg_server.create_database(request.node.name)
    setup_database(url)
    yield url
    pg_server.drop_database(url)


@pytest.fixture
def procs(queue_url: str, tmp_path: Path) -> Iterator[Processes]:
    processes = Processes(queue_url, tmp_path)
    yield processes
    processes.stop()


__all__ = [
    "EXTRACTOR",
    "READY",
    "Processes",
    "Record",
    "check_records_once",
    "check_users",
    "pending_jobs",
    "read_records",
    "setup_database",
]
