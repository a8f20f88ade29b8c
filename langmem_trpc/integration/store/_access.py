"""Whom a `MemoryStore` batch may touch: a pinned (app, user), the run's
authenticated user, or anyone (no run, or an unauthenticated deployment).

An authenticated identity that is present but unusable (a number, a list, a
blank string) refuses every operation: a guard that switched itself off on a
malformed identity would make the store app-wide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import NamespaceAccessError
from ...types import UserKey
from ..identity import AUTH_USER_KEY


@dataclass(frozen=True, slots=True)
class Access:
    """Whom one batch may touch: a pinned (app, user), an authenticated user id, or anyone."""

    app_name: str | None = None
    user_id: str | None = None

    def describe(self) -> str:
        if self.app_name is not None:
            return f"user {self.user_id!r} of app {self.app_name!r} only"
        return f"the authenticated user {self.user_id!r} only"

    def check(self, namespace: Sequence[str]) -> None:
        """Refuse a namespace (or prefix) that names another app or user."""
        labels = tuple(namespace)
        bad_app = self.app_name is not None and len(labels) >= 1 and labels[0] != self.app_name
        bad_user = self.user_id is not None and len(labels) >= 2 and labels[1] != self.user_id
        if bad_app or bad_user:
            raise NamespaceAccessError(labels, self.describe())

    def allows(self, user: UserKey) -> bool:
        return (self.app_name is None or user.app_name == self.app_name) and (
            self.user_id is None or user.user_id == self.user_id
        )


def _run_configurable() -> Mapping[str, Any]:
    try:
        from langgraph.config import get_config

        config = get_config()
    except RuntimeError:  # outside a graph run
        return {}
    configurable = (config or {}).get("configurable")
    return configurable if isinstance(configurable, Mapping) else {}


def authenticated_user() -> str | None:
    """The run's authenticated user id; None when there is none (absent, None or "").

    Raises NamespaceAccessError when the id is present but not a non-blank string.
    """
    raw = _run_configurable().get(AUTH_USER_KEY)
    if raw is None or raw == "":
        return None
    if isinstance(raw, str) and raw.strip():
        return raw
    raise NamespaceAccessError(
        (),
        f"nobody (the run's {AUTH_USER_KEY}, of type {type(raw).__name__}, "
        "is not a non-blank string)",
    )


def access_for(pinned: UserKey | None) -> Access | None:
    """The batch's access: the pin (which an authenticated run must match), else the
    authenticated user, else None (no limit)."""
    auth = authenticated_user()
    if pinned is not None:
        if auth is not None and auth != pinned.user_id:
            raise NamespaceAccessError(
                (pinned.app_name, pinned.user_id), Access(None, auth).describe()
            )
        return Access(pinned.app_name, pinned.user_id)
    return Access(None, auth) if auth is not None else None
