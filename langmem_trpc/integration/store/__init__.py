"""`MemoryStore`: the memory service as a LangGraph `BaseStore`.

For code that speaks `BaseStore` (`compile(store=...)`, langmem's tools and
managers, `runtime.store`). A namespace is `(app_name, user_id, *scope)`: the
first two labels are the service's `UserKey`. A key lives under a memory id
derived from (scope, key), so keys never collide across scopes; memories the
worker or the tools wrote appear under `(app, user)` keyed by their id (any
UUID spelling). The value rides whole in the memory's metadata; its text field
(or its JSON) is what search indexes. Inside an authenticated run
(`langgraph_auth_user_id`) another user's namespace raises
`NamespaceAccessError`. The mapping and the deliberate deviations from
`InMemoryStore` are in docs/recipes.md and pinned by
tests/integration/test_store.py.
"""

from ._store import MemoryStore
from ._values import memory_id, memory_text, to_item

__all__ = ["MemoryStore", "memory_id", "memory_text", "to_item"]
