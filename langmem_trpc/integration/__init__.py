"""LangGraph and LangChain integration: hook, preload, tools and BaseStore adapter.

* write path trigger: `MemoryCheckpointer` (any graph) or `MemoryIngestMiddleware` (`create_agent`);
* read path: `MemoryPreloadMiddleware`, `create_preload_node`, `preload_messages` / `apreload_messages`;
* tools: `create_memory_tools`;
* ecosystem: `MemoryStore` (a LangGraph `BaseStore`);
* one identity rule for all of them: `resolve_identity`.
"""

from .checkpointer import MemoryCheckpointer, run_finished
from .identity import resolve_identity
from .middleware import MemoryIngestMiddleware, MemoryPreloadMiddleware
from .node import create_preload_node
from .preload import apreload_messages, merge_block, preload_messages, render_block
from .store import MemoryStore
from .tools import create_memory_tools

__all__ = [
    "MemoryCheckpointer",
    "MemoryIngestMiddleware",
    "MemoryPreloadMiddleware",
    "MemoryStore",
    "apreload_messages",
    "create_memory_tools",
    "create_preload_node",
    "merge_block",
    "preload_messages",
    "render_block",
    "resolve_identity",
    "run_finished",
]
