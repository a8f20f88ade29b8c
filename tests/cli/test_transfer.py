from __future__ import annotations

import json

from click.testing import CliRunner

from langmem_trpc import Kind, SQLiteMemoryService, UserKey
from langmem_trpc.cli import cli

ALICE = UserKey("support", "alice")


def test_export_import_is_lossless(tmp_path):
    source, target, dump = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "out.jsonl"
    with SQLiteMemoryService(source) as svc:
        plain = svc.add(ALICE, "Production runs Go 1.23", topics=["go"])
        svc.update(ALICE, plain.id, "Production runs Go 1.24")
        svc.add(
            ALICE,
            "Hiked Mont Blanc",
            kind=Kind.EPISODE,
            event_time="2024-07-14T09:00:00Z",
            participants=["Bob"],
            location="Chamonix",
            metadata={"source": "chat"},
        )
        gone = svc.add(ALICE, "to be deleted")
        svc.delete(ALICE, gone.id)
        svc.add(UserKey("support", "bob"), "bob's memory")
        before = svc.read(ALICE)
        before_history = {e.id: svc.history(ALICE, e.id) for e in before}

    runner = CliRunner()
    result = runner.invoke(
        cli, ["export", "--db", str(source), "--app", "support", "--user", "alice", "-o", str(dump)]
    )
    assert result.exit_code == 0, result.output
    assert len(dump.read_text().splitlines()) == 2
    result = runner.invoke(cli, ["import", "--db", str(target), str(dump)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "imported 2 memories"

    with SQLiteMemoryService(target) as svc:
        after = svc.read(ALICE)
        assert after == before
        assert {e.id: svc.history(ALICE, e.id) for e in after} == before_history
        assert svc.read(UserKey("support", "bob")) == []
        # the imported memories behave like native ones: idempotent add finds them
        assert svc.add(ALICE, "production runs go 1.24").id == plain.id


def test_export_every_user_of_an_app(tmp_path):
    db, dump = tmp_path / "a.db", tmp_path / "all.jsonl"
    with SQLiteMemoryService(db) as svc:
        svc.add(ALICE, "a")
        svc.add(UserKey("support", "bob"), "b")
        svc.add(UserKey("other", "carol"), "c")
    result = CliRunner().invoke(
        cli, ["export", "--db", str(db), "--app", "support", "-o", str(dump)]
    )
    assert result.exit_code == 0, result.output
    users = sorted(json.loads(line)["entry"]["user_id"] for line in dump.read_text().splitlines())
    assert users == ["alice", "bob"]


def test_import_rejects_garbage_with_the_line_number(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "an export"}\n')
    result = CliRunner().invoke(cli, ["import", "--db", str(tmp_path / "x.db"), str(bad)])
    assert result.exit_code == 1
    assert "line 1" in result.output
