"""`MemoryStore`: the memory service as a LangGraph `BaseStore`.

For ecosystem code that speaks `BaseStore` (`compile(store=...)`, langmem's
tools and managers, `runtime.store`). Layout and mapping (docs/recipes.md):

* namespace `(app_name, user_id, *scope)`: the first two labels are the
  service's `UserKey`, the rest a free scope;
* a caller-chosen key is stored under a stable memory id derived from
  (scope, key), so keys never collide across scopes; a key that spells a
  UUID names the same item in every spelling (dashed, undashed, upper case);
* memories written by the worker or the tools appear under `(app, user)`
  with their memory id as key and a value describing the memory; `get`, `put`
  and `delete` with that id (any UUID spelling) read, replace and delete them;
* the memory text comes from the value's `memory`, `content` or `text` field
  (configurable; a nested dict such as langmem's `{"content": {"content": ...}}`
  is searched too), else the value's JSON, capped at the service's text limit;
  the full value (JSON-normalised: datetimes become ISO strings), scope and
  key ride in the memory's metadata, so `get` returns the value whole;
* identity: inside a run with an authenticated user (`langgraph_auth_user_id`)
  a namespace of another user raises `NamespaceAccessError` and an app-wide
  prefix reaches that user only; `for_user(app, user)` pins a pair explicitly.

Deviations from `InMemoryStore` (tested in tests/integration/test_store.py):
namespaces need two labels (app, user); no-query search is newest-updated
first (not insertion order); query search returns the service's hybrid order,
then, to fill `limit`, the newest other items with score 0.0;
`SearchItem.score` is the service's absolute 0-1 relevance; `created_at`
survives updates; a TTL refresh moves the memory's `expires_at` at most once
per tenth of its TTL.
"""

from ._store import MemoryStore
from ._values import memory_id, memory_text, to_item

__all__ = ["MemoryStore", "memory_id", "memory_text", "to_item"]
