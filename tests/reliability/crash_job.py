"""A worker process for test_crash.py: runs one extraction job, optionally SIGKILLed mid-batch.

Usage: python -m tests.reliability.crash_job DB CRASH_AT   (CRASH_AT 0: no crash)

The process kills itself with SIGKILL right after its CRASH_AT-th committed
write (add, update, delete or cursor), from the worker thread: no cleanup,
no finally blocks, exactly like an OOM kill or a power cut between operations.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from langmem_trpc import AutoMemoryWorker, UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.extraction import ExtractionRequest, MemoryOp

USER = UserKey("app", "alice")
MESSAGES = [
    HumanMessage("We moved production to Go 1.24", id="h1"),
    AIMessage("Noted", id="a1"),
    HumanMessage("Forget my old phone number; I live in Lyon now, my cat is Tom", id="h2"),
]
WRITES = 8  # 5 adds + 1 update + 1 delete + the cursor


class Batch:
    """The same seven operations every time (what a model would propose for MESSAGES)."""

    uses_existing = False

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        return [
            MemoryOp.add("Lives in Lyon", verbatim=True),
            MemoryOp.add("Has a cat called Tom", verbatim=True),
            MemoryOp.update("seed-go", "Production runs Go 1.24"),
            MemoryOp.add("Moved production in 2024", verbatim=True),
            MemoryOp.delete("seed-phone"),
            MemoryOp.add("Prefers short answers", verbatim=True),
            MemoryOp.add("Works on the payments team", verbatim=True),
        ]


class Dying(SQLiteMemoryService):
    def __init__(self, path: str, crash_at: int) -> None:
        super().__init__(path)
        self.crash_at, self.writes = crash_at, 0

    def _wrote(self) -> None:
        self.writes += 1
        if self.writes == self.crash_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def add(self, *args: Any, **kwargs: Any) -> Any:
        out = super().add(*args, **kwargs)
        self._wrote()
        return out

    def update(self, *args: Any, **kwargs: Any) -> Any:
        out = super().update(*args, **kwargs)
        self._wrote()
        return out

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        out = super().delete(*args, **kwargs)
        self._wrote()
        return out

    def save_progress(self, *args: Any, **kwargs: Any) -> Any:
        saved = super().save_progress(*args, **kwargs)  # the cursor, under the job's claim
        self._wrote()
        return saved


def seed(path: str) -> None:
    with SQLiteMemoryService(path) as svc:
        svc.add(USER, "Production runs Go 1.23", memory_id="seed-go")
        svc.add(USER, "Phone number is 555-0100", memory_id="seed-phone")
        svc.add(USER, "Likes hiking", memory_id="seed-hiking")


def main() -> None:
    path, crash_at = sys.argv[1], int(sys.argv[2])
    service = Dying(path, crash_at)
    # SQLite: the kernel frees a killed process's claim at once (a file lock).
    # claim_ttl bounds how long a dead job's claim blocks on backends with rows.
    with AutoMemoryWorker(service, Batch(), job_timeout=30, claim_ttl=1) as worker:
        worker.enqueue(USER, "thread-1", MESSAGES)
    print(
        worker.stats().model_dump_json() if hasattr(worker.stats(), "model_dump_json") else "done"
    )


if __name__ == "__main__":
    main()
