"""Moving a store to a new embedding model: what every re-embedding backend shares.

A backend that can re-embed online implements `Reembeddable` (`reembed` and its
async twin `areembed`): it embeds every stored memory (live, superseded and
soft-deleted alike: a restore must not bring back an old-model vector) with the
new embedder into a shadow, beside the vectors searches keep using, then cuts
over in one transaction: the shadow becomes the served vectors and the recorded
identity (`service/identity.py`) moves to the new model with its generation + 1,
which every other service still holding the old embedder notices on its next
search or write (it raises `ConfigurationError` until reopened).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..types import UserKey

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = [
    "DEFAULT_BATCH",
    "ReembedInThread",
    "Reembeddable",
    "ReembedPlan",
    "ReembedProgress",
    "ReembedReport",
    "estimate_tokens",
]

DEFAULT_BATCH = 256
"""Texts per `embed_documents` call (and per shadow commit: the resume granularity)."""

_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def estimate_tokens(texts: Iterable[str]) -> int:
    """What an API model would bill for `texts`: tiktoken's `cl100k_base` count when tiktoken
    is installed; else words and punctuation marks x 4/3 (English text averages ~1.3
    tokens per word on OpenAI's tokenizers), rounded up."""
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base")
        return sum(len(encoding.encode(text)) for text in texts)
    except Exception:  # not installed, or no cached encoding offline: the estimate
        pieces = sum(len(_WORD.findall(text)) for text in texts)
        return -(-pieces * 4 // 3)


@dataclass
class ReembedProgress:
    """Where a re-embed stands: `done` of `total` memories hold a new vector."""

    done: int
    total: int
    started: float = field(default_factory=time.monotonic)
    embedded: int = 0
    """Embedded by this run (a resumed run starts with `done` > 0)."""

    @property
    def rate(self) -> float:
        """Memories embedded per second by this run."""
        elapsed = time.monotonic() - self.started
        return self.embedded / elapsed if elapsed > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the current rate (None before the first batch)."""
        rate = self.rate
        return (self.total - self.done) / rate if rate > 0 else None


ProgressCallback = Callable[[ReembedProgress], None]


@dataclass(frozen=True)
class ReembedPlan:
    """What a re-embed would embed (`--dry-run`): memory texts and their token estimate."""

    texts: int
    tokens: int


@dataclass(frozen=True)
class ReembedReport:
    """A finished `reembed`: how many memories it embedded (this run, and carried over
    from an interrupted one), and whether it cut over (False when `users` left other
    users' memories without a new vector, or the store already used the new model)."""

    embedded: int
    resumed: int
    cut_over: bool
    generation: int
    seconds: float


@runtime_checkable
class Reembeddable(Protocol):
    """A backend that can move its store to a new embedding model online."""

    def reembed(
        self,
        new_embeddings: Embeddings,
        *,
        batch_size: int = DEFAULT_BATCH,
        users: Sequence[UserKey] | None = None,
        progress: ProgressCallback | None = None,
    ) -> ReembedReport: ...

    async def areembed(
        self,
        new_embeddings: Embeddings,
        *,
        batch_size: int = DEFAULT_BATCH,
        users: Sequence[UserKey] | None = None,
        progress: ProgressCallback | None = None,
    ) -> ReembedReport: ...

    def reembed_plan(self, users: Sequence[UserKey] | None = None) -> ReembedPlan: ...


class ReembedInThread:
    """`areembed` for a backend whose `reembed` blocks (SQLite, PostgreSQL, LanceDB): the
    run goes to a worker thread, so the event loop never waits on embedding or I/O."""

    async def areembed(
        self: Reembeddable,
        new_embeddings: Embeddings,
        *,
        batch_size: int = DEFAULT_BATCH,
        users: Sequence[UserKey] | None = None,
        progress: ProgressCallback | None = None,
    ) -> ReembedReport:
        """Async twin of `reembed` (runs in a worker thread)."""
        run = partial(self.reembed, batch_size=batch_size, users=users, progress=progress)
        return await asyncio.to_thread(run, new_embeddings)
