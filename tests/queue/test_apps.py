"""Per-app queues with real `langmem-trpc worker` processes (`--app`), on the suite's PostgreSQL."""

from __future__ import annotations

import time

from langchain_core.messages import HumanMessage

from langmem_trpc import UserKey
from langmem_trpc.queue import PostgresJobQueue

from .conftest import Processes, pending_jobs, read_records, sql_value

APPS = ("app-a", "app-b", "app-c")


def done_of(url: str, app: str) -> int:
    return sql_value(
        url,
        "SELECT count(*) FROM procrastinate_jobs"
        f" WHERE queue_name = 'langmem@{app}' AND status = 'succeeded'",
    )


def test_app_workers_take_only_their_apps_and_a_default_worker_the_rest(
    procs: Processes, queue_url: str
) -> None:
    with PostgresJobQueue(queue_url) as queue:
        for app in APPS:
            for n in range(3):
                user = UserKey(app, f"user-{n}")
                queue.enqueue(user, "t", [HumanMessage(f"{app} fact {n}", id=f"{app}/{n}")])
    only = procs.start_worker(args=["--app", "app-a", "--app", "app-b", "--poll-interval", "0.2"])
    procs.wait_ready(only)
    deadline = time.monotonic() + 60
    while done_of(queue_url, "app-a") + done_of(queue_url, "app-b") < 6:
        procs.check_alive()
        assert time.monotonic() < deadline, procs.logs()
        time.sleep(0.1)
    time.sleep(1.0)  # a worker that took app-c's jobs too would have taken them by now
    assert pending_jobs(queue_url) == 3 and done_of(queue_url, "app-c") == 0
    assert {r.message_id.split("/")[0] for r in read_records(procs.records)} == {"app-a", "app-b"}
    default = procs.start_worker(args=["--poll-interval", "0.2"])
    procs.wait_drained(60)
    by_pid = {r.message_id: r.pid for r in read_records(procs.records)}
    assert sorted(by_pid) == sorted(f"{app}/{n}" for app in APPS for n in range(3))
    assert {by_pid[f"app-c/{n}"] for n in range(3)} == {default.pid}
