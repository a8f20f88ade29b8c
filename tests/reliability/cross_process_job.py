"""One of two processes running the same 200 jobs over 20 threads, for test_cross_process.py.

Usage: python -m tests.reliability.cross_process_job TARGET RECORDS GO ORDER
  TARGET   a SQLite file path, or a PostgreSQL URL / libpq key=value string
  RECORDS  file the extractor appends "user thread message-id" lines to
  GO       the process writes GO.ORDER.ready, then waits until GO exists, so both
           start together
  ORDER    "forward" or "reverse": the order the threads are visited in

Every message the extractor receives is recorded, with one `write` per line
on an O_APPEND file, so two processes' lines never interleave.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from langchain_core.messages import HumanMessage

import langmem_trpc
from langmem_trpc import AutoMemoryWorker, UserKey
from langmem_trpc.extraction import ExtractionRequest, MemoryOp, VerbatimExtractor
from langmem_trpc.registry import scheme_of
from langmem_trpc.service.protocol import MemoryService

USERS = [UserKey("app", f"user-{u}") for u in range(5)]
THREADS = [(user, f"thread-{t}") for user in USERS for t in range(4)]  # 20 threads
TURNS = 10  # 20 threads x 10 growing jobs = 200 jobs


def text(user: UserKey, thread: str, turn: int) -> str:
    return f"{user.user_id} {thread} says fact number {turn}"


def history(user: UserKey, thread: str, turns: int) -> list[HumanMessage]:
    return [
        HumanMessage(text(user, thread, i), id=f"{user.user_id}/{thread}/{i}") for i in range(turns)
    ]


class Recording(VerbatimExtractor):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        for message in request.messages:
            os.write(self.fd, f"{os.getpid()} {message.id}\n".encode())
        time.sleep(0.002)  # a model takes time: widen the window for overlap
        return super().extract(request)


def open_service(target: str) -> MemoryService:
    """A SQLite path, a postgresql:// URL or a libpq "user=... dbname=..." string."""
    postgres = scheme_of(target) == "postgresql"
    return langmem_trpc.open(target, **({"pool_size": 4} if postgres else {}))


def main() -> None:
    target, records, go, order = sys.argv[1:5]
    service = open_service(target)
    threads = THREADS if order == "forward" else THREADS[::-1]
    service.get_cursor(USERS[0], "warm-up")  # connect before the start signal
    Path(f"{go}.{order}.ready").touch()
    while not os.path.exists(go):
        time.sleep(0.005)
    with AutoMemoryWorker(service, Recording(records), workers=4, queue_size=400) as worker:
        for turn in range(1, TURNS + 1):
            for user, thread in threads:
                worker.enqueue(user, thread, history(user, thread, turn))
    stats = worker.stats()
    service.close()
    print(f"run={stats.jobs_run} nothing_new={stats.jobs_nothing_new} failed={stats.jobs_failed}")
    sys.exit(0 if stats.jobs_failed == 0 else 1)


if __name__ == "__main__":
    main()
