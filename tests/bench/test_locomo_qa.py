"""The plain QA arms (`benchmarks/locomo/qa.py`): what the answering prompt holds, and the trace."""

from __future__ import annotations

import json
from typing import Any

from benchmarks.locomo.loader import load_locomo
from benchmarks.locomo.qa import run_qa
from langmem_trpc import InMemoryMemoryService
from langmem_trpc.testing import HashingEmbeddings, ScriptedChatModel


def _run(arm: str, tmp_path: Any, sample_path: Any) -> tuple[ScriptedChatModel, list[dict]]:
    model = ScriptedChatModel(default="golden retriever")
    convs = load_locomo(sample_path).conversations
    trace = tmp_path / f"{arm}.jsonl"
    run_qa(convs, arm, model, lambda emb: InMemoryMemoryService(emb), HashingEmbeddings(), trace)
    rows = [json.loads(line) for line in trace.read_text().splitlines() if line]
    return model, rows


def test_raw_turns_prompt_lists_the_hits_as_date_speaker_text(sample_path, tmp_path):
    model, rows = _run("raw-turns", tmp_path, sample_path)
    prompt = str(model.calls[0][0].content)
    context, rest = prompt.split("\n\n", 1)
    lines = context.splitlines()
    assert lines[0] == "Memories (date: speaker: text):"
    assert "08 May 2023: Ann: A golden retriever. [shared a photo of a dog]" in lines[1:]
    assert len(lines) - 1 == len(rows[0]["retrieval"]) > 0
    assert rest.endswith("Question: What breed is Ann's dog? Short answer:")
    first = rows[0]["retrieval"][0]
    assert first["rank"] == 1 and first["dia_ids"] and set(first) == {"rank", "id", "dia_ids"}


def test_long_context_prompt_is_the_transcript_without_retrieval(sample_path, tmp_path):
    model, rows = _run("long-context", tmp_path, sample_path)
    prompt = str(model.calls[0][0].content)
    assert prompt.startswith("Below is a conversation between two people: Ann and Bob.")
    assert 'Ann said, "A golden retriever." and shared a photo of a dog.' in prompt
    assert rows[0]["retrieval"] == [] and rows[0]["calls"] == 1
