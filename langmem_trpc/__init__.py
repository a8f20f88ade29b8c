"""langmem_trpc: long-term memory for LangGraph and LangChain agents.

The core (model, errors, service contract, in-memory backend, and
`open(url)`, which opens any backend by URL) is imported eagerly. Backends, the write path and the LangGraph integration load on
first use, so `import langmem_trpc` stays light and optional dependencies
(psycopg for PostgreSQL) are only needed by code that uses them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .backends.memory import InMemoryMemoryService
from .errors import (
    BackendError,
    CapacityExceededError,
    ConfigurationError,
    ExtractionError,
    ExtractorBusyError,
    InvalidInputError,
    InvalidMemoryError,
    InvalidTimeError,
    InvalidUserKeyError,
    LangmemTrpcError,
    MemoryConflictError,
    MemoryNotFoundError,
    NamespaceAccessError,
    WorkerError,
)
from .registry import BackendRegistry, aopen, open
from .service import Limits, MemoryService
from .service.capabilities import Capability
from .types import (
    DeadLetter,
    DeadLetterStatus,
    Entry,
    ExtractionCursor,
    HistoryEvent,
    Kind,
    Memory,
    Operation,
    SearchOptions,
    Source,
    UserKey,
)

if TYPE_CHECKING:
    from .backends.postgres import PostgresMemoryService
    from .backends.sqlite import SQLiteMemoryService
    from .embeddings import LocalMiniLMEmbeddings
    from .extraction import (
        AutoMemoryWorker,
        Checker,
        ExtractionContext,
        Extractor,
        JobReport,
        LLMExtractor,
        MemoryOp,
        VerbatimExtractor,
        WorkerStats,
        check_message_threshold,
        check_time_interval,
        checks_all,
        checks_any,
    )
    from .history import BackfillReport, abackfill, backfill
    from .integration import (
        MemoryCheckpointer,
        MemoryIngestMiddleware,
        MemoryPreloadMiddleware,
        MemoryStore,
        apreload_messages,
        create_memory_tools,
        create_preload_node,
        preload_messages,
        resolve_identity,
    )

_LAZY_BY_MODULE = {  # what the TYPE_CHECKING block imports, loaded on first use
    ".backends.sqlite": "SQLiteMemoryService",
    ".backends.postgres": "PostgresMemoryService",
    ".embeddings": "LocalMiniLMEmbeddings",
    ".extraction": "AutoMemoryWorker Checker ExtractionContext Extractor WorkerStats JobReport "
    "LLMExtractor MemoryOp VerbatimExtractor check_message_threshold check_time_interval "
    "checks_all checks_any",
    ".history": "BackfillReport abackfill backfill",
    ".integration": "MemoryCheckpointer MemoryIngestMiddleware MemoryPreloadMiddleware "
    "MemoryStore apreload_messages create_memory_tools create_preload_node preload_messages "
    "resolve_identity",
}
_LAZY = {name: module for module, names in _LAZY_BY_MODULE.items() for name in names.split()}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'langmem_trpc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "AutoMemoryWorker",
    "BackendError",
    "BackendRegistry",
    "BackfillReport",
    "Capability",
    "CapacityExceededError",
    "Checker",
    "ConfigurationError",
    "DeadLetter",
    "DeadLetterStatus",
    "Entry",
    "ExtractionContext",
    "ExtractionCursor",
    "ExtractionError",
    "Extractor",
    "ExtractorBusyError",
    "HistoryEvent",
    "InMemoryMemoryService",
    "InvalidInputError",
    "InvalidMemoryError",
    "InvalidTimeError",
    "InvalidUserKeyError",
    "JobReport",
    "Kind",
    "LLMExtractor",
    "LangmemTrpcError",
    "Limits",
    "LocalMiniLMEmbeddings",
    "Memory",
    "MemoryCheckpointer",
    "MemoryConflictError",
    "MemoryIngestMiddleware",
    "MemoryNotFoundError",
    "MemoryOp",
    "MemoryPreloadMiddleware",
    "MemoryService",
    "MemoryStore",
    "NamespaceAccessError",
    "Operation",
    "PostgresMemoryService",
    "SQLiteMemoryService",
    "SearchOptions",
    "Source",
    "UserKey",
    "VerbatimExtractor",
    "WorkerError",
    "WorkerStats",
    "abackfill",
    "aopen",
    "apreload_messages",
    "backfill",
    "check_message_threshold",
    "check_time_interval",
    "checks_all",
    "checks_any",
    "create_memory_tools",
    "create_preload_node",
    "open",
    "preload_messages",
    "resolve_identity",
]

__version__ = "0.1.0"
