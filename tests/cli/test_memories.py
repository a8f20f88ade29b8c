from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from langmem_trpc.cli import cli


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


def ids(output: str) -> list[str]:
    return [item["id"] for item in json.loads(output)]


def test_add_search_update_history_round_trip(run, tmp_path):
    db = str(tmp_path / "m.db")
    base = ["--db", db, "--app", "support", "--user", "alice"]
    added = json.loads(
        run("memories", "add", *base, "--topic", "go", "--json", "Production runs Go 1.23").output
    )
    assert added["memory"]["text"] == "Production runs Go 1.23"
    updated = run("memories", "update", *base, "--json", added["id"], "Production runs Go 1.24")
    assert json.loads(updated.output)["id"] == added["id"]
    found = run("memories", "search", *base, "--json", "go version production")
    assert ids(found.output) == [added["id"]]
    history = json.loads(run("memories", "history", *base, "--json", added["id"]).output)
    assert [h["operation"] for h in history] == ["add", "update"]
    text = run("memories", "history", *base, added["id"]).output
    assert "'Production runs Go 1.23' -> 'Production runs Go 1.24'" in text


def test_list_get_delete_clear_purge(run, tmp_path):
    base = ["--db", str(tmp_path / "m.db"), "--user", "bob"]
    first = json.loads(run("memories", "add", *base, "--json", "one").output)["id"]
    run("memories", "add", *base, "two")
    assert len(ids(run("memories", "list", *base, "--json").output)) == 2
    assert "one" in run("memories", "get", *base, first).output
    assert run("memories", "delete", *base, first).output.strip() == f"deleted {first}"
    assert run("memories", "clear", *base, "--yes").output.strip() == "cleared 1 memories"
    assert run("memories", "purge", *base, "--yes").output.strip() == "purged 2 memories"
    assert run("memories", "list", *base).output.strip() == "no memories"


def test_users_are_isolated_on_the_command_line(run, tmp_path):
    db = str(tmp_path / "m.db")
    secret = json.loads(
        run("memories", "add", "--db", db, "--user", "alice", "--json", "alice's secret").output
    )["id"]
    assert run("memories", "list", "--db", db, "--user", "Alice").output.strip() == "no memories"
    result = run("memories", "get", "--db", db, "--user", "mallory", secret, ok=False)
    assert result.exit_code == 1 and "not found" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["memories", "add", "--user", "alice", "   "],
            "InvalidMemoryError: text: must not be empty",
        ),
        (["memories", "add", "--user", "", "x"], "InvalidUserKeyError: user_id: must not be empty"),
        (
            ["memories", "add", "--user", "a", "--event-time", "soon", "x"],
            "InvalidTimeError: event_time",
        ),
        (["memories", "update", "--user", "a", "nope", "x"], "MemoryNotFoundError"),
    ],
)
def test_errors_are_one_line_and_exit_non_zero(run, args, message):
    result = run(*args, ok=False)
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output


def test_default_database_lives_in_langmem_trpc_home(run, tmp_path):
    run("memories", "add", "--user", "carol", "Lives in Oslo")
    assert (tmp_path / "home" / "memories.db").exists()


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("postgresql://u@localhost/db", True),
        ("postgres://localhost", True),
        ("host=/tmp dbname=memories", True),
        ("dbname=memories", True),
        ("password=secret host=db", True),
        ("sslmode=require host=db", True),
        ("memories.db", False),
        ("/data/host=1/memories.db", False),
    ],
)
def test_postgres_targets_are_recognised(target, expected):
    from langmem_trpc.cli._common import is_postgres_dsn

    assert is_postgres_dsn(target) is expected
