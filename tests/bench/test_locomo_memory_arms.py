"""The memory QA arms end to end: LLMExtractor -> real service -> answer -> score -> trace."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage

from benchmarks.locomo.loader import load_locomo
from benchmarks.locomo.qa import QA_ARMS, run_qa
from langmem_trpc import InMemoryMemoryService
from langmem_trpc.cli.bench import bench
from langmem_trpc.testing import HashingEmbeddings, ScriptedChatModel, tool_call

USAGE = {
    "input_tokens": 100,
    "output_tokens": 20,
    "total_tokens": 120,
    "input_token_details": {"cache_read": 40},
}


def _extraction_reply(messages: list[BaseMessage]) -> AIMessage:
    """Proposes adds for what each session says (the tests' stand-in for the extraction LLM)."""
    assert isinstance(messages[0], SystemMessage), "extraction calls start with the system prompt"
    said = " ".join(str(m.content) for m in messages[1:])
    calls = []
    if "puppy" in said:
        calls += [
            tool_call(
                "memory_add",
                {
                    "memory": "Ann adopted a puppy named Rex",
                    "memory_kind": "episode",
                    "event_time": "2023-05-01",
                    "participants": ["Ann"],
                    "topics": ["Rex", "puppy"],
                },
            ),
            tool_call(
                "memory_add",
                {
                    "memory": "Ann's dog Rex is a golden retriever",
                    "memory_kind": "fact",
                    "topics": ["Rex", "golden retriever"],
                },
            ),
        ]
    if "marathon" in said:
        calls.append(
            tool_call(
                "memory_add",
                {
                    "memory": "Bob ran his first marathon in Boston in four hours ten minutes",
                    "memory_kind": "episode",
                    "event_time": "2023-06-20",
                    "participants": ["Bob"],
                    "topics": ["marathon", "Boston"],
                },
            )
        )
    return AIMessage("", tool_calls=calls, usage_metadata=USAGE)


def _extract_model() -> ScriptedChatModel:
    return ScriptedChatModel(default=_extraction_reply)


def _run(arm: str, tmp_path: Any, sample_path: Any, answer: ScriptedChatModel, extract: Any):
    convs = load_locomo(sample_path).conversations
    return run_qa(
        convs,
        arm,
        answer,
        lambda emb: InMemoryMemoryService(emb),
        HashingEmbeddings(),
        tmp_path / "qa" / f"{arm}.jsonl",
        top_k=5,
        extract_model=extract,
        extraction_dir=tmp_path / "qa" / "extraction",
    )


def _rows(path: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_memory_arms_are_qa_arms():
    assert {"memory-vector", "memory-hybrid"} <= set(QA_ARMS)


def test_memory_vector_extracts_stores_answers_and_traces(sample_path, tmp_path):
    extract = _extract_model()
    answer = ScriptedChatModel(
        replies=[AIMessage("golden retriever", usage_metadata=USAGE)],
        default="Not mentioned in the conversation",
    )
    summary = _run("memory-vector", tmp_path, sample_path, answer, extract)

    assert len(extract.calls) == 2, "one extraction call per session"
    cache = json.loads((tmp_path / "qa" / "extraction" / "conv-x.json").read_text())
    texts = {m["text"] for m in cache["memories"]}
    assert "Ann's dog Rex is a golden retriever" in texts
    assert {m["session"] for m in cache["memories"]} == {1, 2}
    assert [s["added"] for s in cache["sessions"]] == [2, 1]

    rows = _rows(tmp_path / "qa" / "memory-vector.jsonl")
    assert len(rows) == 6
    first = rows[0]
    assert first["answer"] == "golden retriever" and first["score"] == 1.0
    assert first["retrieval"] and {"rank", "id", "score", "session", "text"} <= set(
        first["retrieval"][0]
    )
    assert first["evidence_sessions"] == [1]
    assert first["evidence_session_hit"] is True
    assert first["tool_calls"] == [] and first["calls"] == 1
    assert first["prompt_tokens_est"] > 0
    assert first["usage"] == {"prompt": 100, "completion": 20, "cached": 40}
    assert [s["session"] for s in first["extraction"]] == [1, 2]
    assert first["extraction"][0]["added"] == 2 and first["extraction"][0]["calls"] == 1
    assert first["extraction_amortised"]["calls"] == pytest.approx(2 / 6)
    # the answering prompt holds the stored memory, from a vector-only search
    assert "golden retriever" in str(answer.calls[0][0].content)
    assert answer.bound_tools == [], "the baseline binds no tools"

    cost = summary["cost"]
    assert cost["extraction"]["calls_total"] == 2
    assert cost["extraction"]["prompt_tokens_total"] == 200
    assert cost["extraction"]["cached_tokens_total"] == 80
    assert cost["extraction"]["calls_per_q"] == pytest.approx(2 / 6)
    assert cost["total_calls_per_q"] == pytest.approx(1 + 2 / 6)
    assert cost["latency_p95_s"] >= cost["latency_p50_s"] >= 0
    assert summary["f1"]["4"] == 1.0 and "overall_no5" in summary["f1"]


def test_memory_hybrid_runs_a_tool_search_and_records_it(sample_path, tmp_path):
    extract = _extract_model()
    answer = ScriptedChatModel(
        replies=[
            AIMessage(
                "",
                tool_calls=[
                    tool_call(
                        "memory_search",
                        {"query": "Ann dog breed", "kind": "fact", "time_before": "2023"},
                    )
                ],
                usage_metadata=USAGE,
            ),
            AIMessage("golden retriever", usage_metadata=USAGE),
        ],
        default="Not mentioned in the conversation",
    )
    summary = _run("memory-hybrid", tmp_path, sample_path, answer, extract)

    rows = _rows(tmp_path / "qa" / "memory-hybrid.jsonl")
    first = rows[0]
    assert first["score"] == 1.0 and first["calls"] == 2
    assert first["usage"] == {"prompt": 200, "completion": 40, "cached": 80}
    (search,) = first["tool_calls"]
    assert search["name"] == "memory_search" and search["status"] == "success"
    assert search["args"]["query"] == "Ann dog breed"
    assert any(r["text"] == "Ann's dog Rex is a golden retriever" for r in search["results"])
    # the model saw the tool's results before answering
    tool_messages = [m for m in answer.calls[1] if isinstance(m, ToolMessage)]
    assert tool_messages and "golden retriever" in str(tool_messages[0].content)
    assert answer.bound_tools[0] == ["memory_search"]
    assert first["prompt_tokens_est"] > rows[1]["prompt_tokens_est"], (
        "tool results are in the prompt"
    )
    assert summary["cost"]["tool_calls_per_q"] == pytest.approx(1 / 6)


def test_max_passes_caps_tool_rounds_and_forces_an_answer(sample_path, tmp_path):
    search = AIMessage("", tool_calls=[tool_call("memory_search", {"query": "dog"})])
    answer = ScriptedChatModel(replies=[search] * 3 + ["golden retriever"], default="no idea")
    convs = load_locomo(sample_path).conversations
    run_qa(
        convs,
        "memory-hybrid",
        answer,
        lambda emb: InMemoryMemoryService(emb),
        HashingEmbeddings(),
        tmp_path / "h.jsonl",
        extract_model=_extract_model(),
        max_passes=2,
    )
    first = _rows(tmp_path / "h.jsonl")[0]
    assert [c["pass"] for c in first["tool_calls"]] == [1, 2]
    assert first["calls"] == 3, "two tool rounds, then one answer with tools off"


def test_resumed_runs_reuse_the_extraction(sample_path, tmp_path):
    extract = _extract_model()
    answer = ScriptedChatModel(default="Not mentioned in the conversation")
    _run("memory-vector", tmp_path, sample_path, answer, extract)
    assert len(extract.calls) == 2
    ids = {m["id"] for m in _cache(tmp_path)["memories"]}

    # the other memory arm and a rerun after a lost trace both rebuild from the cache
    _run("memory-hybrid", tmp_path, sample_path, answer, extract)
    (tmp_path / "qa" / "memory-vector.jsonl").unlink()
    _run("memory-vector", tmp_path, sample_path, answer, extract)
    assert len(extract.calls) == 2, "the extractor is not called again"
    rows = _rows(tmp_path / "qa" / "memory-vector.jsonl")
    assert {r["id"] for row in rows for r in row["retrieval"]} <= ids, "same memory ids"
    assert rows[0]["extraction_amortised"]["calls"] == pytest.approx(2 / 6)


def _cache(tmp_path: Any) -> dict[str, Any]:
    return json.loads((tmp_path / "qa" / "extraction" / "conv-x.json").read_text())


def test_a_crash_mid_conversation_resumes_after_the_last_finished_session(sample_path, tmp_path):
    seen: list[int] = []

    def crash_on_marathon(messages: list[BaseMessage]) -> AIMessage:
        seen.append(1)
        if "marathon" in " ".join(str(m.content) for m in messages):
            raise KeyboardInterrupt  # the process dies (not a model error the job absorbs)
        return _extraction_reply(messages)

    answer = ScriptedChatModel(default="Not mentioned in the conversation")
    with pytest.raises(KeyboardInterrupt):
        _run(
            "memory-vector",
            tmp_path,
            sample_path,
            answer,
            ScriptedChatModel(default=crash_on_marathon),
        )
    assert [s["session"] for s in _cache(tmp_path)["sessions"]] == [1]
    first_ids = {m["id"] for m in _cache(tmp_path)["memories"]}

    extract = _extract_model()
    _run("memory-vector", tmp_path, sample_path, answer, extract)
    assert len(extract.calls) == 1, "only the unfinished session is extracted again"
    cache = _cache(tmp_path)
    assert [s["session"] for s in cache["sessions"]] == [1, 2]
    assert first_ids < {m["id"] for m in cache["memories"]}


def test_cli_memory_arms_without_model_exit_cleanly(sample_path, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = CliRunner().invoke(
        bench,
        [
            "locomo",
            "--data",
            str(sample_path),
            "--arms",
            "memory-vector,memory-hybrid",
            "--run-dir",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "need a chat model" in result.output
    assert not (tmp_path / "r" / "qa").exists()


def test_cli_memory_arms_write_the_json_schema(sample_path, tmp_path, monkeypatch):
    import benchmarks.locomo.qa as qa
    import langmem_trpc.embeddings as emb

    models: dict[int, ScriptedChatModel] = {}

    def fake_model(name: str | None, max_tokens: int = 64) -> ScriptedChatModel:
        if max_tokens not in models:
            default = _extraction_reply if max_tokens > 256 else "Not mentioned in the conversation"
            models[max_tokens] = ScriptedChatModel(default=default)
        return models[max_tokens]

    monkeypatch.setattr(qa, "chat_model_from_env", fake_model)
    monkeypatch.setattr(emb, "local_embeddings_available", lambda: False)
    out = tmp_path / "qa.json"
    result = CliRunner().invoke(
        bench,
        [
            "locomo",
            "--data",
            str(sample_path),
            "--arms",
            "memory-vector,memory-hybrid",
            "--run-dir",
            str(tmp_path / "r"),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "HashingEmbeddings" in result.output
    payload = json.loads(out.read_text())
    assert payload["default_arm"] == "memory-hybrid"
    for arm in ("memory-vector", "memory-hybrid"):
        data = payload["arms"][arm]
        assert data["embedder"] == "hashing (fallback)"
        assert {"1", "2", "3", "4", "5", "overall", "overall_no5"} <= set(data["qa"]["f1"])
        assert {"calls_total", "prompt_tokens_per_q"} <= set(data["qa"]["cost"]["extraction"])
    assert len(models[4096].calls) == 2, "both arms share one extraction"
