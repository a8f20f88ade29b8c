"""The in-memory reference backend: `InMemoryMemoryService`, and the `memory` entry
point (`memory://` opens a fresh one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from ...registry import build_service, split_url
from .service import InMemoryMemoryService

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["InMemoryMemoryService", "open_backend"]


def open_backend(
    url: str, *, embeddings: Embeddings | None = None, **options: Any
) -> InMemoryMemoryService:
    """`memory://` (nothing after it): a new, empty store private to this service;
    `options` are `InMemoryMemoryService`'s (`limits`, `language`)."""
    if split_url(url, "memory").strip("/"):
        raise ConfigurationError(
            f"url: an in-memory store has no location: use memory://, not {url!r}"
        )
    return build_service(InMemoryMemoryService, "memory", embeddings, **options)
