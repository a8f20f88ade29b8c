from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner

from langmem_trpc import Kind, SQLiteMemoryService, UserKey
from langmem_trpc.cli import cli
from langmem_trpc.types import Source

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
        imported = {e.id: svc.history(ALICE, e.id) for e in after}
        assert imported == {
            memory_id: [_by_import(event) for event in events]
            for memory_id, events in before_history.items()
        }
        assert svc.read(UserKey("support", "bob")) == []
        # the imported memories behave like native ones: idempotent add finds them
        assert svc.add(ALICE, "production runs go 1.24").id == plain.id


def _by_import(event):
    """`event` as an import records it: the actor is the import, the rest is kept."""
    source = event.source.model_dump() if event.source else {}
    return event.model_copy(update={"source": Source(**{**source, "actor": "import"})})


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


def _exported(tmp_path, texts=("first memory", "second memory")):
    """A real export of `texts` for alice, as a list of parsed records."""
    db, dump = tmp_path / "src.db", tmp_path / "src.jsonl"
    with SQLiteMemoryService(db) as svc:
        for text in texts:
            svc.add(ALICE, text)
    result = CliRunner().invoke(
        cli, ["export", "--db", str(db), "--app", "support", "-o", str(dump)]
    )
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in dump.read_text().splitlines()]


def _import(tmp_path, records, name="in.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    target = tmp_path / "target.db"
    return CliRunner().invoke(cli, ["import", "--db", str(target), str(path)]), target


def _set(record, path, value):
    *parents, last = path
    node = record
    for key in parents:
        node = node[key]
    node[last] = value
    return record


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("entry", "memory", "text"), "   ", "line 2: text: must not be empty"),
        (("entry", "memory", "text"), "x" * 200_000, "line 2: text: is 200000 characters"),
        (("entry", "memory", "topics"), [f"t{i}" for i in range(10_000)], "line 2: topics: has"),
        (("entry", "created_at"), "2024-01-01T00:00:00", "line 2: created_at: must be timezone"),
        (("entry", "memory", "event_time"), "2024-01-01T10:00:00", None),
        (("entry", "id"), "a\x00b", "line 2: memory_id: must be at most 512"),
        (("entry", "user_id"), "", "line 2: user_id: must not be empty"),
        (("entry", "valid_from"), "2024-01-01T00:00:00", "line 2: valid_from: must be timezone"),
        (("entry", "valid_to"), "1999-01-01T00:00:00Z", "line 2: valid_to: is before valid_from"),
        (("entry", "superseded_by"), "", "line 2: superseded_by: must be a non-empty"),
        (("entry", "superseded_by"), 7, "line 2: entry.superseded_by: Input should be"),
        (
            ("history",),
            [
                {
                    "memory_id": "x",
                    "operation": "add",
                    "text_before": None,
                    "text_after": "t",
                    "at": "2024-01-01T00:00:00",
                }
            ],
            "line 2: at: must be",
        ),
    ],
)
def test_import_validates_every_record_like_add_and_writes_nothing(tmp_path, path, value, expected):
    records = _exported(tmp_path)
    _set(records[1], path, value)
    result, target = _import(tmp_path, records)
    if expected is None:  # zone-less dates are read as UTC by add() too: accepted
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 1, result.output
    assert expected in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    with SQLiteMemoryService(target) as svc:  # all or nothing: line 1 was not imported
        assert svc.read(ALICE) == []


def test_import_respects_the_capacity_counting_what_is_already_stored(tmp_path):
    from langmem_trpc.cli._common import CLI_LIMITS

    capacity = CLI_LIMITS.capacity
    assert capacity is not None
    records = _exported(tmp_path, texts=["one", "two"])
    target = tmp_path / "target.db"
    with SQLiteMemoryService(target) as svc:
        svc.add_many(ALICE, [f"memory {i}" for i in range(capacity - 1)])
    result, _ = _import(tmp_path, records)
    assert result.exit_code == 1
    assert f"line 2: capacity: support/alice would hold {capacity + 1} memories" in result.output
    with SQLiteMemoryService(target) as svc:
        assert svc.count(ALICE) == capacity - 1
    # re-importing ids the user already holds replaces them: no extra room needed
    result, _ = _import(tmp_path, records[:1])
    assert result.exit_code == 0, result.output
    result, _ = _import(tmp_path, records[:1])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "imported 1 memory"


def test_import_reports_undecodable_lines_without_a_traceback(tmp_path):
    records = _exported(tmp_path)
    path = tmp_path / "bad.jsonl"
    path.write_bytes((json.dumps(records[0]) + "\n").encode() + b"\xff\xfe{}\n")
    result = CliRunner().invoke(cli, ["import", "--db", str(tmp_path / "t.db"), str(path)])
    assert result.exit_code == 1
    assert "line 2: record: is not valid UTF-8" in result.output
    assert "Traceback" not in result.output


def test_export_to_stdout_and_import_from_stdin(tmp_path):
    db = tmp_path / "a.db"
    with SQLiteMemoryService(db) as svc:
        svc.add(ALICE, "one")
        svc.add(ALICE, "two")
    exported = CliRunner().invoke(
        cli, ["export", "--db", str(db), "--app", "support", "-o", "-"], catch_exceptions=False
    )
    assert exported.exit_code == 0, exported.output
    assert [
        json.loads(line)["entry"]["memory"]["text"] for line in exported.stdout.splitlines()
    ] == [
        "one",
        "two",
    ]
    assert exported.stderr.strip() == "exported 2 memories to standard output"
    target = tmp_path / "b.db"
    imported = CliRunner().invoke(cli, ["import", "--db", str(target), "-"], input=exported.stdout)
    assert imported.exit_code == 0, imported.output
    assert imported.stdout.strip() == "imported 2 memories"
    with SQLiteMemoryService(target) as svc:
        assert [e.text for e in svc.read(ALICE)] == ["two", "one"]


@pytest.mark.postgres
def test_import_on_postgres_checks_the_same_way_and_writes_nothing(tmp_path, pg_url):
    from langmem_trpc import PostgresMemoryService

    records = _exported(tmp_path)
    records[1]["entry"]["memory"]["text"] = " "
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = CliRunner().invoke(cli, ["import", "--db", pg_url, str(path)])
    assert result.exit_code == 1
    assert result.output.strip() == "Error: InvalidMemoryError: line 2: text: must not be empty"
    svc = PostgresMemoryService(pg_url)
    try:
        assert svc.read(ALICE) == []
    finally:
        svc.close()


# -- an import is limited to one user and cannot forge its history (issue 31 item 9) --

BOB = UserKey("support", "bob")


def _alice_and_forged_bob(tmp_path):
    """A real export of alice's one memory, plus a forged line for bob that reuses its id
    and claims a "worker" wrote it."""
    (record,) = _exported(tmp_path, texts=("alice's secret",))
    forged = json.loads(json.dumps(record))
    forged["entry"]["user_id"] = "bob"
    forged["entry"]["memory"]["text"] = "forged"
    forged["history"][0]["text_after"] = "forged"
    forged["history"][0]["source"] = {"actor": "worker", "thread_id": "t-9", "message_ids": []}
    return record, forged


def _import_into(db, records, tmp_path, *options):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return CliRunner().invoke(cli, ["import", "--db", db, *options, str(path)])


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (["--app", "support", "--user", "alice"], "user_id: is 'bob', not --user 'alice'"),
        (["--app", "sales"], "app_name: is 'support', not --app 'sales'"),
    ],
)
def test_import_with_app_and_user_refuses_every_other_users_record(tmp_path, options, problem):
    record, forged = _alice_and_forged_bob(tmp_path)
    db = str(tmp_path / "target.db")
    result = _import_into(db, [record, forged], tmp_path, *options)
    assert result.exit_code == 1
    line = 2 if "--user" in options else 1
    assert result.output.strip() == (
        f"Error: InvalidInputError: line {line}: {problem}; nothing was imported"
    )
    with SQLiteMemoryService(db) as svc:
        assert svc.read(ALICE) == [] and svc.read(BOB) == []
    result = _import_into(db, [record], tmp_path, "--app", "support", "--user", "alice")
    assert result.exit_code == 0 and result.output.strip() == "imported 1 memory"


def test_import_user_filter_needs_an_app_and_valid_names(tmp_path):
    record, _ = _alice_and_forged_bob(tmp_path)
    db = str(tmp_path / "target.db")
    result = _import_into(db, [record], tmp_path, "--user", "alice")
    assert result.exit_code == 2 and "--user needs --app" in result.output
    result = _import_into(db, [record], tmp_path, "--app", "support", "--user", " ")
    assert result.exit_code == 1
    assert result.output.strip() == "Error: InvalidUserKeyError: user_id: must not be empty"


def test_import_records_itself_as_the_actor(tmp_path):
    _, forged = _alice_and_forged_bob(tmp_path)
    db = str(tmp_path / "target.db")
    assert _import_into(db, [forged], tmp_path).exit_code == 0
    with SQLiteMemoryService(db) as svc:
        (entry,) = svc.read(BOB)
        (event,) = svc.history(BOB, entry.id)
    assert event.source == Source(actor="import", thread_id="t-9")
    shown = CliRunner().invoke(
        cli, ["memories", "history", "--db", db, "--app", "support", "--user", "bob", entry.id]
    )
    assert "[import thread t-9]" in shown.output and "worker" not in shown.output


def _assert_another_users_id_is_never_replaced(db):
    """After importing bob's forged record with alice's id: alice's memory and history
    are untouched, bob holds his own memory under that id."""
    import langmem_trpc

    with langmem_trpc.open(db, create=False) as svc:
        (alice,) = svc.read(ALICE)
        (bob,) = svc.read(BOB)
        assert alice.id == bob.id
        assert (alice.text, bob.text) == ("alice's secret", "forged")
        assert [e.text_after for e in svc.history(ALICE, alice.id)] == ["alice's secret"]
        assert svc.history(ALICE, alice.id)[0].source == Source(actor="import")


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_an_import_never_replaces_another_users_memory_by_id(tmp_path, request, backend):
    db = str(tmp_path / "target.db") if backend == "sqlite" else request.getfixturevalue("pg_url")
    record, forged = _alice_and_forged_bob(tmp_path)
    assert _import_into(db, [record], tmp_path).exit_code == 0
    result = _import_into(db, [forged], tmp_path)  # no filters: bob's own memory, same id
    assert result.exit_code == 0, result.output
    _assert_another_users_id_is_never_replaced(db)


@pytest.mark.parametrize(
    "url", ["memory://", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_restore_under_another_user_never_touches_the_ids_owner(tmp_path, request, url):
    """What `import` calls, on every backend: ids are scoped to their user."""
    import langmem_trpc

    if url == "sqlite":
        url = str(tmp_path / "m.db")
    elif url == "postgres":
        url = request.getfixturevalue("pg_url")
    with langmem_trpc.open(url) as svc:
        mine = svc.add(ALICE, "alice's secret")
        forged = mine.model_copy(
            update={"user_id": "bob", "memory": mine.memory.model_copy(update={"text": "forged"})}
        )
        svc.restore(BOB, forged, [])
        assert [(e.id, e.text) for e in svc.read(ALICE)] == [(mine.id, "alice's secret")]
        assert [(e.id, e.text) for e in svc.read(BOB)] == [(mine.id, "forged")]
        svc.purge(BOB, mine.id)
        assert svc.get(ALICE, mine.id) is not None


def test_a_record_without_history_gets_an_add_by_the_import(tmp_path):
    (record,) = _exported(tmp_path, texts=("no trace",))
    db = str(tmp_path / "target.db")
    assert _import_into(db, [record], tmp_path).exit_code == 0
    record["history"] = []  # replaces the memory it just imported, without a trace of its own
    record["entry"]["memory"]["text"] = "replaced"
    assert _import_into(db, [record], tmp_path).exit_code == 0
    with SQLiteMemoryService(db) as svc:
        (event,) = svc.history(ALICE, record["entry"]["id"])
    assert (event.operation.value, event.text_after) == ("add", "replaced")
    assert event.source == Source(actor="import")


def test_a_round_trip_keeps_a_version_chain_and_its_validity(tmp_path):
    source, target, dump = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "out.jsonl"
    july, upgrade = "2026-07-01T00:00:00Z", "2026-07-20T00:00:00Z"
    with SQLiteMemoryService(source) as svc:
        old = svc.add(ALICE, "Production runs Go 1.23", valid_from=july)
        new = svc.update(
            ALICE, old.id, "Production runs Go 1.24", supersede=True, valid_from=upgrade
        )
        trip = svc.add(
            ALICE, "In Tokyo this week", valid_from="2026-07-02", valid_until="2026-07-05"
        )
        chain = svc.versions(ALICE, new.id)
        every = svc.read(ALICE, include_superseded=True)
    assert [e.id for e in chain] == [old.id, new.id]
    runner = CliRunner()
    result = runner.invoke(
        cli, ["export", "--db", str(source), "--app", "support", "-o", str(dump)]
    )
    assert result.exit_code == 0, result.output
    assert len(dump.read_text().splitlines()) == 3  # the closed and the lapsed ones too
    result = runner.invoke(cli, ["import", "--db", str(target), str(dump)])
    assert result.exit_code == 0, result.output

    with SQLiteMemoryService(target) as svc:
        assert svc.versions(ALICE, old.id) == chain
        assert sorted(svc.read(ALICE, include_superseded=True), key=lambda e: e.id) == sorted(
            every, key=lambda e: e.id
        )
        assert [e.id for e in svc.read(ALICE)] == [new.id]  # the trip lapsed
        assert {e.id for e in svc.read(ALICE, as_of="2026-07-03")} == {trip.id, old.id}


def test_an_older_export_without_validity_imports_as_current(tmp_path):
    """A file written before validity existed: no valid_from/valid_to/superseded_by;
    its zone-less event time (read as UTC, as add() reads it) becomes valid_from."""
    records = _exported(tmp_path)
    for record in records:
        for field in ("valid_from", "valid_to", "superseded_by"):
            record["entry"].pop(field, None)
    records[1]["entry"]["memory"]["event_time"] = "2024-01-01T10:00:00"
    result, target = _import(tmp_path, records)
    assert result.exit_code == 0, result.output
    with SQLiteMemoryService(target) as svc:
        entries = {e.text: e for e in svc.read(ALICE)}
    assert len(entries) == 2
    dated = entries["second memory"]
    assert dated.valid_from == datetime(2024, 1, 1, 10, tzinfo=timezone.utc)
    undated = entries["first memory"]
    assert undated.valid_from == undated.created_at
    assert all(e.valid_to is None and e.superseded_by is None for e in entries.values())
