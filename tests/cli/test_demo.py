"""`langmem-trpc demo`: a real model through OPENAI_BASE_URL alone, and what it shows."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

from langmem_trpc.cli import cli
from langmem_trpc.cli.demo import _plan_from_input, run_demo
from langmem_trpc.models import PLACEHOLDER_API_KEY, chat_model_from_env

STUB_ANSWER = "Stub says: production runs Go 1.24, plan 1.25."


class _Stub(BaseHTTPRequestHandler):
    """The smallest OpenAI-compatible server: every chat completion is STUB_ANSWER."""

    seen: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        reply = {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "stub"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": STUB_ANSWER},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def stub_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    handler = type("Handler", (_Stub,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.server_port}/v1")
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_only_a_base_url_is_enough_for_a_model(stub_server):
    model = chat_model_from_env()
    assert model is not None
    assert model.invoke("hello").content == STUB_ANSWER
    assert stub_server[0]["path"] == "/v1/chat/completions"
    assert stub_server[0]["auth"] == f"Bearer {PLACEHOLDER_API_KEY}"


def test_the_locomo_qa_client_needs_only_a_base_url(stub_server):
    from benchmarks.locomo.qa import chat_model_from_env as qa_model

    model = qa_model("stub-model")
    assert model is not None and model.invoke("q").content == STUB_ANSWER
    assert stub_server[0]["model"] == "stub-model"


def test_the_demo_runs_with_only_openai_base_url(stub_server, tmp_path: Path):
    lines: list[str] = []
    run_demo(tmp_path / "demo.db", out=lines.append)
    text = "\n".join(lines)
    assert lines[0] == "Model: real model 'gpt-4o-mini' (OPENAI_API_KEY / OPENAI_BASE_URL set)"
    assert f"[thread-2] assistant: {STUB_ANSWER}" in text
    assert any(call.get("tools") for call in stub_server)  # the agent offered the memory tools
    assert lines[-1].startswith("Verdict: ")


def test_no_key_and_no_url_means_no_model(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert chat_model_from_env() is None


def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)


def test_the_scripted_answer_comes_from_the_models_input():
    preload = SystemMessage("memories: Production runs Go 1.30")
    asked = HumanMessage(
        "Plan our next Go upgrade. We run Go 1.10?"
    )  # the user's words do not count
    assert "target Go 1.31" in str(_plan_from_input([preload, asked]).content)
    found = ToolMessage('{"results": [{"memory": "Production runs Go 1.7"}]}', tool_call_id="x")
    assert "target Go 1.8" in str(_plan_from_input([SystemMessage("none"), asked, found]).content)
    assert "I don't know" in str(_plan_from_input([SystemMessage("nothing"), asked]).content)


def test_the_demo_shows_the_search_call_a_verdict_and_what_to_try_next(monkeypatch, tmp_path):
    _offline(monkeypatch)
    db = tmp_path / "demo.db"
    result = CliRunner().invoke(cli, ["demo", "--db", str(db)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert (
        "[thread-2] tool call: memory_search(query='Go version production') -> "
        "1 result: 'Production runs Go 1.24'"
    ) in lines
    assert "[thread-2] assistant: Plan: production is on Go 1.24, so target Go 1.25." in (
        result.output
    )
    verdict = lines.index(
        "Verdict: memory worked: thread 2 knew production runs Go 1.24 without being told."
    )
    assert lines[verdict + 1] == "Try next:"
    assert lines[verdict + 2].startswith(f"  langmem-trpc memories list --db {db} ")
    # the history lines are the ones `memories history` prints
    listed = CliRunner().invoke(
        cli,
        ["memories", "list", "--db", str(db), "--app", "langmem-demo", "--user", "alice", "--json"],
    )
    memory_id = json.loads(listed.output)[0]["id"]
    history = CliRunner().invoke(
        cli,
        [
            "memories",
            "history",
            "--db",
            str(db),
            "--app",
            "langmem-demo",
            "--user",
            "alice",
            memory_id,
        ],
    )
    for event in history.output.splitlines():
        assert "      " + event in lines


def test_the_verdict_says_when_memory_did_not_carry_over(monkeypatch, tmp_path):
    from langmem_trpc.cli import demo

    _offline(monkeypatch)
    monkeypatch.setattr(demo, "THREAD_1", ["Hello there."])  # nothing worth remembering
    lines: list[str] = []
    run_demo(tmp_path / "demo.db", out=lines.append)
    assert lines[-1] == "Verdict: memory did NOT carry over: thread 2's model never saw Go 1.24."
    assert any("I don't know which Go version production runs" in line for line in lines)


def test_the_demo_uses_its_own_database_and_its_hints_work_as_printed(monkeypatch, tmp_path):
    """It wrote into, and purged a user in, the default memories.db (issue 30, item 15);
    "Try next" printed its commands on one line."""
    import shlex

    _offline(monkeypatch)
    home = tmp_path / "my home"  # a space: the printed commands must quote it
    monkeypatch.setenv("LANGMEM_TRPC_HOME", str(home))
    monkeypatch.delenv("LANGMEM_TRPC_DSN", raising=False)
    runner = CliRunner()
    assert (
        runner.invoke(
            cli, ["memories", "add", "--app", "langmem-demo", "--user", "alice", "my own memory"]
        ).exit_code
        == 0
    )
    result = runner.invoke(cli, ["demo"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (home / "langmem-demo.db").exists()
    kept = runner.invoke(cli, ["memories", "list", "--app", "langmem-demo", "--user", "alice"])
    assert "my own memory" in kept.output  # the default database is untouched
    lines = result.output.splitlines()
    hints = lines[lines.index("Try next:") + 1 :]
    assert len(hints) == 3 and all(h.startswith("  langmem-trpc ") for h in hints)
    for hint in hints[:2]:
        argv = shlex.split(hint, comments=True)
        ran = runner.invoke(cli, argv[1:], catch_exceptions=False)
        assert ran.exit_code == 0 and "Production runs Go 1.24" in ran.output, (hint, ran.output)
    assert shlex.split(hints[2], comments=True)[1:] == ["ui", "--db", str(home / "langmem-demo.db")]
