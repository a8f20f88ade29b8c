"""`langmem-trpc jobs failed` and `jobs retry` against a real SQLite file."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from langchain_core.messages import HumanMessage

from langmem_trpc import AutoMemoryWorker, SQLiteMemoryService, UserKey
from langmem_trpc.cli import cli
from langmem_trpc.extraction import JobStatus, VerbatimExtractor

ALICE = UserKey("support", "alice")


class Poisoned(VerbatimExtractor):
    def extract(self, request):
        raise RuntimeError("provider content filter")


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.setenv("LANGMEM_TRPC_HOME", str(tmp_path / "home"))
    runner = CliRunner()

    def invoke(*args: str, ok: bool = True):
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        if ok:
            assert result.exit_code == 0, result.output
        return result

    return invoke


def test_failed_lists_dead_letters_and_retry_queues_one(run, tmp_path):
    db = str(tmp_path / "m.db")
    thread = [HumanMessage("I live in Oslo", id="h1")]
    with SQLiteMemoryService(db) as svc:
        report = AutoMemoryWorker(svc, Poisoned(), max_attempts=1).process(ALICE, "t-1", thread)
        assert report.status == JobStatus.DEAD_LETTERED
    assert "no dead letters" in run("jobs", "failed", "--db", db, "--status", "retry").output
    text = run("jobs", "failed", "--db", db).output
    assert report.dead_lettered[0] in text and "provider content filter" in text
    assert "support/alice thread 't-1'" in text and "[h1]" in text
    (listed,) = json.loads(run("jobs", "failed", "--db", db, "--json").output)
    assert listed["id"] == report.dead_lettered[0] and listed["message_ids"] == ["h1"]
    assert (listed["attempts"], listed["status"], listed["messages"]) == (1, "dead", 1)
    queued = json.loads(run("jobs", "retry", "--db", db, "--json", listed["id"]).output)
    assert queued["status"] == "retry"
    with SQLiteMemoryService(db) as svc:
        retried = AutoMemoryWorker(svc, VerbatimExtractor()).process(ALICE, "t-1", thread)
        assert retried.retried == 1 and [e.text for e in svc.read(ALICE)] == ["I live in Oslo"]
    assert json.loads(run("jobs", "failed", "--db", db, "--json").output) == []
    done = json.loads(run("jobs", "failed", "--db", db, "--status", "all", "--json").output)
    assert [d["status"] for d in done] == ["done"]


def test_retry_of_an_unknown_id_names_the_field(run, tmp_path):
    result = run("jobs", "retry", "--db", str(tmp_path / "m.db"), "nope", ok=False)
    assert result.exit_code == 1 and "letter_id: no dead letter 'nope'" in result.output


@pytest.mark.postgres
def test_failed_and_status_on_postgres_without_a_queue(run, pg_url):
    """A PostgreSQL service used with the in-process worker has no queue tables: `jobs
    failed` showed `UndefinedTable: relation "procrastinate_jobs"` (issue 30, item 6)."""
    import langmem_trpc

    with langmem_trpc.open(pg_url) as svc:
        report = AutoMemoryWorker(svc, Poisoned(), max_attempts=1).process(
            ALICE, "t-1", [HumanMessage("I live in Oslo", id="h1")]
        )
    text = run("jobs", "failed", "--db", pg_url).output
    assert report.dead_lettered[0] in text and "provider content filter" in text
    assert text.rstrip().endswith("no job queue in this database")
    (listed,) = json.loads(run("jobs", "failed", "--db", pg_url, "--json").output)
    assert listed["id"] == report.dead_lettered[0]
    status = run("jobs", "status", "--db", pg_url).output
    assert "no job queue in this database" in status and "jobs failed" in status
    assert json.loads(run("jobs", "status", "--db", pg_url, "--json").output) == {
        "queue": "langmem",
        "exists": False,
    }
