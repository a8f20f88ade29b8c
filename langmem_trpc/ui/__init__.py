"""The memory inspector web UI (`langmem-trpc ui`; needs the `[ui]` extra)."""

from .app import DEFAULT_MAX_BODY, LOOPBACK_NAMES, TOKEN_HEADER, create_app, new_token

__all__ = ["DEFAULT_MAX_BODY", "LOOPBACK_NAMES", "TOKEN_HEADER", "create_app", "new_token"]
