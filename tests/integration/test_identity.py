"""resolve_identity: one order everywhere, the authenticated user cannot be overridden."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from langgraph.graph import START, MessagesState, StateGraph

from langmem_trpc import UserKey, resolve_identity


@dataclass
class Ctx:
    app_name: str | None = None
    user_id: str | None = None


def test_context_dataclass_and_dict():
    assert resolve_identity(SimpleNamespace(context=Ctx("a", "u")), {}) == UserKey("a", "u")
    assert resolve_identity(
        SimpleNamespace(context={"app_name": "a", "user_id": "u"}), {}
    ) == UserKey("a", "u")


def test_configurable_when_no_context():
    config = {"configurable": {"app_name": "a", "user_id": "u"}}
    assert resolve_identity(None, config) == UserKey("a", "u")


def test_context_wins_over_configurable():
    config = {"configurable": {"app_name": "cfg", "user_id": "cfg-user"}}
    assert resolve_identity(SimpleNamespace(context=Ctx("ctx", "ctx-user")), config) == UserKey(
        "ctx", "ctx-user"
    )


def test_authenticated_user_cannot_be_overridden_by_request():
    config = {
        "configurable": {"langgraph_auth_user_id": "real", "user_id": "spoofed", "app_name": "a"}
    }
    runtime = SimpleNamespace(context=Ctx("a", "spoofed-too"))
    assert resolve_identity(runtime, config) == UserKey("a", "real")


def test_empty_auth_user_is_ignored():
    config = {"configurable": {"langgraph_auth_user_id": "", "user_id": "u", "app_name": "a"}}
    assert resolve_identity(None, config) == UserKey("a", "u")


def test_default_app_name_and_missing_user():
    assert resolve_identity(
        None, {"configurable": {"user_id": "u"}}, default_app_name="d"
    ) == UserKey("d", "u")
    assert resolve_identity(None, {"configurable": {"user_id": "u"}}) is None
    assert resolve_identity(None, {"configurable": {"app_name": "a"}}, default_app_name="d") is None
    assert resolve_identity(None, {}) is None


def test_malformed_identity_is_none():
    assert resolve_identity(None, {"configurable": {"user_id": "bad\x00", "app_name": "a"}}) is None


def test_inside_a_graph_the_current_config_and_context_are_used():
    seen: list[UserKey | None] = []

    def node(state: MessagesState) -> dict:
        seen.append(resolve_identity())
        return {}

    builder = StateGraph(MessagesState, context_schema=dict)
    builder.add_node("n", node)
    builder.add_edge(START, "n")
    graph = builder.compile()
    graph.invoke({"messages": []}, {"configurable": {"app_name": "a", "user_id": "cfg"}})
    graph.invoke({"messages": []}, context={"app_name": "a", "user_id": "ctx"})
    assert seen == [UserKey("a", "cfg"), UserKey("a", "ctx")]


def test_an_unusable_authenticated_id_resolves_to_nobody_not_the_client_user():
    """Issue 31 item 10's twin outside the store: a present but unusable
    langgraph_auth_user_id (123, a list, a dict, blank) fell back to the client-sent
    user_id, so the hook, preload and tools acted for whomever the client named."""
    for unusable in (123, ["bob"], {"id": "bob"}, "  ", True):
        config = {
            "configurable": {"langgraph_auth_user_id": unusable, "user_id": "bob", "app_name": "a"}
        }
        context = SimpleNamespace(context=Ctx("a", "bob"))
        assert resolve_identity(None, config) is None, unusable
        assert resolve_identity(context, config) is None, unusable
    for unauthenticated in (None, ""):
        config = {"configurable": {"langgraph_auth_user_id": unauthenticated, "user_id": "bob"}}
        assert resolve_identity(None, config, default_app_name="a") == UserKey("a", "bob")
