"""The LanceDB backend: embedded, no server (`pip install langmem-trpc[lancedb]`).

Registered as `lancedb` in the `langmem_trpc.backends` entry-point group:
`langmem_trpc.open("lancedb:///abs/dir")` or `"lancedb://relative/dir"`.
"""

from .service import LanceDBMemoryService, open_backend

__all__ = ["LanceDBMemoryService", "open_backend"]
