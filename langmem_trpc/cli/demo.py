"""`langmem-trpc demo`: the whole memory loop in two threads, offline by default.

Thread 1 hears production runs Go 1.23, then 1.24; thread 2 asks to plan the
next upgrade. The real hook, worker, extraction, reconcile, SQLite store and
preload run; only the chat model is scripted, unless OPENAI_API_KEY (or
OPENAI_BASE_URL) is set.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from ..errors import ConfigurationError
from ..extraction import AutoMemoryWorker, LLMExtractor
from ..integration import MemoryCheckpointer, MemoryPreloadMiddleware, create_memory_tools
from ..integration.preload import BLOCK_BEGIN, BLOCK_END
from ..models import chat_model_from_env
from ..testing import HashingEmbeddings, ScriptedChatModel, tool_call
from ..types import UserKey
from ._common import plural
from ._output import event_line, safe, validity_span

__all__ = ["DEMO_DB", "default_demo_db", "run_demo", "run_demo_command", "try_next"]

DEMO_DB = "langmem-demo.db"
"""The demo's own SQLite file: it resets its user on every run, so it never uses the
default `memories.db` (nor $LANGMEM_TRPC_DSN) unless --db names it."""

USER = UserKey("langmem-demo", "alice")
SYSTEM_PROMPT = "You are a concise platform engineering assistant."
THREAD_1 = [
    "Our production services run Go 1.23.",
    "Update: we upgraded production to Go 1.24 last week.",
]
THREAD_2 = "Plan our next Go upgrade."


def _call(name: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[tool_call(name, args)])


def _scripted_extraction(messages: list[BaseMessage]) -> AIMessage:
    """What a good extraction model answers for this conversation."""
    system = str(messages[0].content) if isinstance(messages[0], SystemMessage) else ""
    said = " ".join(str(m.content) for m in messages[1:] if isinstance(m, HumanMessage))
    topics = ["go", "production"]
    found = re.search(r"- \[([^\]]+)\] \"Production runs Go 1\.23\"", system)
    if "1.24" in said and found:
        update = {"memory_id": found.group(1), "memory": "Production runs Go 1.24"}
        return _call("memory_update", **update, topics=topics)
    if "1.23" in said:
        return _call("memory_add", memory="Production runs Go 1.23", topics=topics)
    return _call("nothing_to_remember")


_VERSION = re.compile(r"Go (\d+)\.(\d+)")


def _plan_from_input(messages: list[BaseMessage]) -> AIMessage:
    """Thread 2's scripted answer from what the model was given: the newest Go
    version in its input (preloaded block, memory_search result), else "I don't know"."""
    seen = " ".join(str(m.content) for m in messages if not isinstance(m, HumanMessage))
    versions = sorted({(int(a), int(b)) for a, b in _VERSION.findall(seen)})
    if not versions:
        return AIMessage(
            "I don't know which Go version production runs; tell me and I will plan the upgrade."
        )
    major, minor = versions[-1]
    return AIMessage(
        f"Plan: production is on Go {major}.{minor}, so target Go {major}.{minor + 1}. Run the "
        f"test suite on {major}.{minor + 1} in CI, canary one service, then roll out service by "
        "service."
    )


def _scripted_reply(messages: list[BaseMessage]) -> AIMessage:
    """The scripted agent: acknowledge thread 1, search then plan in thread 2."""
    last = messages[-1] if messages else HumanMessage("")
    if isinstance(last, ToolMessage):
        return _plan_from_input(messages)
    said = str(last.content)
    if "plan" in said.lower():
        return _call("memory_search", query="Go version production")
    found = _VERSION.findall(said)
    return AIMessage(f"Noted: production runs Go {'.'.join(found[-1])}." if found else "Noted.")


def _models() -> tuple[BaseChatModel, BaseChatModel, str]:
    model, missing = None, ""
    try:
        model = chat_model_from_env()
    except ConfigurationError as exc:
        missing = f" ({exc})"
    if model is not None:
        name = getattr(model, "model_name", "?")
        return model, model, f"real model {name!r} (OPENAI_API_KEY / OPENAI_BASE_URL set)"
    extractor = ScriptedChatModel(replies=[], default=_scripted_extraction)
    note = "scripted model (offline; set OPENAI_API_KEY or OPENAI_BASE_URL to use a real one)"
    return ScriptedChatModel(replies=[], default=_scripted_reply), extractor, note + missing


class _SeenByModel(AgentMiddleware[Any, Any, Any]):
    """Records the exact model input (after preload) so the demo can print it (sync runs only)."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[list[BaseMessage]] = []

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        system = [request.system_message] if request.system_message is not None else []
        self.inputs.append([*system, *request.messages])
        return handler(request)


def _memory_block(calls: list[list[BaseMessage]]) -> str:
    """The preloaded memory block in the first of these model calls' input."""
    if not calls:
        return "(the model was not called)"
    text = str(calls[0][0].content) if calls[0] else ""
    if BLOCK_BEGIN not in text:
        return "(no memories injected)"
    return text[text.index(BLOCK_BEGIN) : text.index(BLOCK_END) + len(BLOCK_END)]


def _ask(agent: Any, text: str, thread_id: str) -> list[BaseMessage]:
    """Run one turn; returns the messages this turn added (the user's first)."""
    config: RunnableConfig = {
        "configurable": {"thread_id": thread_id, "app_name": USER.app_name, "user_id": USER.user_id}
    }
    result = agent.invoke({"messages": [HumanMessage(text)]}, config)
    messages: list[BaseMessage] = result["messages"]
    starts = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    return messages[starts[-1] :] if starts else messages


def _result_summary(content: str) -> str:
    """A memory tool's JSON result as `N results: 'text'; ...`, else its first line."""
    try:
        data = json.loads(content)
        found = [str(r["memory"]) for r in data["results"]]
    except (ValueError, KeyError, TypeError):
        lines = content.strip().splitlines() or [""]
        return lines[0][:200]
    return f"{len(found)} {plural(len(found), 'result')}: " + "; ".join(map(repr, found))


def _tool_lines(turn: list[BaseMessage]) -> list[str]:
    """Each tool call of the turn and what it returned, in short."""
    results = {m.tool_call_id: str(m.content) for m in turn if isinstance(m, ToolMessage)}
    lines = []
    for message in turn:
        for call in getattr(message, "tool_calls", None) or []:
            args = ", ".join(f"{k}={v!r}" for k, v in call["args"].items())
            got = results.get(call["id"] or "")
            shown = "(no result)" if got is None else _result_summary(got)
            lines.append(safe(f"tool call: {call['name']}({args}) -> {shown}"))
    return lines


def _verdict(model_input: str, answer: str) -> str:
    knew = "1.24" in model_input
    if knew and "1.24" in answer:
        return "Verdict: memory worked: thread 2 knew production runs Go 1.24 without being told."
    if knew:
        return (
            "Verdict: memory reached the model (Go 1.24 was in its input), but its answer "
            "did not use it."
        )
    return "Verdict: memory did NOT carry over: thread 2's model never saw Go 1.24."


def run_demo(
    db_path: Path, *, out: Callable[[str], None] = print, hints: Sequence[str] = ()
) -> None:
    """Run the two-thread Go upgrade conversation and print what memory did.

    `hints` are commands printed at the end under "Try next:", one per line.
    """
    from ..registry import open as open_store

    agent_model, extraction_model, note = _models()
    service = open_store(f"sqlite://{Path(db_path)}", embeddings=HashingEmbeddings())
    out(f"Model: {note}")
    out(f"Store: SQLite at {Path(db_path)}; user {USER}; the demo resets this user first")
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
        for text in THREAD_1:
            answer = str(_ask(agent, text, "thread-1")[-1].content)
            out(f"\n[thread-1] user: {text}\n[thread-1] assistant: {safe(answer)}")
            worker.flush(timeout=120)  # the next turn reads what this one stored
        start = len(seen.inputs)
        turn = _ask(agent, THREAD_2, "thread-2")
        out(f"\n[thread-2] user: {THREAD_2}")
        for line in _tool_lines(turn):
            out(f"[thread-2] {line}")
        answer = str(turn[-1].content)
        out(f"[thread-2] assistant: {safe(answer)}")
    out("\nWhat is remembered (current memories, each with its versions and history):")
    for entry in service.read(USER):
        out(safe(f"- [{entry.id}] {entry.text}  topics={list(entry.memory.topics)}"))
        for version in service.versions(USER, entry.id):
            out(safe(f"    version [{version.id}] {version.text}  valid {validity_span(version)}"))
            for event in service.history(USER, version.id):
                out("      " + event_line(event))
    out("\nWhat thread 2's model saw before its first answer (the preloaded block):")
    out(_memory_block(seen.inputs[start:]))
    model_input = " ".join(str(m.content) for call in seen.inputs[start:] for m in call)
    out("")
    out(_verdict(model_input, answer))
    if hints:
        out("Try next:")
        for hint in hints:
            out(f"  {hint}")
    service.close()


def default_demo_db() -> Path:
    """`langmem-demo.db` in $LANGMEM_TRPC_HOME, else in the user data directory."""
    if home := os.environ.get("LANGMEM_TRPC_HOME"):
        return Path(home) / DEMO_DB
    import platformdirs

    return Path(platformdirs.user_data_dir("langmem-trpc")) / DEMO_DB


def try_next(db_path: Path) -> list[str]:
    """Commands that work as printed on the demo's database (a `#` comment names a missing extra)."""
    where = f"--db {shlex.quote(str(db_path))}"
    user = f"--app {USER.app_name} --user {USER.user_id}"
    ui = f"langmem-trpc ui {where}"
    if not all(importlib.util.find_spec(m) for m in ("starlette", "uvicorn", "jinja2")):
        ui += '  # needs the [ui] extra: pip install ".[ui]"'
    return [
        f"langmem-trpc memories list {where} {user}",
        f"langmem-trpc memories search {where} {user} 'go version'",
        ui,
    ]


def run_demo_command(db: str | None, out: Callable[[str], None] = print) -> None:
    """`langmem-trpc demo`: on --db, else on its own `langmem-demo.db` (see `DEMO_DB`)."""
    target = Path(db) if db else default_demo_db()
    target.parent.mkdir(parents=True, exist_ok=True)
    run_demo(target, out=out, hints=try_next(target))
