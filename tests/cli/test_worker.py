"""`langmem-trpc worker` and `langmem-trpc jobs status|failed|retry` over the PostgreSQL queue."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from langchain_core.messages import HumanMessage

from langmem_trpc import UserKey
from langmem_trpc.backends.postgres import PostgresMemoryService
from langmem_trpc.cli import cli
from langmem_trpc.cli.worker import load_extractor
from langmem_trpc.extraction import VerbatimExtractor
from langmem_trpc.queue import PostgresJobQueue

ALICE = UserKey("cli-queue", "alice")


class Failing(VerbatimExtractor):
    def extract(self, request):
        raise RuntimeError("provider down")


def make_verbatim() -> VerbatimExtractor:
    return VerbatimExtractor()


VERBATIM = VerbatimExtractor()


@pytest.fixture
def run():
    runner = CliRunner()

    def invoke(*args: str, ok: bool = True):
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        if ok:
            assert result.exit_code == 0, result.output
        return result

    return invoke


@pytest.fixture
def queued(pg_url):
    svc = PostgresMemoryService(pg_url, pool_size=2)
    svc.setup()
    with PostgresJobQueue(pg_url) as q:
        q.setup()
        for n in range(3):
            q.enqueue(ALICE, f"t{n}", [HumanMessage(f"I own {n} boats", id=f"h{n}")])
    yield svc
    svc.close()


def test_worker_drain_extracts_every_queued_job(run, pg_url, queued):
    result = run("worker", "--db", pg_url, "--extractor", "verbatim", "--concurrency", "2",
                 "--poll-interval", "0.2", "--drain")  # fmt: skip
    assert "langmem-trpc worker ready: queue=langmem concurrency=2" in result.output
    assert sorted(e.text for e in queued.read(ALICE)) == [f"I own {n} boats" for n in range(3)]
    status = json.loads(run("jobs", "status", "--db", pg_url, "--json").output)
    assert (status["depth"], status["running"], status["succeeded"]) == (0, 0, 3)


def test_jobs_status_shows_depth_and_per_user_lag(run, pg_url, queued):
    text = run("jobs", "status", "--db", pg_url).output
    assert "queue 'langmem': 3 waiting, 0 running" in text
    assert "cli-queue/alice: 3 unfinished" in text
    data = json.loads(run("jobs", "status", "--db", pg_url, "--json").output)
    assert data["per_user_lag"] == {"cli-queue/alice": 3}
    assert data["oldest_pending_seconds"] >= 0


def test_worker_app_takes_only_those_apps_and_status_shows_waiting_per_app(run, pg_url, queued):
    bob = UserKey("cli-other", "bob")
    with PostgresJobQueue(pg_url) as q:
        q.enqueue(bob, "t", [HumanMessage("I own a kayak", id="b1")])
    result = run("worker", "--db", pg_url, "--app", "cli-other", "--app", "cli-none",
                 "--poll-interval", "0.2", "--drain")  # fmt: skip
    assert "ready: queue=langmem apps=cli-other,cli-none concurrency=4" in result.output
    assert [e.text for e in queued.read(bob)] == ["I own a kayak"] and not queued.read(ALICE)
    assert "  app cli-queue: 3 waiting" in run("jobs", "status", "--db", pg_url).output
    data = json.loads(run("jobs", "status", "--db", pg_url, "--json").output)
    assert (data["depth"], data["per_app_depth"]) == (3, {"cli-queue": 3})


def test_worker_on_an_older_unrecorded_procrastinate_schema_fails_fast(run, pg_url):
    from tests.queue.test_schema import build_older

    build_older(pg_url, record=False)
    result = run("worker", "--db", pg_url, "--drain", ok=False)
    assert result.exit_code != 0 and "--migrations-path" in result.output


def test_jobs_status_needs_a_postgres_db(run, tmp_path):
    result = run("jobs", "status", "--db", str(tmp_path / "m.db"), ok=False)
    assert result.exit_code == 2 and "PostgreSQL --db" in result.output


def test_failed_queue_jobs_are_listed_and_retried(run, pg_url, queued):
    run("worker", "--db", pg_url, "--extractor", "tests.cli.test_worker:Failing", "--retries",
        "0", "--poll-interval", "0.2", "--drain")  # fmt: skip
    failed = json.loads(run("jobs", "failed", "--db", pg_url, "--json").output)
    jobs = [f for f in failed if f["kind"] == "queue_job"]
    assert len(jobs) == 3 and {j["thread_id"] for j in jobs} == {"t0", "t1", "t2"}
    assert all(j["status"] == "failed" and j["user_id"] == "alice" for j in jobs)
    assert "job:" in run("jobs", "failed", "--db", pg_url).output
    again = json.loads(run("jobs", "retry", "--db", pg_url, "--json", jobs[0]["id"]).output)
    assert again == {"kind": "queue_job", "id": jobs[0]["id"], "status": "todo"}
    assert json.loads(run("jobs", "status", "--db", pg_url, "--json").output)["depth"] == 1
    run("worker", "--db", pg_url, "--poll-interval", "0.2", "--drain")
    assert len(queued.read(ALICE)) == 1
    missing = run("jobs", "retry", "--db", pg_url, jobs[0]["id"], ok=False)
    assert missing.exit_code == 1 and "no failed job" in missing.output


def test_load_extractor_forms():
    assert isinstance(load_extractor("verbatim", None), VerbatimExtractor)
    assert isinstance(load_extractor("tests.cli.test_worker:Failing", None), Failing)
    assert isinstance(
        load_extractor("tests.cli.test_worker:make_verbatim", None), VerbatimExtractor
    )
    assert load_extractor("tests.cli.test_worker:VERBATIM", None) is VERBATIM


def test_worker_refuses_bad_options(run, tmp_path):
    result = run("worker", "--db", str(tmp_path / "m.db"), ok=False)
    assert result.exit_code == 2 and "PostgreSQL connection string" in result.output
    result = run("worker", "--db", "postgresql://x/y", "--extractor", "llm", ok=False)
    assert result.exit_code == 2 and "--model" in result.output
    result = run("worker", "--db", "postgresql://x/y", "--extractor", "nope", ok=False)
    assert result.exit_code == 2 and "MODULE:ATTR" in result.output
    result = run("worker", "--db", "postgresql://x/y", "--extractor", "no.such:thing", ok=False)
    assert result.exit_code == 1 and "no.such:thing" in result.output


class Slow(VerbatimExtractor):
    """Takes LANGMEM_TEST_SLOW seconds per call (default 1.5), like a model."""

    def extract(self, request):
        import os
        import time

        time.sleep(float(os.environ.get("LANGMEM_TEST_SLOW", "1.5")))
        return super().extract(request)


def _job_statuses(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [
            r[0] for r in conn.execute("SELECT status::text FROM procrastinate_jobs ORDER BY id")
        ]


def _spawn_worker(url: str, *args: str, slow: float):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "LANGMEM_TEST_SLOW": str(slow)}
    argv = [sys.executable, "-m", "langmem_trpc.cli", "worker", "--db", url, "--extractor",
            "tests.cli.test_worker:Slow", "--concurrency", "1", "--poll-interval", "0.2", *args]  # fmt: skip
    return subprocess.Popen(argv, cwd=root, env=env, stderr=subprocess.PIPE, text=True)


def _wait_running(url: str, proc, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while "doing" not in _job_statuses(url):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "no job started"
        time.sleep(0.05)


def test_sigterm_lets_the_running_job_finish(pg_url, queued):
    import signal

    proc = _spawn_worker(pg_url, slow=1.5)
    try:
        _wait_running(pg_url, proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    statuses = _job_statuses(pg_url)
    assert statuses.count("succeeded") == 1 and statuses.count("todo") == 2, statuses
    assert len(queued.read(ALICE)) == 1


def test_sigterm_puts_back_a_job_past_the_shutdown_timeout(pg_url, queued):
    import signal

    proc = _spawn_worker(pg_url, "--shutdown-timeout", "0.2", slow=4.0)
    try:
        _wait_running(pg_url, proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    statuses = _job_statuses(pg_url)
    assert "doing" not in statuses and statuses.count("todo") == 3, statuses


def test_worker_embeddings_by_import_path_write_vectors(run, pg_url, queued):
    from langmem_trpc.testing import HashingEmbeddings

    run("worker", "--db", pg_url, "--embeddings", "langmem_trpc.testing:HashingEmbeddings",
        "--poll-interval", "0.2", "--drain")  # fmt: skip
    with PostgresMemoryService(pg_url, HashingEmbeddings(), pool_size=1) as svc:
        hits = svc.search(ALICE, "boats")
    assert hits and all(h.memory.text.endswith("boats") for h in hits)
    with __import__("psycopg").connect(pg_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM langmem_memories WHERE embedding IS NOT NULL"
        ).fetchone()
    assert row == (3,)


def test_worker_refuses_a_non_embeddings_import(run):
    result = run("worker", "--db", "postgresql://x/y", "--embeddings", "tests.cli.test_worker:Slow",
                 ok=False)  # fmt: skip
    assert result.exit_code == 1 and "not an Embeddings" in result.output


WORKER_TUNING = [  # (option, given, QueueWorker's argument, its value): no two alike
    ("--job-timeout", "31", "job_timeout", 31.0),
    ("--claim-ttl", "67", "claim_ttl", 67.0),
    ("--stalled-after", "29", "stalled_after", 29.0),
    ("--retries", "7", "retries", 7),
    ("--retry-wait", "1.5", "retry_wait", 1.5),
    ("--max-attempts", "4", "max_attempts", 4),
    ("--policy", "append_only", "policy", "append_only"),
    ("--batch-messages", "9", "batch_messages", 9),
    ("--poll-interval", "0.2", "poll_interval", 0.2),
    ("--shutdown-timeout", "3", "shutdown_timeout", 3.0),
]


def test_every_tuning_option_reaches_the_queue_worker(run, pg_url, monkeypatch):
    """The options pass through `WorkerSettings` under QueueWorker's own names, none
    swapped or dropped."""
    import langmem_trpc.queue as queue_module

    seen: dict[str, object] = {}

    class Recording(queue_module.QueueWorker):
        def __init__(self, *args, **kwargs):
            seen.update(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(queue_module, "QueueWorker", Recording)
    given = [arg for option, value, _, _ in WORKER_TUNING for arg in (option, value)]
    run("worker", "--db", pg_url, *given, "--delete-succeeded", "--drain")
    expected = {name: value for _, _, name, value in WORKER_TUNING} | {"delete_succeeded": True}
    assert {name: seen[name] for name in expected} == expected
