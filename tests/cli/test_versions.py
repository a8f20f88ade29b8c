"""Versions on the command line: current by default, the past on request, restore."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner

from langmem_trpc import UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.cli import cli

ALICE = UserKey("support", "alice")
JULY = datetime(2026, 7, 1, tzinfo=timezone.utc)
UPGRADE = datetime(2026, 7, 20, tzinfo=timezone.utc)


@pytest.fixture
def chain(tmp_path):
    """A SQLite file where alice's "Go 1.23" was superseded by "Go 1.24" on July 20."""
    db = str(tmp_path / "m.db")
    with SQLiteMemoryService(db) as svc:
        old = svc.add(ALICE, "Production runs Go 1.23", valid_from=JULY)
        new = svc.update(
            ALICE, old.id, "Production runs Go 1.24", supersede=True, valid_from=UPGRADE
        )
    return db, old.id, new.id


def run(*args: str, code: int = 0):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def _base(db: str) -> list[str]:
    return ["--db", db, "--app", "support", "--user", "alice"]


def test_list_shows_current_memories_and_the_past_on_request(chain):
    db, old, new = chain
    current = json.loads(run("memories", "list", *_base(db), "--json"))
    assert [e["id"] for e in current] == [new]
    every = json.loads(run("memories", "list", *_base(db), "--include-superseded", "--json"))
    assert {e["id"] for e in every} == {old, new}
    assert next(e for e in every if e["id"] == old)["superseded_by"] == new
    then = json.loads(run("memories", "list", *_base(db), "--as-of", "2026-07-10", "--json"))
    assert [e["id"] for e in then] == [old]
    table = run("memories", "list", *_base(db), "--include-superseded")
    assert "VALID" in table.splitlines()[0]
    assert f"2026-07-01 -> 2026-07-20 (by {new[:12]})" in table
    assert "VALID" not in run("memories", "list", *_base(db)).splitlines()[0]


def test_list_rejects_as_of_with_include_superseded_naming_the_field(chain):
    db, _, _ = chain
    args = ["--as-of", "2026-07-10", "--include-superseded"]
    out = run("memories", "list", *_base(db), *args, code=1)
    assert "include_superseded" in out and len(out.strip().splitlines()) == 1
    assert "as_of" in run("memories", "list", *_base(db), "--as-of", "soon", code=1)


def test_search_finds_current_versions_unless_asked_for_the_past(chain):
    db, old, new = chain
    hits = json.loads(run("memories", "search", *_base(db), "--json", "production go"))
    assert [e["id"] for e in hits] == [new]
    args = ["--as-of", "2026-07-10", "--json", "production go"]
    assert [e["id"] for e in json.loads(run("memories", "search", *_base(db), *args))] == [old]


def test_get_shows_validity_and_what_superseded_it(chain):
    db, old, new = chain
    shown = run("memories", "get", *_base(db), old)
    assert "valid from:    2026-07-01T00:00:00+00:00" in shown
    assert "valid to:      2026-07-20T00:00:00+00:00" in shown
    assert f"superseded by: {new}" in shown
    assert "status:" in shown and "superseded" in shown.split("status:")[1]
    current = run("memories", "get", *_base(db), new)
    assert "superseded by" not in current and "status:" not in current


def test_versions_lists_the_chain_oldest_first_from_any_id(chain):
    db, old, new = chain
    for given in (old, new, new[:8]):
        listed = json.loads(run("memories", "versions", *_base(db), "--json", given))
        assert [e["id"] for e in listed] == [old, new]
    table = run("memories", "versions", *_base(db), old).splitlines()
    assert table[0].split() == ["ID", "VALID", "TEXT"]
    assert old[:12] in table[1] and not table[1].startswith("*")
    assert table[2].startswith("*") and new[:12] in table[2] and "since 2026-07-20" in table[2]
    assert "not found" in run("memories", "versions", *_base(db), "f" * 32, code=1)


def test_restore_version_reopens_the_old_one_and_closes_the_newer(chain):
    db, old, new = chain
    restored = json.loads(run("memories", "restore-version", *_base(db), "--json", old))
    assert restored["id"] == old and "superseded_by" not in restored  # JSON leaves out None
    assert [e["id"] for e in json.loads(run("memories", "list", *_base(db), "--json"))] == [old]
    listed = json.loads(run("memories", "versions", *_base(db), "--json", old))
    closed = next(e for e in listed if e["id"] == new)
    assert closed["superseded_by"] == old
    history = run("memories", "history", *_base(db), new)
    assert "supersede" in history and "'Production runs Go 1.24' =>" in history
    assert "restore" in run("memories", "history", *_base(db), old)
    again = json.loads(run("memories", "restore-version", *_base(db), "--json", old))
    assert again["id"] == old  # already current: shown unchanged


def test_update_supersede_and_valid_until_from_the_command_line(tmp_path):
    base = _base(str(tmp_path / "m.db"))
    args = ["--valid-from", "2026-07-01", "--json", "Production runs Go 1.23"]
    first = json.loads(run("memories", "add", *base, *args))
    assert first["valid_from"].startswith("2026-07-01")
    args = ["--supersede", "--valid-from", "2026-07-20", "--json", first["id"], "Runs Go 1.24"]
    second = json.loads(run("memories", "update", *base, *args))
    assert second["id"] != first["id"]
    chain = json.loads(run("memories", "versions", *base, "--json", first["id"]))
    assert [e["id"] for e in chain] == [first["id"], second["id"]]
    args = ["--valid-until", "2026-01-01", "--json", second["id"]]
    out = run("memories", "update", *base, *args, code=1)
    assert "valid_until" in out
    lapsing = json.loads(
        run("memories", "update", *base, "--valid-until", "2099-01-01", "--json", second["id"])
    )
    assert lapsing["valid_to"].startswith("2099-01-02")  # a bare date: through its end
