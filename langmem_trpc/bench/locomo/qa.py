"""QA arms: answer each question with a chat model and score it with the official metric.

Arms: `long-context` (the whole transcript, official prompt layout) and
`raw-turns` (verbatim turn episodes, the library's default search, top-k
turns in the prompt); `observations` uses LoCoMo's oracle facts. Each answered
question is appended to a JSONL trace at once, so an interrupted run resumes
by skipping the questions already in the trace.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from ...errors import ConfigurationError
from ...types import SearchOptions, UserKey
from .loader import Conversation, Question
from .retrieval import ServiceFactory, estimate_tokens
from .scorer import aggregate, score_answer
from .units import UnitKind, conversation_units, ingest_units

__all__ = ["QA_ARMS", "chat_model_from_env", "long_context_prompt", "run_qa"]

QA_ARMS = ("long-context", "raw-turns", "observations")
ANSWER_INSTRUCTION = (
    "Based on the above context, write an answer in the form of a short phrase for the following question. "
    "Answer with exact words from the context whenever possible. If the context does not say, answer "
    '"Not mentioned in the conversation".'
)


def chat_model_from_env(model: str | None) -> BaseChatModel | None:
    """An OpenAI-compatible chat model from OPENAI_API_KEY / OPENAI_BASE_URL, or None."""
    if not os.environ.get("OPENAI_API_KEY"):
        return None
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as exc:
        raise ConfigurationError(
            "QA arms need langchain-openai: pip install 'langmem-trpc[openai]'"
        ) from exc
    name = model or os.environ.get("LOCOMO_MODEL", "gpt-4o-mini")
    return ChatOpenAI(
        model=name, temperature=0, max_tokens=64, base_url=os.environ.get("OPENAI_BASE_URL")
    )


def long_context_prompt(conv: Conversation) -> str:
    """The official full-context layout (sessions oldest first here, turns in order)."""
    a, b = conv.speakers
    parts = [
        f"Below is a conversation between two people: {a} and {b}. The conversation takes place over multiple "
        "days and the date of each conversation is written at the beginning of the conversation.\n"
    ]
    for session in conv.sessions:
        parts.append(f"DATE: {session.date_text}\nCONVERSATION:")
        for t in session.turns:
            line = f'{t.speaker} said, "{t.text}"'
            parts.append(line + (f" and shared {t.caption}." if t.caption else ""))
        parts.append("")
    return "\n".join(parts)


def _question_text(q: Question, rng: random.Random) -> str:
    if q.category == 2:
        return q.question + " Use DATE of CONVERSATION to answer with an approximate date."
    if q.category == 5 and q.adversarial_answer:
        options = ["Not mentioned in the conversation", str(q.adversarial_answer)]
        rng.shuffle(options)
        return f"{q.question} Select the correct answer: (a) {options[0]} (b) {options[1]}."
    return q.question


class _Retriever:
    def __init__(
        self,
        conv: Conversation,
        units: UnitKind,
        make_service: ServiceFactory,
        embeddings: Embeddings | None,
        top_k: int,
    ) -> None:
        self.service = make_service(embeddings)
        self.user = UserKey("locomo-qa", conv.sample_id)
        self.ids = ingest_units(self.service, self.user, conversation_units(conv, units))
        self.top_k = top_k

    def context(self, question: str) -> tuple[str, list[dict[str, Any]]]:
        hits = self.service.search(self.user, question, SearchOptions(max_results=self.top_k))
        lines = []
        for h in hits:
            when = h.memory.event_time.strftime("%d %B %Y") if h.memory.event_time else "undated"
            who = ", ".join(h.memory.participants)
            lines.append(f"{when}: {who + ': ' if who else ''}{h.text}")
        ranks = [
            {"rank": i, "id": h.id, "dia_ids": list(self.ids.get(h.id, ()))}
            for i, h in enumerate(hits, 1)
        ]
        return "Memories (date: speaker: text):\n" + "\n".join(lines) + "\n", ranks


def _usage(message: Any) -> dict[str, int]:
    meta = getattr(message, "usage_metadata", None) or {}
    details = meta.get("input_token_details") or {}
    return {
        "prompt": int(meta.get("input_tokens", 0)),
        "completion": int(meta.get("output_tokens", 0)),
        "cached": int(details.get("cache_read", 0)),
    }


def run_qa(
    conversations: list[Conversation],
    arm: str,
    model: BaseChatModel,
    make_service: ServiceFactory,
    embeddings: Embeddings | None,
    trace_path: Path,
    top_k: int = 10,
    include_adversarial: bool = True,
    progress: Callable[[Iterable[Any], str, int], Iterable[Any]] | None = None,
) -> dict[str, Any]:
    """Answer, score and trace every question of one arm; resumes from `trace_path`."""
    if arm not in QA_ARMS:
        raise ConfigurationError(f"unknown QA arm {arm!r}; choose from {', '.join(QA_ARMS)}")
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    done: dict[str, dict[str, Any]] = {}
    if trace_path.is_file():
        for line in trace_path.read_text(encoding="utf-8").splitlines():
            if line:
                row = json.loads(line)
                done[f"{row['sample_id']}#{row['index']}"] = row
    rng = random.Random(1234)
    with trace_path.open("a", encoding="utf-8") as trace:
        for conv in progress(conversations, arm, len(conversations)) if progress else conversations:
            questions = [q for q in conv.questions if include_adversarial or q.category != 5]
            todo = [q for q in questions if f"{conv.sample_id}#{q.index}" not in done]
            if not todo:
                continue
            retriever = None
            if arm != "long-context":
                units: UnitKind = "turns" if arm == "raw-turns" else "observations"
                retriever = _Retriever(conv, units, make_service, embeddings, top_k)
            for q in todo:
                ranks: list[dict[str, Any]] = []
                if retriever is None:
                    context = long_context_prompt(conv)
                else:
                    context, ranks = retriever.context(q.question)
                prompt = f"{context}\n{ANSWER_INSTRUCTION}\nQuestion: {_question_text(q, rng)} Short answer:"
                started = time.perf_counter()
                reply = model.invoke([HumanMessage(prompt)])
                latency = time.perf_counter() - started
                answer = str(reply.content).strip()
                row = {
                    "sample_id": conv.sample_id,
                    "index": q.index,
                    "category": q.category,
                    "question": q.question,
                    "gold": q.answer,
                    "answer": answer,
                    "score": round(score_answer(answer, q.answer, q.category), 3),
                    "retrieval": ranks,
                    "evidence": list(q.evidence),
                    "prompt_tokens_est": estimate_tokens(prompt),
                    "usage": _usage(reply),
                    "calls": 1,
                    "latency_s": latency,
                }
                trace.write(json.dumps(row, ensure_ascii=False) + "\n")
                trace.flush()
                done[f"{conv.sample_id}#{q.index}"] = row
    return summarize_qa(list(done.values()))


def summarize_qa(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {}
    latencies = sorted(r["latency_s"] for r in rows)
    p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]
    n = len(rows)
    return {
        "f1": aggregate((r["category"], r["score"]) for r in rows),
        "cost": {
            "questions": n,
            "prompt_tokens_per_q": sum(r["usage"]["prompt"] for r in rows) / n,
            "completion_tokens_per_q": sum(r["usage"]["completion"] for r in rows) / n,
            "cached_tokens_per_q": sum(r["usage"]["cached"] for r in rows) / n,
            "prompt_tokens_est_per_q": sum(r["prompt_tokens_est"] for r in rows) / n,
            "calls_per_q": sum(r["calls"] for r in rows) / n,
            "latency_p50_s": statistics.median(latencies),
            "latency_p95_s": p95,
        },
    }
