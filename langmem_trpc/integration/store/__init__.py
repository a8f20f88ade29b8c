"""`MemoryStore`: the memory service as a LangGraph `BaseStore` over namespaces
`(app_name, user_id, *scope)`. The item mapping (`_values`) and the deliberate
deviations from `InMemoryStore` are in docs/recipes.md, pinned by tests/integration/test_store.py.
"""

from ._store import MemoryStore
from ._tool_errors import StoreToolErrors, store_tool_error
from ._values import memory_id, memory_text, to_item

__all__ = [
    "MemoryStore",
    "StoreToolErrors",
    "memory_id",
    "memory_text",
    "store_tool_error",
    "to_item",
]
