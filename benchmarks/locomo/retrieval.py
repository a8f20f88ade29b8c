"""Offline retrieval evaluation: no LLM, only the service's search.

Each conversation's units go into a fresh store; each question with
evidence (categories 1-4) is searched and the retrieved dialogue ids are
compared with the gold: recall@k (mean fraction found), any-hit@k,
all-hit@k, reciprocal rank and the top-k texts' tokens (characters / 4).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.service.reembed import Reembeddable
from langmem_trpc.types import SearchOptions, UserKey

from .baselines import BASELINES, Ranked
from .loader import Conversation
from .units import UnitKind, conversation_units, ingest_units

__all__ = [
    "DEFAULT_KS",
    "RetrievalArm",
    "ServiceFactory",
    "default_arms",
    "estimate_tokens",
    "question_metrics",
    "run_retrieval",
    "summarize",
]

logger = logging.getLogger(__name__)

DEFAULT_KS = (1, 3, 5, 10, 20, 25, 50)
"""Depths measured (one search of the deepest; 25 and 50 for the published baselines)."""
RETRIEVAL_CATEGORIES = (1, 2, 3, 4)

ServiceFactory = Callable[[Embeddings | None], MemoryService]


@dataclass(frozen=True)
class RetrievalArm:
    """One retrieval configuration: which units, whether vectors are used, which options."""

    name: str
    units: UnitKind
    embed: bool
    options: dict[str, Any] = field(default_factory=dict)
    """SearchOptions fields other than query and max_results; empty = the library defaults.

    Ablations set `{"fusion": {...}}`: per-call `FusionSettings` knobs."""
    description: str = ""
    baseline: str | None = None
    """A `baselines.BASELINES` name: rank the units without the library (no service)."""
    reembed: bool = False
    """Write the store with `run_retrieval`'s `first_embeddings`, re-embed it with the run's
    embedder (`Reembeddable.reembed`), then search: its recall equals the default arm's
    only if the re-embed left nothing on the first model (issue 27)."""

    @property
    def is_default(self) -> bool:
        return self.embed and not self.options and self.baseline is None and not self.reembed

    def search_options(self, query: str, k: int) -> SearchOptions:
        return SearchOptions(query=query, max_results=k, **self.options)


def default_arms() -> list[RetrievalArm]:
    """The arms of the offline evaluation; `turns-default` is the library default."""
    return [
        RetrievalArm(
            "turns-keyword", "turns", False, {"hybrid": False}, "keyword leg only (no embedder)"
        ),
        RetrievalArm(
            "turns-plain-keyword",
            "turns-plain",
            False,
            {"hybrid": False},
            "keyword leg only over the turn texts alone (no context topics), as bm25s sees them",
        ),
        RetrievalArm(
            "turns-bm25s",
            "turns",
            False,
            description="baseline: stock bm25s + Snowball (PyStemmer english) over the turn texts",
            baseline="bm25s",
        ),
        RetrievalArm(
            "turns-vector",
            "turns",
            True,
            {"hybrid": False, "similarity_threshold": 0.0},
            "MiniLM vector leg only",
        ),
        RetrievalArm(
            "turns-default", "turns", True, {}, "library default SearchOptions() with MiniLM"
        ),
        RetrievalArm(
            "observations-default", "observations", True, {}, "oracle facts, library defaults"
        ),
        RetrievalArm(
            "structured-default",
            "structured",
            True,
            {},
            "turns as extracted memories (names in participants, places in location), defaults",
        ),
        RetrievalArm(
            "turns-reembedded",
            "turns",
            True,
            {},
            "turns written with another embedder (--reembed-from), re-embedded, defaults",
            reembed=True,
        ),
    ]


def estimate_tokens(text: str) -> int:
    """Tokens estimated as characters / 4 (no tokenizer download is possible offline)."""
    return math.ceil(len(text) / 4)


def question_metrics(ranked: Ranked, evidence: Iterable[str], ks: Iterable[int]) -> dict[str, Any]:
    """Metrics of one ranked list of (dia ids, text) against the gold evidence ids."""
    gold = set(evidence)
    out: dict[str, Any] = {}
    for k in ks:
        found = {d for ids, _ in ranked[:k] for d in ids} & gold
        out[f"recall@{k}"] = len(found) / len(gold) if gold else 0.0
        out[f"any@{k}"] = 1.0 if found else 0.0
        out[f"all@{k}"] = 1.0 if gold and found == gold else 0.0
        out[f"tokens@{k}"] = sum(estimate_tokens(text) for _, text in ranked[:k])
    first = next((rank for rank, (ids, _) in enumerate(ranked, 1) if gold & set(ids)), None)
    out["mrr"] = 1.0 / first if first else 0.0
    return out


def summarize(records: list[dict[str, Any]], ks: Iterable[int]) -> dict[str, dict[str, float]]:
    """Metric -> {"overall", "1".."4"}: means over questions with evidence."""
    keys = [f"{m}@{k}" for k in ks for m in ("recall", "any", "all", "tokens")] + ["mrr"]
    summary: dict[str, dict[str, float]] = {}
    for key in keys:
        row: dict[str, float] = {}
        values = [(r["category"], r["metrics"][key]) for r in records if r["evidence"]]
        if values:
            row["overall"] = sum(v for _, v in values) / len(values)
        for category in RETRIEVAL_CATEGORIES:
            cat = [v for c, v in values if c == category]
            if cat:
                row[str(category)] = sum(cat) / len(cat)
        summary[key] = row
    summary["questions"] = {"overall": float(len([r for r in records if r["evidence"]]))}
    return summary


def _evaluate_conversation(
    arm: RetrievalArm,
    conv: Conversation,
    service: MemoryService | None,
    ks: tuple[int, ...],
    reembed_to: Embeddings | None = None,
) -> list[dict[str, Any]]:
    """One trace line per question with evidence: the question, what was retrieved, its
    metrics. With `reembed_to` the store is re-embedded with it after the ingestion."""
    units = conversation_units(conv, arm.units)
    depth = max(ks)
    if arm.baseline is not None:
        rank = BASELINES[arm.baseline](units)

        def retrieve(question: str) -> tuple[Ranked, list[dict[str, Any]]]:
            ranked = rank(question, depth)
            return ranked, [{"dia_ids": list(ids)} for ids, _ in ranked]
    else:
        assert service is not None
        user = UserKey("locomo-bench", conv.sample_id)
        id_map = ingest_units(service, user, units)
        if reembed_to is not None:
            if not isinstance(service, Reembeddable):
                raise ValueError(f"arm {arm.name}: {type(service).__name__} cannot re-embed")
            service.reembed(reembed_to)

        def retrieve(question: str) -> tuple[Ranked, list[dict[str, Any]]]:
            hits = service.search(user, question, arm.search_options(question, depth))
            ranked = [(id_map.get(h.id, ()), h.text) for h in hits]
            return ranked, [
                {"id": h.id, "dia_ids": list(ids), "score": h.score, "rrf": h.rrf_score}
                for h, (ids, _) in zip(hits, ranked, strict=True)
            ]

    records = []
    for q in conv.questions:
        if q.category not in RETRIEVAL_CATEGORIES:
            continue
        ranked, retrieved = retrieve(q.question)
        records.append(
            {
                "sample_id": conv.sample_id,
                "index": q.index,
                "category": q.category,
                "question": q.question,
                "evidence": list(q.evidence),
                "retrieved": retrieved,
                "metrics": question_metrics(ranked, q.evidence, ks),
            }
        )
    return records


def write_atomic(path: Path, text: str) -> None:
    """Write `text` through a temporary file: a crash leaves the old file or the new one."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, blank lines skipped."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def run_retrieval(
    conversations: list[Conversation],
    arms: list[RetrievalArm],
    make_service: ServiceFactory,
    embeddings: Embeddings | None,
    run_dir: Path,
    ks: tuple[int, ...] = DEFAULT_KS,
    progress: Callable[[Iterable[Any], str, int], Iterable[Any]] | None = None,
    resume: bool = True,
    first_embeddings: Embeddings | None = None,
    make_reembeddable: ServiceFactory | None = None,
) -> dict[str, dict[str, Any]]:
    """Every arm on every conversation, traced per (arm, conversation) as JSONL;
    with `resume` a finished trace is reused, so a crashed run continues. A `reembed`
    arm's stores come from `make_reembeddable` (else `make_service`), written with
    `first_embeddings`, then re-embedded with `embeddings`."""
    results: dict[str, dict[str, Any]] = {}
    for arm in arms:
        if arm.embed and embeddings is None:
            raise ValueError(f"arm {arm.name} needs an embedder")
        if arm.reembed and first_embeddings is None:
            raise ValueError(f"arm {arm.name} needs first_embeddings to re-embed from")
        trace_dir = run_dir / "traces" / arm.name
        trace_dir.mkdir(parents=True, exist_ok=True)
        records: list[dict[str, Any]] = []
        for conv in (
            progress(conversations, arm.name, len(conversations)) if progress else conversations
        ):
            trace = trace_dir / f"{conv.sample_id}.jsonl"
            if resume and trace.is_file():
                records.extend(read_jsonl(trace))
                continue
            service: MemoryService | None
            if arm.reembed:
                service = (make_reembeddable or make_service)(first_embeddings)
            else:
                service = None if arm.baseline else make_service(embeddings if arm.embed else None)
            reembed_to = embeddings if arm.reembed else None
            conv_records = _evaluate_conversation(arm, conv, service, ks, reembed_to)
            write_atomic(
                trace, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in conv_records)
            )
            records.extend(conv_records)
        summary = summarize(records, ks)
        per_conv = {}
        for conv in conversations:
            mine = [r for r in records if r["sample_id"] == conv.sample_id]
            per_conv[conv.sample_id] = summarize(mine, ks)["recall@10"]
        results[arm.name] = {
            **summary,
            "per_conversation_recall@10": per_conv,
            "units": arm.units,
            "embedder": "all-MiniLM-L6-v2" if arm.embed else None,
            "baseline": arm.baseline,
            "reembedded_from": type(first_embeddings).__name__ if arm.reembed else None,
            "options": arm.options,
            "description": arm.description,
        }
    return results
