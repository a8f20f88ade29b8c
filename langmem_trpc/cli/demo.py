"""`langmem-trpc demo`: the whole memory loop in two threads, offline by default.

Thread 1 learns that production runs Go 1.23, then hears about the upgrade to
1.24. A new thread 2 asks to plan the next upgrade. Everything runs through
the real pieces (post-run hook, background worker, extraction and reconcile,
the SQLite store, preload); only the chat model is scripted unless
OPENAI_API_KEY (or OPENAI_BASE_URL) is set.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from ..extraction import AutoMemoryWorker, LLMExtractor
from ..integration import MemoryCheckpointer, MemoryPreloadMiddleware, create_memory_tools
from ..integration.preload import BLOCK_BEGIN, BLOCK_END
from ..service.protocol import MemoryService
from ..testing import HashingEmbeddings, ScriptedChatModel, tool_call
from ..types import UserKey

__all__ = ["run_demo"]

USER = UserKey("langmem-demo", "alice")
SYSTEM_PROMPT = "You are a concise platform engineering assistant."
THREAD_1 = [
    "Our production services run Go 1.23.",
    "Update: we upgraded production to Go 1.24 last week.",
]
THREAD_2 = "Plan our next Go upgrade."


def _scripted_extraction(messages: list[BaseMessage]) -> AIMessage:
    """What a good extraction model answers for this conversation."""
    system = str(messages[0].content) if isinstance(messages[0], SystemMessage) else ""
    said = " ".join(str(m.content) for m in messages[1:] if isinstance(m, HumanMessage))
    topics = ["go", "production"]
    if "1.24" in said:
        found = re.search(r"- \[([^\]]+)\] \"Production runs Go 1\.23\"", system)
        if found:
            args = {
                "memory_id": found.group(1),
                "memory": "Production runs Go 1.24",
                "topics": topics,
            }
            return AIMessage("", tool_calls=[tool_call("memory_update", args)])
    if "1.23" in said:
        return AIMessage(
            "",
            tool_calls=[
                tool_call("memory_add", {"memory": "Production runs Go 1.23", "topics": topics})
            ],
        )
    return AIMessage("", tool_calls=[tool_call("nothing_to_remember")])


def _scripted_agent() -> ScriptedChatModel:
    return ScriptedChatModel(
        replies=[
            "Noted: production runs Go 1.23.",
            "Good to know: production is now on Go 1.24.",
            AIMessage(
                "", tool_calls=[tool_call("memory_search", {"query": "Go version production"})]
            ),
            "Plan: production is on Go 1.24, so target Go 1.25. Run the test suite on 1.25 in CI, "
            "canary one service, then roll out service by service.",
        ]
    )


def _models() -> tuple[BaseChatModel, BaseChatModel, str]:
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        try:
            from langchain_openai import ChatOpenAI
        except ImportError:
            pass
        else:
            name = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
            model = ChatOpenAI(model=name, temperature=0)
            return model, model, f"real model {name!r} (OPENAI_API_KEY / OPENAI_BASE_URL set)"
    extractor = ScriptedChatModel(replies=[], default=_scripted_extraction)
    note = "scripted model (offline; set OPENAI_API_KEY or OPENAI_BASE_URL to use a real one)"
    return _scripted_agent(), extractor, note


def _service(db_path: Path) -> tuple[MemoryService, str]:
    try:
        from ..backends.sqlite import SQLiteMemoryService
    except ImportError:  # pragma: no cover - the SQLite backend ships with the package
        from ..service.memory import InMemoryMemoryService

        return InMemoryMemoryService(
            embeddings=HashingEmbeddings()
        ), "in-memory (SQLite backend unavailable)"
    return SQLiteMemoryService(db_path, embeddings=HashingEmbeddings()), f"SQLite at {db_path}"


class _SeenByModel(AgentMiddleware[Any, Any, Any]):
    """Records the exact model input (after preload) so the demo can print it."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[list[BaseMessage]] = []

    def _record(self, request: ModelRequest) -> None:
        system = [request.system_message] if request.system_message is not None else []
        self.inputs.append([*system, *request.messages])

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        self._record(request)
        return handler(request)

    async def awrap_model_call(self, request: ModelRequest, handler: Any) -> Any:
        self._record(request)
        return await handler(request)


def _wait(worker: AutoMemoryWorker, jobs: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = worker.stats()
        if s.jobs_run + s.jobs_nothing_new + s.jobs_skipped_by_checker + s.jobs_failed >= jobs:
            return
        time.sleep(0.05)


def _memory_block(messages: list[BaseMessage]) -> str:
    text = str(messages[0].content) if messages else ""
    if BLOCK_BEGIN not in text:
        return "(no memories injected)"
    return text[text.index(BLOCK_BEGIN) : text.index(BLOCK_END) + len(BLOCK_END)]


def _ask(agent: Any, text: str, thread_id: str) -> str:
    config: RunnableConfig = {
        "configurable": {"thread_id": thread_id, "app_name": USER.app_name, "user_id": USER.user_id}
    }
    result = agent.invoke({"messages": [HumanMessage(text)]}, config)
    return str(result["messages"][-1].content)


def run_demo(db_path: Path, *, out: Callable[[str], None] = print) -> None:
    """Run the two-thread Go upgrade conversation and print what memory did."""
    agent_model, extraction_model, note = _models()
    service, where = _service(Path(db_path))
    out(f"Model: {note}")
    out(f"Store: {where}; user {USER}; the demo resets this user first")
    service.purge(USER)
    seen = _SeenByModel()
    with AutoMemoryWorker(service, LLMExtractor(extraction_model)) as worker:
        agent = create_agent(
            agent_model,
            tools=create_memory_tools(service),
            system_prompt=SYSTEM_PROMPT,
            middleware=[MemoryPreloadMiddleware(service, preload=10), seen],
            checkpointer=MemoryCheckpointer(InMemorySaver(), worker),
        )
        for runs, text in enumerate(THREAD_1, start=1):
            out(f"\n[thread-1] user: {text}\n[thread-1] assistant: {_ask(agent, text, 'thread-1')}")
            _wait(worker, runs)
        start = len(seen.inputs)
        out(
            f"\n[thread-2] user: {THREAD_2}\n[thread-2] assistant: {_ask(agent, THREAD_2, 'thread-2')}"
        )
    out("\nWhat is remembered (with history):")
    for entry in service.read(USER):
        out(f"- [{entry.id}] {entry.text}  topics={list(entry.memory.topics)}")
        for event in service.history(USER, entry.id):
            out(
                f"    {event.at:%H:%M:%S} {event.operation.value:<6} {event.text_before!r} -> {event.text_after!r}"
            )
    out("\nWhat thread 2's model saw before its first answer (the preloaded block):")
    out(
        _memory_block(seen.inputs[start])
        if len(seen.inputs) > start
        else "(the model was not called)"
    )
    service.close()
