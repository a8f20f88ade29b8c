"""The service contract, the shared search and validation core, and the reference backend."""

from ._core import Limits
from .memory import InMemoryMemoryService
from .protocol import MemoryService, SyncMemoryService

__all__ = ["InMemoryMemoryService", "Limits", "MemoryService", "SyncMemoryService"]
