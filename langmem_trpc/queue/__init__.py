"""A durable extraction queue on PostgreSQL (procrastinate), for multi-process deployments.

- `PostgresJobQueue`: the producer; `enqueue` / `aenqueue(user, thread_id, messages)`
  like `AutoMemoryWorker`, so `MemoryCheckpointer(saver, queue)` and
  `MemoryIngestMiddleware(queue)` take it. `stats()` reads the queue's depth, oldest
  waiting age, per-user lag and failed jobs.
- `QueueWorker`: the consumer (`langmem-trpc worker --db postgresql://...`); it runs the
  in-process worker's `run_job` for every job.

Needs the `[queue]` extra (procrastinate).
"""

from __future__ import annotations

from ..errors import QueuePayloadTooLargeError
from ._plan import EnqueueOutcome
from ._stats import TASK_NAME, FailedJob, QueueStats
from .producer import PostgresJobQueue
from .worker import JobIncompleteError, QueueWorker

__all__ = [
    "TASK_NAME",
    "EnqueueOutcome",
    "FailedJob",
    "JobIncompleteError",
    "PostgresJobQueue",
    "QueuePayloadTooLargeError",
    "QueueStats",
    "QueueWorker",
]
