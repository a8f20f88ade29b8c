"""Answering for the memory arms: extracted memories in, one scored answer out.

`memory-vector` (baseline): the top-k of a vector-only search, one call.
`memory-hybrid`: the top-k of the default hybrid search plus the agents'
`memory_search` tool for up to `max_passes` searches of the model's own; the
last call has tool use off, so there is always an answer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolRuntime

from langmem_trpc.integration.tools import create_memory_tools
from langmem_trpc.types import Entry, SearchOptions

from .extract import ExtractedConversation
from .loader import Conversation, Question
from .meter import metered
from .prompts import ANSWER_INSTRUCTION
from .retrieval import estimate_tokens

__all__ = ["MEMORY_ARMS", "MemoryAnswerer", "evidence_sessions"]

MEMORY_ARMS = ("memory-vector", "memory-hybrid")
SEARCH_HINT = (
    "If these memories do not answer the question, call memory_search (at most {passes} times) with "
    "short keyword queries, a kind or time_after / time_before dates; then answer."
)


def evidence_sessions(evidence: Sequence[str]) -> list[int]:
    """Session numbers of dialogue ids such as `D3:5`."""
    heads = (dia[1:].split(":", 1)[0] for dia in evidence)
    return sorted({int(head) for head in heads if head.isdigit()})


def memory_line(entry: Entry) -> str:
    """`date: people: text`, the line the answering prompts show per memory."""
    m = entry.memory
    when = m.event_time.strftime("%d %B %Y") if m.event_time else "undated"
    who = ", ".join(m.participants)
    return f"{when}: {who + ': ' if who else ''}{m.text}"


def _message_text(message: BaseMessage) -> str:
    return message.text if isinstance(message.text, str) else str(message.content)


class MemoryAnswerer:
    """Answers one conversation's questions from its extracted memories."""

    def __init__(
        self,
        arm: str,
        conv: Conversation,
        extracted: ExtractedConversation,
        model: BaseChatModel,
        top_k: int,
        max_passes: int = 3,
    ) -> None:
        self.arm = arm
        self.conv = conv
        self.extracted = extracted
        self.model = model
        self.top_k = top_k
        self.max_passes = max_passes if arm == "memory-hybrid" else 0
        # The baseline is plain top-k by cosine (no 0.3 floor, as the turns-vector retrieval
        # arm); the optimised arm runs the library's default search unchanged.
        self.options = (
            SearchOptions(max_results=top_k)
            if arm == "memory-hybrid"
            else SearchOptions(max_results=top_k, hybrid=False, similarity_threshold=0.0)
        )
        self.tools: list[BaseTool] = (
            create_memory_tools(extracted.service, ("memory_search",)) if self.max_passes else []
        )

    def _ranks(self, hits: Sequence[tuple[str, float | None, str]]) -> list[dict[str, Any]]:
        """Rank, id, score, source session and text of each hit (`(id, score, text)`)."""
        return [
            {
                "rank": i,
                "id": memory_id,
                "score": None if score is None else round(score, 4),
                "session": self.extracted.memory_session.get(memory_id),
                "text": text[:200],
            }
            for i, (memory_id, score, text) in enumerate(hits, 1)
        ]

    def _run_tool(self, call: dict[str, Any], index: int) -> tuple[ToolMessage, dict[str, Any]]:
        started = time.perf_counter()
        record: dict[str, Any] = {"pass": index, "name": call["name"], "args": call["args"]}
        tool = next((t for t in self.tools if t.name == call["name"]), None)
        if tool is None:
            message = ToolMessage(
                f"unknown tool {call['name']!r}; use memory_search",
                tool_call_id=call["id"],
                status="error",
            )
            return message, {**record, "status": "error", "results": []}
        user = self.extracted.user
        runtime: ToolRuntime[Any] = ToolRuntime(
            state={},
            context=None,
            config={"configurable": {"app_name": user.app_name, "user_id": user.user_id}},
            stream_writer=lambda _: None,
            tool_call_id=call["id"],
            store=None,
        )
        message = tool.invoke({**call, "args": {**call["args"], "runtime": runtime}})
        assert isinstance(message, ToolMessage)
        record["status"] = message.status
        record["results"] = self._ranks(
            [(e["id"], e.get("score"), e["memory"]["text"]) for e in message.artifact or []]
        )
        record["latency_s"] = round(time.perf_counter() - started, 4)
        return message, record

    def answer(self, question: Question, question_text: str) -> dict[str, Any]:
        """The trace fields of one answered question (answer, retrieval, tool calls, cost)."""
        started = time.perf_counter()
        hits = self.extracted.service.search(self.extracted.user, question.question, self.options)
        search_s = time.perf_counter() - started
        a, b = self.conv.speakers
        lines = "\n".join(memory_line(h) for h in hits) or "(none found)"
        parts = [f"Memories about {a} and {b} (date: people: memory):\n{lines}\n"]
        if self.max_passes:
            parts.append(SEARCH_HINT.format(passes=self.max_passes))
        parts.append(f"{ANSWER_INSTRUCTION}\nQuestion: {question_text} Short answer:")
        messages: list[BaseMessage] = [HumanMessage("\n".join(parts))]
        tool_calls: list[dict[str, Any]] = []
        with metered() as meter:
            reply = self._loop(messages, tool_calls)
        usage = meter.snapshot()
        ranks = self._ranks([(h.id, h.score, h.text) for h in hits])
        found = [*ranks, *(r for c in tool_calls for r in c["results"])]
        seen = {r["session"] for r in found}
        wanted = evidence_sessions(question.evidence)
        return {
            "answer": _message_text(reply).strip(),
            "retrieval": ranks,
            "evidence_sessions": wanted,
            "evidence_session_hit": bool(set(wanted) & seen) if wanted else None,
            "tool_calls": tool_calls,
            "prompt_tokens_est": sum(estimate_tokens(_message_text(m)) for m in messages),
            "usage": {k: usage[k] for k in ("prompt", "completion", "cached")},
            "calls": usage["calls"],
            "search_s": round(search_s, 4),
            "latency_s": time.perf_counter() - started,
        }

    def _loop(self, messages: list[BaseMessage], tool_calls: list[dict[str, Any]]) -> AIMessage:
        """Model, tools, model... at most `max_passes` tool rounds, then a tool-free answer."""
        if not self.max_passes:
            reply = self.model.invoke(messages)
            assert isinstance(reply, AIMessage)
            return reply
        searching = self.model.bind_tools(self.tools)
        final = self.model.bind_tools(self.tools, tool_choice="none")
        for index in range(self.max_passes + 1):
            runnable = searching if index < self.max_passes else final
            reply = runnable.invoke(messages)
            assert isinstance(reply, AIMessage)
            if not reply.tool_calls or index == self.max_passes:
                return reply
            messages.append(reply)
            for call in reply.tool_calls:
                message, record = self._run_tool(dict(call), index + 1)
                messages.append(message)
                tool_calls.append(record)
        raise AssertionError("unreachable")  # pragma: no cover
