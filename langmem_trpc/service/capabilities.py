"""What a backend can do beyond the contract every backend meets.

Each `MemoryService` declares its set in `capabilities`; the conformance
suite (`langmem_trpc.testing.conformance`) reads it to choose the tests a
backend must pass, so a declared capability is a tested promise.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Capability"]


class Capability(str, Enum):
    """An optional feature a `MemoryService` instance declares in `capabilities`."""

    VECTORS = "vectors"
    """An embedder is configured: search runs the vector leg next to the keyword leg."""

    DURABLE = "durable"
    """Stored memories survive the process: a new service on the same store sees them."""

    CROSS_PROCESS = "cross_process"
    """Several processes may open the same store at once: each sees the others'
    writes, and thread claims exclude owners in other processes."""

    DEFERRED_INDEXING = "deferred_indexing"
    """Some writes reach a search index only when `index_pending()` runs (a
    background step). Search is still correct before it: an unindexed memory is
    found, and ranked, as if it were indexed."""
