"""The write path: checkers, extractors, reconcile, durable cursor, background worker."""

from .checkers import (
    Checker,
    ExtractionContext,
    check_message_threshold,
    check_time_interval,
    checks_all,
    checks_any,
)
from .extractor import ExtractionRequest, Extractor, LLMExtractor, VerbatimExtractor
from .job import JobReport, JobStatus
from .ops import Action, MemoryOp
from .stats import WorkerStats
from .worker import AutoMemoryWorker, EnqueueResult, WorkerState

__all__ = [
    "Action",
    "AutoMemoryWorker",
    "Checker",
    "EnqueueResult",
    "ExtractionContext",
    "ExtractionRequest",
    "Extractor",
    "JobReport",
    "JobStatus",
    "LLMExtractor",
    "MemoryOp",
    "VerbatimExtractor",
    "WorkerState",
    "WorkerStats",
    "check_message_threshold",
    "check_time_interval",
    "checks_all",
    "checks_any",
]
