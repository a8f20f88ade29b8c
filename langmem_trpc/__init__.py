"""langmem_trpc: long-term memory for LangGraph and LangChain agents."""

from .errors import (
    BackendError,
    CapacityExceededError,
    ConfigurationError,
    ExtractionError,
    InvalidInputError,
    InvalidMemoryError,
    InvalidTimeError,
    InvalidUserKeyError,
    LangmemTrpcError,
    MemoryConflictError,
    MemoryNotFoundError,
    WorkerError,
)
from .service import InMemoryMemoryService, Limits, MemoryService
from .types import (
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

__all__ = [
    "BackendError",
    "CapacityExceededError",
    "ConfigurationError",
    "Entry",
    "ExtractionCursor",
    "ExtractionError",
    "HistoryEvent",
    "InMemoryMemoryService",
    "InvalidInputError",
    "InvalidMemoryError",
    "InvalidTimeError",
    "InvalidUserKeyError",
    "Kind",
    "LangmemTrpcError",
    "Limits",
    "Memory",
    "MemoryConflictError",
    "MemoryNotFoundError",
    "MemoryService",
    "Operation",
    "SearchOptions",
    "Source",
    "UserKey",
    "WorkerError",
]

__version__ = "0.1.0"
