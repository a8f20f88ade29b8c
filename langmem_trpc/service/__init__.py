"""The service contract, the shared search and validation core, the public backend kit
(`steps`: the write steps and `StepExecutor`; `claims`: the claim ops), and the reference
backend."""

from ._core import Limits
from .memory import InMemoryMemoryService
from .protocol import MemoryService, SyncMemoryService

__all__ = ["InMemoryMemoryService", "Limits", "MemoryService", "SyncMemoryService"]
