"""A saver named by `--checkpointer tests.backfill.saver_module:SAVER` in the CLI tests."""

from __future__ import annotations

from langgraph.checkpoint.memory import InMemorySaver

from ._history import conversation, put_history

SAVER = InMemorySaver()
put_history(SAVER, "m1", conversation("m1", ["2025-04-01"]), {"user_id": "u3", "app_name": "app"})


def identity(thread_id: str, metadata: object) -> object:
    """Every thread belongs to app/mapped (the `--identity` test)."""
    from langmem_trpc import UserKey

    return UserKey("app", "mapped")
