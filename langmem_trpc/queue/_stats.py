"""`QueueStats`: what the queue holds, from procrastinate's tables, plus the producer's counters."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

TASK_NAME = "langmem_trpc.extract"

_WHERE = "(queue_name = %(queue)s OR starts_with(queue_name, %(apps)s)) AND task_name = %(task)s"
"""The jobs of one queue: every app's (`queue@app`) and those queued before apps had queues."""
STATUS_COUNTS = f"""SELECT args->>'app' AS app, status::text AS status, count(*) AS n
FROM procrastinate_jobs WHERE {_WHERE} GROUP BY 1, 2"""
OLDEST_PENDING = f"""
SELECT extract(epoch FROM now() - min(e.at))::float8 AS age FROM procrastinate_events e
WHERE e.type = 'deferred' AND e.job_id = (
    SELECT min(id) FROM procrastinate_jobs WHERE {_WHERE} AND status = 'todo')"""
PER_USER = f"""
SELECT args->>'app' AS app, args->>'user' AS "user", count(*) AS n FROM procrastinate_jobs
WHERE {_WHERE} AND status IN ('todo', 'doing') GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2
LIMIT %(top)s"""
STATS_QUERIES = (STATUS_COUNTS, OLDEST_PENDING, PER_USER)
FAILED_JOBS = f"""
SELECT j.id, j.status::text AS status, j.attempts, j.args->>'app' AS app_name,
    j.args->>'user' AS user_id, j.args->>'thread' AS thread_id,
    coalesce(jsonb_array_length(j.args->'messages'), 0) AS messages,
    (SELECT max(e.at) FROM procrastinate_events e WHERE e.job_id = j.id) AS at
FROM procrastinate_jobs j WHERE {_WHERE} AND j.status IN ('failed', 'aborted')
ORDER BY j.id LIMIT %(limit)s"""
RETRY_FAILED = f"""
UPDATE procrastinate_jobs SET status = 'todo', scheduled_at = now(), queueing_lock = NULL
WHERE id = %(id)s AND {_WHERE} AND status IN ('failed', 'aborted') RETURNING id"""
"""Back in the queue, due now; without its queueing lock, so it never collides with the
thread's waiting job (it runs before it: same user lock, older id)."""


COSTS_TABLE = """CREATE TABLE IF NOT EXISTS langmem_job_costs (
    queue text NOT NULL, app_name text NOT NULL, user_id text NOT NULL,
    jobs bigint NOT NULL DEFAULT 0, model_calls bigint NOT NULL DEFAULT 0,
    input_tokens bigint NOT NULL DEFAULT 0, output_tokens bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, app_name, user_id))"""
"""What the queue's extraction jobs cost, per user: model calls and their tokens (`JobReport`)."""
RECORD_COST = """INSERT INTO langmem_job_costs AS c
    (queue, app_name, user_id, jobs, model_calls, input_tokens, output_tokens)
VALUES (%(queue)s, %(app)s, %(user)s, 1, %(calls)s, %(input)s, %(output)s)
ON CONFLICT (queue, app_name, user_id) DO UPDATE SET jobs = c.jobs + 1,
    model_calls = c.model_calls + excluded.model_calls,
    input_tokens = c.input_tokens + excluded.input_tokens,
    output_tokens = c.output_tokens + excluded.output_tokens"""
COSTS = """SELECT app_name, user_id, jobs, model_calls, input_tokens, output_tokens
FROM langmem_job_costs WHERE queue = %(queue)s
ORDER BY input_tokens + output_tokens DESC, model_calls DESC, app_name, user_id LIMIT %(top)s"""
COSTS_EXIST = "SELECT to_regclass('langmem_job_costs') IS NOT NULL AS present"


def queue_params(queue: str, **extra: Any) -> dict[str, Any]:
    """The parameters of the queries above for one queue."""
    return {"queue": queue, "apps": f"{queue}@", "task": TASK_NAME, **extra}


@dataclass(frozen=True)
class QueueStats:
    """One look at the queue (one queue name) and at this producer.

    `per_user_lag` maps "app/user" to the user's unfinished jobs (waiting or
    running), most first, at most `top` users (`stats(top=...)`); `per_app_depth`
    maps each app with waiting jobs to their number.
    """

    depth: int
    """Jobs waiting (`todo`, including retries waiting for their backoff)."""
    running: int
    """Jobs a worker is running (`doing`)."""
    oldest_pending_seconds: float | None
    """Age of the oldest waiting job since it was first queued; None when none waits."""
    per_user_lag: dict[str, int]
    per_app_depth: dict[str, int]
    failed: int
    """Jobs that failed every retry (`langmem-trpc jobs failed --db ...` lists them)."""
    succeeded: int
    enqueued: int = 0
    """Jobs this producer queued."""
    collapsed: int = 0
    """Enqueues this producer merged into a thread's waiting job."""
    nothing_new: int = 0
    """Enqueues with nothing new after the cursor (nothing queued)."""
    producer_errors: int = 0
    """Enqueues of this producer that failed on the database (logged, raised as BackendError)."""
    rejected: int = 0
    """Enqueues refused before any write (bad input)."""
    oversized: int = 0
    """Messages over `max_payload_bytes` this producer queued as placeholders (not extracted;
    each logged at WARNING; counted again when the thread is enqueued again before its job ran)."""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FailedJob:
    """A queued job that failed every retry (or was aborted), for `jobs failed`."""

    id: int
    status: str
    attempts: int
    app_name: str | None
    user_id: str | None
    thread_id: str | None
    messages: int
    at: datetime | None
    """When its last event (failure) happened."""

    def as_json(self) -> dict[str, Any]:
        at = None if self.at is None else self.at.isoformat()
        return {"kind": "queue_job", **asdict(self), "id": f"job:{self.id}", "at": at}


class ProducerCounters:
    """Thread-safe counters of one `PostgresJobQueue`."""

    NAMES = ("enqueued", "collapsed", "nothing_new", "producer_errors", "rejected", "oversized")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(self.NAMES, 0)

    def bump(self, name: str) -> None:
        with self._lock:
            self._values[name] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)


def stats_from_rows(
    rows: Sequence[Sequence[dict[str, Any]]], counters: dict[str, Any]
) -> QueueStats:
    """The rows of `STATS_QUERIES`, in order, and the producer's counters."""
    statuses, oldest, users = rows
    counts: dict[str, int] = {}
    for row in statuses:
        counts[row["status"]] = counts.get(row["status"], 0) + int(row["n"])
    age = oldest[0]["age"] if oldest else None
    return QueueStats(
        depth=counts.get("todo", 0),
        running=counts.get("doing", 0),
        oldest_pending_seconds=None if age is None else max(0.0, float(age)),
        per_user_lag={f"{r['app']}/{r['user']}": int(r["n"]) for r in users},
        per_app_depth={r["app"]: int(r["n"]) for r in statuses if r["status"] == "todo"},
        failed=counts.get("failed", 0),
        succeeded=counts.get("succeeded", 0),
        **{name: counters.get(name, 0) for name in ProducerCounters.NAMES},
    )
