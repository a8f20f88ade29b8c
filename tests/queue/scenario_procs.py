"""The processes tests/queue/test_scenarios.py spawns, and the extractor its workers load.

Usage:
  python -m tests.queue.scenario_procs produce URL GO NAME USERS TURNS
      enqueue TURNS growing jobs for each user index in USERS (comma-separated) on
      PostgresJobQueue(URL): turn k sends the thread's first k messages; the users'
      turns are interleaved. Writes GO.NAME.ready once connected, then waits for GO.
      Prints one JSON line: {"enqueued": n, "errors": n, "samples": [...], "latencies_ms": [...]}.
  python -m tests.queue.scenario_procs agent URL GO ROLE TURNS
      one of two processes (ROLE 0 or 1) running a compiled LangGraph agent on the
      same thread with MemoryCheckpointer(PostgresSaver, PostgresJobQueue); they take
      turns: process ROLE runs turns ROLE, ROLE + 2, ... each after GO.turn-<k-1> exists.

`RecordingExtractor` (the workers' `--extractor tests.queue.scenario_procs:RecordingExtractor`)
is the verbatim extractor plus one line "pid call message-id" per message it is given,
written with one O_APPEND `write` to the file named by LANGMEM_TEST_RECORDS, so lines of
several processes never interleave. LANGMEM_TEST_EXTRACT_SLEEP (seconds) makes each call
take that long, like a model.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from langmem_trpc import UserKey
from langmem_trpc.extraction import ExtractionRequest, MemoryOp, VerbatimExtractor

RECORDS_ENV = "LANGMEM_TEST_RECORDS"
SLEEP_ENV = "LANGMEM_TEST_EXTRACT_SLEEP"
APP = "queue-scenarios"
THREAD = "main"


def user(index: int) -> UserKey:
    return UserKey(APP, f"user-{index:03d}")


def text(index: int, turn: int) -> str:
    return f"user {index} says fact number {turn}"


def message_id(index: int, turn: int) -> str:
    return f"u{index}/m{turn}"


def history(index: int, turns: int) -> list[BaseMessage]:
    """The thread of user `index` after `turns` turns (one human message per turn)."""
    return [HumanMessage(text(index, t), id=message_id(index, t)) for t in range(turns)]


class RecordingExtractor(VerbatimExtractor):
    """Verbatim extraction that records every message it receives (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._fd = os.open(os.environ[RECORDS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._sleep = float(os.environ.get(SLEEP_ENV) or 0)
        self._calls = itertools.count()

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        call = next(self._calls)
        lines = "".join(f"{os.getpid()} {call} {m.id}\n" for m in request.messages)
        if self._sleep:
            time.sleep(self._sleep)
        os.write(self._fd, lines.encode())
        return super().extract(request)


def _wait_for(path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {path}")
        time.sleep(0.005)


def produce(url: str, go: str, name: str, users: str, turns: int) -> None:
    from langmem_trpc.queue import PostgresJobQueue

    indexes = [int(u) for u in users.split(",") if u]
    latencies: list[float] = []
    errors = 0
    samples: list[str] = []
    with PostgresJobQueue(url) as queue:
        queue.stats()  # connect before the start signal
        Path(f"{go}.{name}.ready").touch()
        _wait_for(Path(go))
        for turn in range(1, turns + 1):
            for index in indexes:
                started = time.perf_counter()
                try:
                    queue.enqueue(user(index), THREAD, history(index, turn))
                except Exception as exc:  # counted and reported; the test decides
                    errors += 1
                    if len(samples) < 5:
                        samples.append(f"{exc!r} <- {exc.__cause__!r}")
                latencies.append((time.perf_counter() - started) * 1000)
    done = {"enqueued": len(latencies) - errors, "errors": errors, "samples": samples}
    print(json.dumps({**done, "latencies_ms": latencies}))


def agent(url: str, go: str, role: int, turns: int) -> None:
    from langchain.agents import create_agent
    from langgraph.checkpoint.postgres import PostgresSaver

    from langmem_trpc import MemoryCheckpointer
    from langmem_trpc.queue import PostgresJobQueue
    from langmem_trpc.testing import ScriptedChatModel

    mine = list(range(role, turns, 2))
    config: Any = {"configurable": {"thread_id": THREAD, "app_name": APP, "user_id": "agent"}}
    with PostgresSaver.from_conn_string(url) as saver, PostgresJobQueue(url) as queue:
        if role == 0:  # one process migrates: concurrent PostgresSaver.setup() calls race
            saver.setup()  # on checkpoint_migrations; role 1 first writes after turn 0
        model = ScriptedChatModel(replies=[f"reply {t}" for t in mine])
        graph = create_agent(model, checkpointer=MemoryCheckpointer(saver, queue))
        Path(f"{go}.{role}.ready").touch()
        for turn in mine:
            if turn:
                _wait_for(Path(f"{go}.turn-{turn - 1}"))
            graph.invoke({"messages": [HumanMessage(f"agent fact {turn}", id=f"h{turn}")]}, config)
            Path(f"{go}.turn-{turn}").touch()
    print(json.dumps({"role": role, "turns": mine}))


def main() -> None:
    command, args = sys.argv[1], sys.argv[2:]
    if command == "produce":
        produce(args[0], args[1], args[2], args[3], int(args[4]))
    elif command == "agent":
        agent(args[0], args[1], int(args[2]), int(args[3]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
