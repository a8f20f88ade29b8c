"""A durable extraction queue on PostgreSQL (procrastinate), for multi-process deployments.

- `PostgresJobQueue`: the producer, with `AutoMemoryWorker`'s `enqueue` / `aenqueue`, so
  `MemoryCheckpointer(saver, queue)` and `MemoryIngestMiddleware(queue)` take it.
- `QueueWorker`: the consumer (`langmem-trpc worker`), running `run_job` for every job.

Needs the `[queue]` extra (procrastinate); docs/operating.md, "Running workers as a service".
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
