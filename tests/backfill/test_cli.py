"""`langmem-trpc backfill`: sources, dry run, exit codes, malformed transcripts, resume after SIGKILL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage, HumanMessage, messages_to_dict
from langgraph.checkpoint.sqlite import SqliteSaver

import langmem_trpc
from langmem_trpc import UserKey
from langmem_trpc.cli import cli

from ._history import conversation, put_history

IDENTITY = {"user_id": "u1", "app_name": "app"}


def line(**fields: Any) -> str:
    base = {"thread_id": "x1", "app_name": "app", "user_id": "u9", "role": "user",
            "content": "hi", "timestamp": "2025-03-14T09:00:00Z"}  # fmt: skip
    return json.dumps({**base, **fields})


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, ["backfill", *args], catch_exceptions=False)


def checkpoints(path: Path, threads: int, days: list[str]) -> Path:
    saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    for i in range(threads):
        put_history(
            saver, f"t{i}", conversation(f"t{i}", days), {"user_id": f"u{i % 3}", "app_name": "app"}
        )
    saver.conn.close()
    return path


def memories(db: Path, user: UserKey) -> list[str]:
    with langmem_trpc.open(str(db)) as service:
        return sorted(e.memory.text for e in service.read(user))


def test_transcript_jsonl_extracts_on_its_clock_and_twice_is_once(tmp_path: Path) -> None:
    file = tmp_path / "t.jsonl"
    file.write_text(line(content="I moved to Lisbon") + "\n" + line(role="assistant", content="Nice",
                    timestamp="2025-03-14T09:00:05Z") + "\n")  # fmt: skip
    db = tmp_path / "m.db"
    first = run("--transcripts", str(file), "--db", str(db), "--extractor", "verbatim")
    assert first.exit_code == 0, first.output
    assert "1 added" in first.output
    with langmem_trpc.open(str(db)) as service:
        (entry,) = service.read(UserKey("app", "u9"))
        assert entry.memory.event_time.isoformat() == "2025-03-14T09:00:00+00:00"
        assert entry.created_at.year > 2025  # written now; the event keeps its own time
    second = run("--transcripts", str(file), "--db", str(db), "--extractor", "verbatim", "--json")
    assert json.loads(second.stdout)["messages"] == 0


def test_malformed_transcript_lists_every_line_and_extracts_nothing(tmp_path: Path) -> None:
    file = tmp_path / "bad.jsonl"
    file.write_text("\n".join([
        line(content="fine"),
        line(role="robot"),
        "not json",
        line(timestamp="yesterday-ish"),
        line(user_id="u7"),
        json.dumps({"thread_id": "x2", "app_name": "app", "role": "user", "content": "x",
                    "timestamp": "2025-03-14T09:00:00Z"}),
    ]) + "\n")  # fmt: skip
    db = tmp_path / "m.db"
    result = run("--transcripts", str(file), "--db", str(db), "--extractor", "verbatim")
    assert result.exit_code == 1
    assert (
        "line 2: role: must be one of user, human, assistant, ai, system, not 'robot'"
        in result.output
    )
    assert "line 3: json: Expecting value" in result.output
    assert "line 4: timestamp: must be an ISO 8601 time" in result.output
    assert "line 5: user_id: thread 'x1' already belongs to app/u9" in result.output
    assert "line 6: user_id: must be a non-empty string" in result.output
    assert "line 1" not in result.output and not db.exists()


def test_messages_to_dict_dump_with_identity_on_the_command_line(tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    stamp = {"timestamp": "2025-02-01T12:00:00Z"}
    messages = [
        HumanMessage("I adopted a dog", id="d1", additional_kwargs=stamp),
        AIMessage("Congrats", id="d2"),
    ]
    dump.write_text(json.dumps(messages_to_dict(messages)))
    db = tmp_path / "m.db"
    missing = run("--transcripts", str(dump), "--db", str(db), "--extractor", "verbatim")
    assert missing.exit_code == 1 and "give its thread and identity" in missing.output
    args = ["--thread", "th", "--app", "app", "--user", "u5"]
    result = run("--transcripts", str(dump), "--db", str(db), "--extractor", "verbatim", *args)
    assert result.exit_code == 0, result.output
    assert memories(db, UserKey("app", "u5")) == ["I adopted a dog"]


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path: Path) -> None:
    source = checkpoints(tmp_path / "cp.db", 4, ["2025-03-01", "2025-03-02"])
    before = source.read_bytes()
    db = tmp_path / "m.db"
    result = run(
        "--checkpointer",
        str(source),
        "--db",
        str(db),
        "--extractor",
        "verbatim",
        "--dry-run",
        "--json",
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert (plan["threads"], plan["messages"], plan["batches"]) == (4, 16, 8)
    assert not any(p.name.startswith("m.db") for p in tmp_path.iterdir())
    assert source.read_bytes() == before
    run("--checkpointer", str(source), "--db", str(db), "--extractor", "verbatim")
    again = run(
        "--checkpointer", str(source), "--db", str(db), "--extractor", "verbatim", "--dry-run"
    )
    assert "would extract 0 message(s)" in again.output


def test_a_failing_batch_exits_non_zero_and_is_dead_lettered(tmp_path: Path) -> None:
    source = checkpoints(tmp_path / "cp.db", 1, ["2025-03-01"])
    db = tmp_path / "m.db"
    args = [
        "--checkpointer",
        str(source),
        "--db",
        str(db),
        "--extractor",
        "tests.backfill.test_cli:Failing",
    ]
    result = run(*args, "--max-attempts", "2")
    assert result.exit_code == 1
    assert "1 batch(es) dead-lettered" in result.output


class Failing:
    def extract(self, request: Any) -> list[Any]:
        raise RuntimeError("model down")


def test_resume_after_sigkill_extracts_everything_once(tmp_path: Path) -> None:
    days = [f"2025-01-{d:02d}" for d in range(1, 9)]  # 8 sittings per thread
    source = checkpoints(tmp_path / "cp.db", 6, days)
    db, log = tmp_path / "m.db", tmp_path / "calls.log"
    env = {**os.environ, "BACKFILL_LOG": str(log), "BACKFILL_DELAY": "0.15"}
    command = [sys.executable, "-m", "langmem_trpc.cli", "backfill", "--checkpointer", str(source),
               "--db", str(db), "--extractor", "tests.backfill.slow_extractor:SlowVerbatim",
               "--claim-ttl", "1", "--concurrency", "2"]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        not log.exists() or len(log.read_text().splitlines()) < 10
    ):
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    calls_before = len(log.read_text().splitlines())
    assert 10 <= calls_before < 48  # killed mid-way
    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    calls = log.read_text().splitlines()
    assert len(calls) - calls_before <= 48 - calls_before + 2  # at most the in-flight batches again
    batches = [c for c in calls if c]
    assert len(set(batches)) == 48  # nothing skipped
    for user in range(3):
        expected = sorted(f"t{t} note {d}" for t in range(6) if t % 3 == user for d in range(8))
        assert memories(db, UserKey("app", f"u{user}")) == expected  # nothing twice


@pytest.mark.postgres
def test_queue_hands_the_threads_to_workers(tmp_path: Path, pg_url: str) -> None:
    from langmem_trpc.queue import QueueWorker

    source = checkpoints(tmp_path / "cp.db", 3, ["2025-03-01", "2025-03-05"])
    args = ["--checkpointer", str(source), "--db", pg_url, "--extractor", "verbatim"]
    queued = run(*args, "--queue")
    assert queued.exit_code == 0, queued.output
    assert "queued 3 thread(s)" in queued.output
    with langmem_trpc.open(pg_url) as service:
        assert service.read(UserKey("app", "u0")) == []
        QueueWorker(pg_url, service, langmem_trpc.VerbatimExtractor(), concurrency=2).run(
            drain=True
        )
        entries = service.read(UserKey("app", "u0"))
        assert {e.memory.event_time.date().isoformat() for e in entries} == {
            "2025-03-01",
            "2025-03-05",
        }
    assert "would extract 0 message(s)" in run(*args, "--dry-run").output


def test_module_attr_saver_identity_function_and_window(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    source = [
        "--checkpointer",
        "tests.backfill.saver_module:SAVER",
        "--db",
        str(db),
        "--extractor",
        "verbatim",
    ]
    outside = run(*source, "--since", "2025-05-01")
    assert outside.exit_code == 0 and "0 thread(s)" in outside.output
    mapped = run(
        *source, "--identity", "tests.backfill.saver_module:identity", "--until", "2025-05-01"
    )
    assert mapped.exit_code == 0, mapped.output
    assert memories(db, UserKey("app", "mapped")) == ["m1 note 0"]


def test_sqlite_saver_read_in_a_thread_by_abackfill(tmp_path: Path) -> None:
    source = checkpoints(tmp_path / "cp.db", 2, ["2025-03-01"])
    saver = SqliteSaver(sqlite3.connect(source, check_same_thread=False))
    service = langmem_trpc.InMemoryMemoryService()
    report = asyncio.run(langmem_trpc.abackfill(saver, service, langmem_trpc.VerbatimExtractor()))
    assert report.ok and report.added == 2


@pytest.mark.postgres
def test_postgres_saver_url_as_the_source(tmp_path: Path, pg_url: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(pg_url) as saver:
        saver.setup()
        put_history(saver, "p1", conversation("p1", ["2025-02-01", "2025-02-03"]), IDENTITY)
    db = tmp_path / "m.db"
    result = run("--checkpointer", pg_url, "--db", str(db), "--extractor", "verbatim")
    assert result.exit_code == 0, result.output
    assert memories(db, UserKey("app", "u1")) == ["p1 note 0", "p1 note 1"]


async def test_abackfill_reads_an_async_saver_natively(tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    source = checkpoints(tmp_path / "cp.db", 2, ["2025-03-01", "2025-03-04"])
    async with AsyncSqliteSaver.from_conn_string(str(source)) as saver:
        service = langmem_trpc.InMemoryMemoryService()
        report = await langmem_trpc.abackfill(saver, service, langmem_trpc.VerbatimExtractor())
    assert report.ok and (report.threads, report.added) == (2, 4)


BACKFILL_TUNING = [  # (option, given, backfill's argument, its value): no two alike
    ("--batch-messages", "9", "batch_messages", 9),
    ("--job-timeout", "31", "job_timeout", 31.0),
    ("--claim-ttl", "67", "claim_ttl", 67.0),
    ("--max-attempts", "4", "max_attempts", 4),
    ("--policy", "append_only", "policy", "append_only"),
]


def test_every_tuning_option_reaches_the_backfill(tmp_path: Path, monkeypatch) -> None:
    """The options pass through `BackfillSettings` under `history.backfill`'s own
    names, none swapped or dropped."""
    import langmem_trpc.history as history

    seen: dict[str, object] = {}
    backfill = history.backfill

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return backfill(*args, **kwargs)

    monkeypatch.setattr(history, "backfill", recording)
    file = tmp_path / "t.jsonl"
    file.write_text(line(content="I moved to Lisbon") + "\n")
    given = [arg for option, value, _, _ in BACKFILL_TUNING for arg in (option, value)]
    db = tmp_path / "m.db"
    result = run("--transcripts", str(file), "--db", str(db), "--extractor", "verbatim", *given)
    assert result.exit_code == 0, result.output
    expected = {name: value for _, _, name, value in BACKFILL_TUNING}
    assert {name: seen[name] for name in expected} == expected
