"""Write path of the memory QA arms: `LLMExtractor` over each session, cached on disk.

As a deployment sees it: one job per session (its own thread, both speakers
as named user messages stamped with the session date) through the library's
job runner. After each session the live memories (ids kept, so both arms'
traces name the same memories) and the session's log go to
`<cache>/<sample_id>.json`: a crashed run resumes after the last finished
session, a finished conversation is rebuilt without a model call.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage, HumanMessage

from langmem_trpc.extraction.extractor import Extractor
from langmem_trpc.extraction.job import JobReport, JobSettings, JobStatus, run_job
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.types import Entry, UserKey

from .loader import Conversation, Session
from .meter import metered
from .retrieval import ServiceFactory, write_atomic

__all__ = ["ExtractedConversation", "extract_conversation", "session_messages"]

logger = logging.getLogger(__name__)

APP_NAME = "locomo-qa"
JOB_SETTINGS = JobSettings(policy="merge_similar", timeout=None)
"""The worker's defaults (merge_similar, 50 messages per extractor call), without a deadline."""

REPORT_COUNTS = ("proposed", "added", "updated", "deleted", "duplicates", "failed_ops")
"""The `JobReport` operation counts each session's log keeps."""

Progress = Callable[[Iterable[Any], str, int], Iterable[Any]]


@dataclass
class ExtractedConversation:
    """A service holding one conversation's extracted memories, and how they were made."""

    service: MemoryService
    user: UserKey
    sessions: list[dict[str, Any]]
    """One log per session: status, operations, calls, tokens, seconds."""
    memory_session: dict[str, int] = field(default_factory=dict)
    """Memory id -> the session whose extraction last wrote it."""
    reused: bool = False
    """True when every session came from the cache (no model call in this run)."""

    @property
    def totals(self) -> dict[str, float]:
        keys = ("calls", "prompt", "completion", "cached")
        out: dict[str, float] = {k: sum(s["usage"][k] for s in self.sessions) for k in keys}
        out["seconds"] = sum(s["seconds"] for s in self.sessions)
        return out


def session_messages(conv: Conversation, session: Session) -> list[BaseMessage]:
    """Both speakers as named user messages with the session date as their time."""
    stamp = {"timestamp": session.date.isoformat()} if session.date else {}
    return [
        HumanMessage(
            t.display_text,
            name=t.speaker,
            id=f"{conv.sample_id}:{t.dia_id}",
            additional_kwargs=dict(stamp),
        )
        for t in session.turns
        if t.display_text.strip()
    ]


def _memory_record(entry: Entry, session: int | None) -> dict[str, Any]:
    m = entry.memory
    return {
        "id": entry.id,
        "text": m.text,
        "kind": m.kind.value,
        "topics": list(m.topics),
        "event_time": m.event_time.isoformat() if m.event_time else None,
        "participants": list(m.participants),
        "location": m.location,
        "session": session,
    }


def _session_log(number: int, report: JobReport, usage: dict[str, int]) -> dict[str, Any]:
    return {
        "session": number,
        "status": report.status.value,
        **{k: getattr(report, k) for k in ("messages", *REPORT_COUNTS)},
        "ops": [
            {
                "action": o.op.action.value,
                "result": o.result,
                "memory_id": o.memory_id,
                "text": o.op.text,
                "kind": o.op.kind.value if o.op.kind else None,
                "origin": o.op.origin,
            }
            for o in report.outcomes
        ],
        "usage": usage,
        "seconds": round(report.seconds, 3),
        "error": report.error,
    }


def extract_conversation(
    conv: Conversation,
    extractor: Extractor,
    make_service: ServiceFactory,
    embeddings: Embeddings | None,
    cache_dir: Path,
    progress: Progress | None = None,
) -> ExtractedConversation:
    """A fresh service with the conversation's memories, extracted now or rebuilt from the cache.

    Sessions whose job did not complete are extracted again on the next run.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{conv.sample_id}.json"
    cached: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    service = make_service(embeddings)
    user = UserKey(APP_NAME, conv.sample_id)
    for m in cached.get("memories", []):  # rebuilt under their own ids
        fields = {k: m[k] for k in ("kind", "topics", "event_time", "participants", "location")}
        service.add(user, m["text"], memory_id=m["id"], **fields)
    logs: list[dict[str, Any]] = [
        s for s in cached.get("sessions", []) if s["status"] == JobStatus.COMPLETED.value
    ]
    memory_session = {m["id"]: m["session"] for m in cached.get("memories", [])}
    done = {s["session"] for s in logs}
    todo = [s for s in conv.sessions if s.number not in done]
    label = f"extract {conv.sample_id}"
    for session in progress(todo, label, len(todo)) if progress and todo else todo:
        messages = session_messages(conv, session)
        with metered() as meter:
            report = run_job(
                service, extractor, JOB_SETTINGS, user, f"session-{session.number}", messages
            )
        log = _session_log(session.number, report, meter.snapshot())
        logs = [s for s in logs if s["session"] != session.number] + [log]
        for outcome in report.outcomes:
            if outcome.memory_id and outcome.result in ("added", "updated"):
                memory_session[outcome.memory_id] = session.number
        if report.status != JobStatus.COMPLETED:
            why = f"{report.status.value} ({report.error})"
            logger.warning("extraction of %s session %d: %s", conv.sample_id, session.number, why)
        live = service.read(user)
        memory_session = {e.id: memory_session.get(e.id, session.number) for e in live}
        payload = {
            "sample_id": conv.sample_id,
            "sessions": sorted(logs, key=lambda s: s["session"]),
            "memories": [_memory_record(e, memory_session[e.id]) for e in live],
        }
        write_atomic(path, json.dumps(payload, ensure_ascii=False, indent=1))
    logs.sort(key=lambda s: s["session"])
    return ExtractedConversation(service, user, logs, memory_session, reused=not todo)
