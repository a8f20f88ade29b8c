"""One identity resolver for the hook, the preload step, the tools and the store.

Order (langgraph_surface.md §4.6): 1. `configurable["langgraph_auth_user_id"]`
(set by LangGraph Server after authentication and stripped from client requests,
so trusted; None or "" means unauthenticated and is ignored; any other value that is
not a non-blank string resolves to no identity, never to the client's `user_id`), 2. `runtime.context` (a dict
or an object), 3. `configurable["app_name" / "user_id"]`, 4. the component's
`default_app_name` (never a default user). `app_name` always follows steps 2-4:
it only selects among the authenticated user's own memories.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidUserKeyError
from ..types import UserKey

__all__ = ["AUTH_USER_KEY", "MissingIdentityWarning", "authenticated_user_id", "resolve_identity"]

logger = logging.getLogger(__name__)

AUTH_USER_KEY = "langgraph_auth_user_id"
_RUNTIME_KEY = "__pregel_runtime"


def _field(source: Any, name: str) -> str | None:
    value = source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)
    return value if isinstance(value, str) and value.strip() else None


def _current_config() -> Mapping[str, Any] | None:
    try:
        from langgraph.config import get_config

        return get_config()
    except RuntimeError:  # outside a graph run
        return None


def resolve_identity(
    runtime: Any = None,
    config: Mapping[str, Any] | None = None,
    *,
    default_app_name: str | None = None,
) -> UserKey | None:
    """The (app_name, user_id) a run acts for, or None (no user id, or malformed).

    `runtime` is anything with `.context`; without `config`, the current run's is used.
    """
    app_name, user_id = _fields(runtime, config, default_app_name)
    if user_id is None or app_name is None:
        return None
    try:
        return UserKey(app_name, user_id)
    except InvalidUserKeyError as exc:
        logger.debug("ignoring malformed identity: %s", exc)
        return None


def _fields(
    runtime: Any, config: Mapping[str, Any] | None, default_app_name: str | None
) -> tuple[str | None, str | None]:
    """The run's (app_name, user_id) as found, each None when absent."""
    if config is None:
        config = getattr(runtime, "config", None) or _current_config()
    configurable: Mapping[str, Any] = (config or {}).get("configurable") or {}
    # Checkpointers never see the Runtime; LangGraph keeps it under an internal key.
    holder = runtime if runtime is not None else configurable.get(_RUNTIME_KEY)
    context = getattr(holder, "context", None)

    authenticated = configurable.get(AUTH_USER_KEY)
    if authenticated is None or authenticated == "":  # an unauthenticated run
        user_id = _field(context, "user_id") or _field(configurable, "user_id")
    else:  # present: the only user; unusable (123, [..], "  ") means nobody, never the client's
        user_id = _field(configurable, AUTH_USER_KEY)
    app_name = _field(context, "app_name") or _field(configurable, "app_name") or default_app_name
    return app_name, user_id


class MissingIdentityWarning:
    """Logs, once per component instance, that a run had no usable identity, so memory
    was off for it (no preload, no extraction): a run with only a `thread_id` is the
    usual first-hour mistake, and it is otherwise silent."""

    def __init__(self, component: str, what: str) -> None:
        self.component = component
        self.what = what
        self._warned = False
        self._lock = threading.Lock()

    def warn(
        self,
        runtime: Any = None,
        config: Mapping[str, Any] | None = None,
        default_app_name: str | None = None,
    ) -> None:
        with self._lock:
            if self._warned:
                return
            self._warned = True
        app_name, user_id = _fields(runtime, config, default_app_name)
        missing = [n for n, v in (("app_name", app_name), ("user_id", user_id)) if v is None]
        found = f"no {' and no '.join(missing)}" if missing else "a malformed app_name/user_id"
        logger.warning(
            "%s: this run has %s, so %s. Pass app_name and user_id in the run's context "
            '(context={"app_name": ..., "user_id": ...}) or in its configurable '
            '({"configurable": {"thread_id": ..., "app_name": ..., "user_id": ...}}); on '
            "LangGraph Server the authenticated user is the user_id, and app_name=... on "
            "the component is a default app name. Warned once per %s.",
            self.component,
            found,
            self.what,
            self.component,
        )


def authenticated_user_id(config: Mapping[str, Any] | None = None) -> str | None:
    """The run's authenticated user (step 1 above; the current run's config by default),
    else None (outside a run, or an unauthenticated deployment)."""
    if config is None:
        config = _current_config()
    configurable: Mapping[str, Any] = (config or {}).get("configurable") or {}
    return _field(configurable, AUTH_USER_KEY)
