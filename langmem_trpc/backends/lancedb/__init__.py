"""The LanceDB backend: embedded, no server (`pip install langmem-trpc[lancedb]`).

Registered as `lancedb` in the `langmem_trpc.backends` entry-point group:
`langmem_trpc.open("lancedb:///abs/dir")` or `"lancedb://relative/dir"`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from ...registry import build_service, split_url
from .service import TABLE, LanceDBMemoryService

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["LanceDBMemoryService", "open_backend"]


def open_backend(
    url: str, *, embeddings: Embeddings | None = None, create: bool = True, **options: Any
) -> LanceDBMemoryService:
    """`lancedb:///abs/dir` or `lancedb://relative/dir`; `options` are the service's.

    With `create=False` the directory must already hold a langmem-trpc table.
    """
    path = split_url(url, "lancedb")
    if not path:
        raise ConfigurationError(f"url: {url!r} names no directory (lancedb:///abs/dir)")
    if not create and not (Path(path) / f"{TABLE}.lance").is_dir():
        raise ConfigurationError(f"no LanceDB memory store at {path}")
    return build_service(LanceDBMemoryService, "lancedb", path, embeddings, **options)
