"""The memory inspector web UI (`langmem-trpc ui`; needs the `[ui]` extra)."""

from .app import TOKEN_HEADER, create_app, new_token

__all__ = ["TOKEN_HEADER", "create_app", "new_token"]
