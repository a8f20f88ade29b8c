"""Two real processes run the same 200 jobs over 20 threads on one backend.

The thread claim in the backend makes every message reach the extractor
exactly once, whichever process gets there first, and each thread's
memories are written in message order.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from .cross_process_job import THREADS, TURNS, open_service, text

ROOT = Path(__file__).resolve().parents[2]


def _run_two(target: str, tmp_path: Path) -> list[str]:
    records, go = tmp_path / "records.txt", tmp_path / "go"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.reliability.cross_process_job",
                target,
                str(records),
                str(go),
                order,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for order in ("forward", "reverse")
    ]
    deadline = time.monotonic() + 120
    while not all(Path(f"{go}.{o}.ready").exists() for o in ("forward", "reverse")):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()
    outputs = [p.communicate(timeout=240) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out + err[-3000:]
    return records.read_text().split("\n")[:-1]


def _check(target: str, lines: list[str]) -> None:
    seen = [line.split(" ", 1)[1] for line in lines]
    wanted = {f"{u.user_id}/{t}/{i}" for u, t in THREADS for i in range(TURNS)}
    assert len(seen) == len(set(seen)), "a message reached the extractor twice"
    assert set(seen) == wanted
    per_thread: dict[str, list[int]] = defaultdict(list)
    for message_id in seen:
        user_thread, turn = message_id.rsplit("/", 1)
        per_thread[user_thread].append(int(turn))
    assert all(turns == sorted(turns) for turns in per_thread.values())
    pids = {line.split(" ", 1)[0] for line in lines}
    service = open_service(target)
    try:
        for user, thread in THREADS:
            mine = [e for e in service.read(user) if f" {thread} " in e.text]
            mine.sort(key=lambda e: (e.created_at, e.id))
            assert [e.text for e in mine] == [text(user, thread, i) for i in range(TURNS)]
            cursor = service.get_cursor(user, thread)
            assert cursor is not None and cursor.message_count == TURNS
    finally:
        service.close()
    assert len(pids) == 2, "one process did all the work: the test proved nothing"


@pytest.mark.slow
def test_two_processes_on_one_sqlite_file_extract_each_message_once(tmp_path: Path) -> None:
    target = str(tmp_path / "shared.db")
    open_service(target).close()  # create the schema once
    _check(target, _run_two(target, tmp_path))


@pytest.mark.slow
@pytest.mark.postgres
def test_two_processes_on_postgres_extract_each_message_once(pg_url: str, tmp_path: Path) -> None:
    from langmem_trpc.backends.postgres import PostgresMemoryService

    with PostgresMemoryService(pg_url) as service:
        service.setup()
        assert isinstance(open_service(pg_url), PostgresMemoryService)
    _check(pg_url, _run_two(pg_url, tmp_path))
    with PostgresMemoryService(pg_url) as service:  # the jobs really ran on PostgreSQL
        assert service.get_cursor(THREADS[0][0], THREADS[0][1]) is not None
