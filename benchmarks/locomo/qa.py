"""QA arms: answer each question with a chat model and score it with the official metric.

`long-context` (the whole transcript, official layout), `raw-turns` (turn
episodes, default search, top-k in the prompt), `observations` (LoCoMo's
oracle facts) and the two memory arms (`memory_qa.py`). Each answer is
appended to a JSONL trace at once, so a rerun skips what is already there;
the memory arms also cache each conversation's extraction (`extract.py`).
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

from langmem_trpc.errors import ConfigurationError
from langmem_trpc.types import SearchOptions, UserKey

from .extract import REPORT_COUNTS, ExtractedConversation, extract_conversation
from .loader import Conversation, Question
from .memory_qa import MEMORY_ARMS, MemoryAnswerer, memory_line
from .meter import usage_of
from .prompts import ANSWER_INSTRUCTION, question_text
from .retrieval import ServiceFactory, estimate_tokens, read_jsonl
from .scorer import aggregate, score_answer
from .units import UnitKind, conversation_units, ingest_units

__all__ = [
    "ANSWER_INSTRUCTION",
    "MEMORY_ARMS",
    "QA_ARMS",
    "chat_model_from_env",
    "long_context_prompt",
    "run_qa",
    "summarize_qa",
]

QA_ARMS = ("long-context", "raw-turns", "observations", *MEMORY_ARMS)
Answer = Callable[[Question, str], dict[str, Any]]


def chat_model_from_env(model: str | None, max_tokens: int = 64) -> BaseChatModel | None:
    """An OpenAI-compatible chat model (`langmem_trpc.models`: OPENAI_API_KEY or
    OPENAI_BASE_URL alone), or None; the model is `model`, else $LOCOMO_MODEL,
    else gpt-4o-mini. `max_tokens` 64 suits short answers."""
    from langmem_trpc.models import chat_model_from_env as from_env

    name = model or os.environ.get("LOCOMO_MODEL", "gpt-4o-mini")
    return from_env(name, max_tokens=max_tokens)


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


def _plain_answerer(
    arm: str,
    conv: Conversation,
    model: BaseChatModel,
    make_service: ServiceFactory,
    embeddings: Embeddings | None,
    top_k: int,
) -> Answer:
    """One model call over the transcript (long-context) or the top-k units."""
    if arm != "long-context":
        service, user = make_service(embeddings), UserKey("locomo-qa", conv.sample_id)
        units: UnitKind = "turns" if arm == "raw-turns" else "observations"
        ids = ingest_units(service, user, conversation_units(conv, units))

    def answer(q: Question, text: str) -> dict[str, Any]:
        ranks: list[dict[str, Any]] = []
        if arm == "long-context":
            context = long_context_prompt(conv)
        else:
            hits = service.search(user, q.question, SearchOptions(max_results=top_k))
            lines = "\n".join(memory_line(h) for h in hits)
            context = f"Memories (date: speaker: text):\n{lines}\n"
            ranks = [
                {"rank": i, "id": h.id, "dia_ids": list(ids.get(h.id, ()))}
                for i, h in enumerate(hits, 1)
            ]
        prompt = f"{context}\n{ANSWER_INSTRUCTION}\nQuestion: {text} Short answer:"
        started = time.perf_counter()
        reply = model.invoke([HumanMessage(prompt)])
        latency = time.perf_counter() - started
        return {
            "answer": str(reply.content).strip(),
            "retrieval": ranks,
            "prompt_tokens_est": estimate_tokens(prompt),
            "usage": usage_of(reply),
            "calls": 1,
            "latency_s": latency,
        }

    return answer


def _extraction_fields(extracted: ExtractedConversation, questions: int) -> dict[str, Any]:
    """Per-session extractor operations and the extraction cost shared by the conversation's questions."""
    return {
        "memories": len(extracted.memory_session),
        "extraction": [
            {k: s[k] for k in ("session", "status", *REPORT_COUNTS)}
            | {"calls": s["usage"]["calls"]}
            for s in extracted.sessions
        ],
        "extraction_amortised": {k: v / questions for k, v in extracted.totals.items()},
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
    *,
    extract_model: BaseChatModel | None = None,
    extraction_dir: Path | None = None,
    max_passes: int = 3,
) -> dict[str, Any]:
    """Answer, score and trace every question of one arm; resumes from `trace_path`.

    The memory arms extract with `LLMExtractor(extract_model or model)`, cached
    per conversation in `extraction_dir` (default: `extraction` beside the trace).
    """
    if arm not in QA_ARMS:
        raise ConfigurationError(f"unknown QA arm {arm!r}; choose from {', '.join(QA_ARMS)}")
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    done: dict[str, dict[str, Any]] = {}
    if trace_path.is_file():
        done = {f"{row['sample_id']}#{row['index']}": row for row in read_jsonl(trace_path)}
    extractor = None
    if arm in MEMORY_ARMS:
        from langmem_trpc.extraction.extractor import LLMExtractor

        extractor = LLMExtractor(extract_model or model)
    cache = extraction_dir or trace_path.parent / "extraction"
    rng = random.Random(1234)
    with trace_path.open("a", encoding="utf-8") as trace:
        for conv in progress(conversations, arm, len(conversations)) if progress else conversations:
            questions = [q for q in conv.questions if include_adversarial or q.category != 5]
            todo = [q for q in questions if f"{conv.sample_id}#{q.index}" not in done]
            if not todo:
                continue
            extra: dict[str, Any] = {}
            if extractor is not None:
                extracted = extract_conversation(
                    conv, extractor, make_service, embeddings, cache, progress
                )
                extra = _extraction_fields(extracted, len(questions))
                answer: Answer = MemoryAnswerer(
                    arm, conv, extracted, model, top_k, max_passes
                ).answer
            else:
                answer = _plain_answerer(arm, conv, model, make_service, embeddings, top_k)
            for q in todo:
                fields = answer(q, question_text(q, rng))
                row = {
                    "sample_id": conv.sample_id,
                    "index": q.index,
                    "category": q.category,
                    "question": q.question,
                    "gold": q.answer,
                    "score": round(score_answer(fields["answer"], q.answer, q.category), 3),
                    "evidence": list(q.evidence),
                    **fields,
                    **extra,
                }
                trace.write(json.dumps(row, ensure_ascii=False) + "\n")
                trace.flush()
                done[f"{conv.sample_id}#{q.index}"] = row
    return summarize_qa(list(done.values()))


def summarize_qa(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """F1 per category (with and without cat 5) and cost per question; the memory
    arms add `cost.extraction` (amortised and total) and `cost.total_*_per_q`."""
    if not rows:
        return {}
    latencies = sorted(r["latency_s"] for r in rows)
    n = len(rows)
    cost: dict[str, Any] = {"questions": n}
    for key in ("prompt", "completion", "cached"):
        cost[f"{key}_tokens_per_q"] = sum(r["usage"][key] for r in rows) / n
    cost["prompt_tokens_est_per_q"] = sum(r["prompt_tokens_est"] for r in rows) / n
    cost["calls_per_q"] = sum(r["calls"] for r in rows) / n
    cost["latency_p50_s"] = statistics.median(latencies)
    cost["latency_p95_s"] = latencies[min(n - 1, int(0.95 * n))]
    if all("extraction_amortised" in r for r in rows):
        names = {"calls": "calls", **{k: f"{k}_tokens" for k in ("prompt", "completion", "cached")}}
        extraction: dict[str, Any] = {}
        for key, name in names.items():
            total = sum(r["extraction_amortised"][key] for r in rows)
            extraction[f"{name}_total"] = round(total, 3)
            extraction[f"{name}_per_q"] = total / n
        extraction["seconds_total"] = round(
            sum(r["extraction_amortised"].get("seconds", 0.0) for r in rows), 3
        )
        memories = {r["sample_id"]: r["memories"] for r in rows}
        extraction["conversations"] = len(memories)
        extraction["memories_per_conversation"] = sum(memories.values()) / len(memories)
        cost["extraction"] = extraction
        cost["tool_calls_per_q"] = sum(len(r.get("tool_calls", ())) for r in rows) / n
        for name in names.values():  # the answer's cost plus the extraction's
            cost[f"total_{name}_per_q"] = cost[f"{name}_per_q"] + extraction[f"{name}_per_q"]
    return {"f1": aggregate((r["category"], r["score"]) for r in rows), "cost": cost}
