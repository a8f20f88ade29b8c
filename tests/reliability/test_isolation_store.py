"""Isolation through MemoryStore with an authenticated user, on every backend.

Hypothesis builds users whose ids bear separators (\\x1f, /, :, %, *, quotes),
look alike (Cyrillic letters, fullwidth forms, zero-width characters, case,
trailing spaces) or are Unicode normalisation variants of each other (NFC vs
NFD, NFKC compatibility forms). Every user writes items; then each one acts in
a run authenticated as itself (the run's config carries
`langgraph_auth_user_id`, as LangGraph Server sets it) while the request's
namespace names another user. The store must never return, change or delete
an item of a user id other than the authenticated one, compared exactly.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.runnables.config import var_child_runnable_config

from langmem_trpc import MemoryStore
from langmem_trpc.errors import NamespaceAccessError

from .conftest import Factory

BASE_IDS = ["alice", "bob", "café", "ﬁle", "user"]
VARIANTS = [
    lambda s: s,
    lambda s: s.upper(),
    lambda s: s + " ",
    lambda s: s + "\u200b",
    lambda s: "\u200d" + s,
    lambda s: s.replace("a", "\u0430").replace("e", "\u0435").replace("o", "\u043e"),  # Cyrillic
    lambda s: "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in s),  # fullwidth
    lambda s: unicodedata.normalize("NFD", s),
    lambda s: unicodedata.normalize("NFKC", s),
    lambda s: s + "\x1fx",
    lambda s: "x\x1f" + s,
    lambda s: s + "/x",
    lambda s: s + ":x",
    lambda s: s + "%",
    lambda s: s + "*",
    lambda s: s + "'",
]
APPS = ["shop", "shop\x1fx", "Shop", "shop\u200b"]

users = st.lists(
    st.tuples(
        st.integers(0, len(APPS) - 1),
        st.integers(0, len(BASE_IDS) - 1),
        st.integers(0, len(VARIANTS) - 1),
    ),
    min_size=2,
    max_size=6,
)
FUZZ = settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
COUNTS = {"examples": 0, "refused": 0, "reads": 0}


@contextmanager
def authenticated(user_id: str) -> Iterator[None]:
    """What a LangGraph Server run looks like to the store: its config, with the auth id."""
    config: Any = {"configurable": {"langgraph_auth_user_id": user_id, "user_id": "spoofed"}}
    token = var_child_runnable_config.set(config)
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)


def _pairs(spec: list[tuple[int, int, int]]) -> list[tuple[str, str]]:
    out = {(APPS[a], VARIANTS[v](BASE_IDS[b])) for a, b, v in spec}
    return sorted(out)


def _check_user(store: MemoryStore, me: tuple[str, str], pairs: list[tuple[str, str]]) -> None:
    app, user_id = me
    with authenticated(user_id):
        seen = [i.namespace for i in store.search((), limit=100)]
        seen += [i.namespace for i in store.search((app,), query="secret note", limit=100)]
        seen += store.list_namespaces(limit=100)
        COUNTS["reads"] += 3
        assert seen and all(ns[1] == user_id for ns in seen), (me, seen)
        for other in pairs:
            if other[1] == user_id:
                assert store.get(other, "k") is not None
                continue
            attempts: list[tuple[Any, tuple[Any, ...]]] = [
                (store.get, (other, "k")),
                (store.search, (other,)),
                (store.put, (other, "k", {"memory": "forged"})),
                (store.delete, (other, "k")),
            ]
            for call, args in attempts:
                with pytest.raises(NamespaceAccessError):
                    call(*args)
                COUNTS["refused"] += 1


@FUZZ
@given(spec=users)
def test_an_authenticated_run_never_reaches_another_user(make_service: Factory, spec: Any):
    store = MemoryStore(make_service())
    pairs = _pairs(spec)
    for app, user_id in pairs:
        store.put((app, user_id), "k", {"memory": f"secret note of {user_id!r} in {app!r}"})
        store.put((app, user_id, "scope"), "k", {"memory": f"scoped secret of {user_id!r}"})
    for me in pairs:
        _check_user(store, me, pairs)
    for app, user_id in pairs:  # nothing was changed by the refused attempts
        item = store.get((app, user_id), "k")
        assert item is not None and item.value == {
            "memory": f"secret note of {user_id!r} in {app!r}"
        }
    COUNTS["examples"] += 1


@FUZZ
@given(spec=users)
def test_a_pinned_view_never_reaches_another_pair(make_service: Factory, spec: Any):
    store = MemoryStore(make_service())
    pairs = _pairs(spec)
    for app, user_id in pairs:
        store.put((app, user_id), "k", {"memory": f"note of {user_id!r} in {app!r}"})
    for app, user_id in pairs:
        view = store.for_user(app, user_id)
        found = [i.namespace for i in view.search((), limit=100)]
        found += view.list_namespaces(limit=100)
        assert found and all(ns[:2] == (app, user_id) for ns in found)
        for other in pairs:
            if other != (app, user_id):
                with pytest.raises(NamespaceAccessError):
                    view.get(other, "k")
                COUNTS["refused"] += 1
