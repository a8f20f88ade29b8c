"""Helpers for the backfill tests: past threads written into real checkpointers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, MessagesState, StateGraph


def put_history(
    saver: Any,
    thread_id: str,
    turns: Sequence[tuple[str, Sequence[BaseMessage]]],
    identity: dict[str, str] | None = None,
) -> None:
    """Write one checkpoint per (ts, messages so far) of a past thread, as a run would,
    with the run's configurable identity keys (which savers copy into the metadata)."""
    config: Any = {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": "", **(identity or {})}
    }
    version = None
    for step, (ts, messages) in enumerate(turns):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=step))
        checkpoint["ts"] = ts
        version = saver.get_next_version(version, None)
        checkpoint["channel_values"] = {"messages": list(messages)}
        checkpoint["channel_versions"] = {"messages": version}
        saved = saver.put(
            config, checkpoint, {"source": "loop", "step": step}, {"messages": version}
        )
        config = {"configurable": {**config["configurable"], **saved["configurable"]}}


def conversation(thread: str, days: Sequence[str]) -> list[tuple[str, list[BaseMessage]]]:
    """Turns of a thread: one user message and one reply per day (ISO dates), ids stable."""
    turns: list[tuple[str, list[BaseMessage]]] = []
    messages: list[BaseMessage] = []
    for index, day in enumerate(days):
        messages = [
            *messages,
            HumanMessage(f"{thread} note {index}", id=f"{thread}-h{index}"),
            AIMessage(f"ok {index}", id=f"{thread}-a{index}"),
        ]
        turns.append((f"{day}T10:00:00+00:00", messages))
    return turns


def echo_graph(saver: Any) -> Any:
    """A one-node graph that answers each user message: real runs, real checkpoints."""

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"noted: {state['messages'][-1].content}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    graph.add_edge("reply", END)
    return graph.compile(checkpointer=saver)
