"""`MemoryStore`: the memory service as a LangGraph `BaseStore`.

A namespace is `(app_name, user_id, *scope)`, the first two labels the service's
`UserKey` (inside an authenticated run another user's namespace raises
`NamespaceAccessError`). The item mapping is in `_values`; it and the deliberate
deviations from `InMemoryStore` are in docs/recipes.md, pinned by
tests/integration/test_store.py.
"""

from ._store import MemoryStore
from ._values import memory_id, memory_text, to_item

__all__ = ["MemoryStore", "memory_id", "memory_text", "to_item"]
