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
    assert run("memories", "clear", *base, "--yes").output.strip() == "cleared 1 memory"
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
        (["memories", "update", "--user", "a", "nope-nope", "x"], "MemoryNotFoundError"),
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


# -- human output is escaped; machine output is exact (#13.11) -----------------

FORGERY = "harmless\n0123456789ab  fact  2024-01-01 00:00  forged\x1b[2J\x1b]0;pwned\x07\u202eevil"


def _service(db):
    from langmem_trpc import SQLiteMemoryService

    return SQLiteMemoryService(db)


def test_human_output_escapes_stored_text_and_json_stays_exact(run, tmp_path):
    from langmem_trpc import UserKey

    db = str(tmp_path / "m.db")
    alice = UserKey("default", "alice")
    with _service(db) as svc:
        forged = svc.add(alice, FORGERY, topics=["x\x1by"])
        svc.update(alice, forged.id, FORGERY + " v2")
    base = ["--db", db, "--user", "alice"]
    outputs = {
        "list": run("memories", "list", *base).output,
        "search": run("memories", "search", *base, "harmless forged").output,
        "get": run("memories", "get", *base, forged.id).output,
        "history": run("memories", "history", *base, forged.id).output,
        "update": run("memories", "update", *base, forged.id, "--topic", "t").output,
    }
    for name, output in outputs.items():
        assert "\x1b" not in output and "\u202e" not in output and "\x07" not in output, name
        assert "\\x1b" in output, name
    assert len(outputs["list"].splitlines()) == 2  # header + one row: nothing forged
    assert len(outputs["history"].splitlines()) == 2  # add, update
    exact = json.loads(run("memories", "list", *base, "--json").output)
    assert exact[0]["memory"]["text"] == FORGERY + " v2"
    jsonl = run("memories", "list", *base, "--format", "jsonl").output
    assert json.loads(jsonl)["memory"]["text"] == FORGERY + " v2"


# -- output formats (#18 section 4) ---------------------------------------------


def test_table_has_a_header_fits_the_terminal_and_rounds_scores(run, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "70")
    base = ["--db", str(tmp_path / "m.db"), "--user", "alice"]
    run("memories", "add", *base, "Production runs Go 1.23 " + "and much more " * 20)
    table = run("memories", "list", *base).output.splitlines()
    assert table[0].split() == ["ID", "KIND", "UPDATED", "TEXT"]
    assert all(len(line) <= 70 for line in table) and table[1].endswith("…")
    hits = run("memories", "search", *base, "production go").output.splitlines()
    assert hits[0].split() == ["ID", "KIND", "UPDATED", "SCORE", "TEXT"]
    score = hits[1].split()[4]
    assert len(score) == 4 and 0 <= float(score) <= 1  # rounded to 2 places


def test_list_shows_50_by_default_and_says_how_many_more(run, tmp_path):
    from langmem_trpc import UserKey

    db = str(tmp_path / "m.db")
    with _service(db) as svc:
        svc.add_many(UserKey("default", "alice"), [f"memory number {i}" for i in range(60)])
    result = run("memories", "list", "--db", db, "--user", "alice")
    assert len(result.stdout.splitlines()) == 51
    assert "showing 50 of 60 memories" in result.stderr
    assert (
        len(
            run(
                "memories", "list", "--db", db, "--user", "alice", "--limit", "0"
            ).stdout.splitlines()
        )
        == 61
    )


def test_csv_and_jsonl_are_exact(run, tmp_path):
    import csv
    import io

    base = ["--db", str(tmp_path / "m.db"), "--user", "alice"]
    run("memories", "add", *base, "--topics", "go,prod", 'comma, "quote"\nnewline')
    rows = list(
        csv.DictReader(io.StringIO(run("memories", "list", *base, "--format", "csv").output))
    )
    assert rows[0]["text"] == 'comma, "quote"\nnewline' and rows[0]["topics"] == "go;prod"


def test_counts_are_pluralised(run, tmp_path):
    base = ["--db", str(tmp_path / "m.db"), "--user", "bob"]
    run("memories", "add", *base, "one")
    assert run("memories", "clear", *base, "--yes").output.strip() == "cleared 1 memory"
    assert run("memories", "purge", *base, "--yes").output.strip() == "purged 1 memory"
    assert run("memories", "clear", *base, "--yes").output.strip() == "cleared 0 memories"


# -- stdin, ids, users, updates --------------------------------------------------


def test_add_reads_stdin_when_text_is_dash(tmp_path):
    db = str(tmp_path / "m.db")
    result = CliRunner().invoke(
        cli, ["memories", "add", "--db", db, "--user", "a", "--json", "-"], input="from stdin\n"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["memory"]["text"] == "from stdin"


def test_an_id_prefix_of_8_characters_works_and_an_ambiguous_one_errors(run, tmp_path):
    from langmem_trpc import UserKey

    db = str(tmp_path / "m.db")
    alice = UserKey("default", "alice")
    with _service(db) as svc:
        one = svc.add(alice, "first", memory_id="abcdef0011112222")
        svc.add(alice, "second", memory_id="abcdef0099998888")
    base = ["--db", db, "--user", "alice"]
    assert "first" in run("memories", "get", *base, "abcdef001").output
    assert (
        json.loads(run("memories", "history", *base, "abcdef00111", "--json").output)[0][
            "memory_id"
        ]
        == one.id
    )
    run("memories", "update", *base, "abcdef001", "first, edited")
    ambiguous = run("memories", "get", *base, "abcdef00", ok=False)
    assert ambiguous.exit_code == 1 and "is the start of 2 memories' ids" in ambiguous.output
    short = run("memories", "get", *base, "abcdef0", ok=False)  # 7 characters: no prefix match
    assert short.exit_code == 1 and "an id prefix needs at least 8 characters" in short.output
    assert run("memories", "delete", *base, "abcdef001").output.strip() == f"deleted {one.id}"


def test_users_and_apps_list_who_has_memories(run, tmp_path):
    db = str(tmp_path / "m.db")
    run("memories", "add", "--db", db, "--app", "shop", "--user", "alice", "a")
    run("memories", "add", "--db", db, "--app", "shop", "--user", "alice", "b")
    run("memories", "add", "--db", db, "--app", "shop", "--user", "bob", "c")
    run("memories", "add", "--db", db, "--app", "chat", "--user", "carol", "d")
    users = json.loads(run("memories", "users", "--db", db, "--app", "shop", "--json").output)
    assert users == [
        {"app_name": "shop", "user_id": "alice", "memories": 2},
        {"app_name": "shop", "user_id": "bob", "memories": 1},
    ]
    apps = run("memories", "apps", "--db", db).output.splitlines()
    assert apps[0].split() == ["APP", "USERS", "MEMORIES"]
    assert [line.split() for line in apps[1:]] == [["chat", "1", "1"], ["shop", "2", "3"]]


def test_update_topics_without_retyping_the_text(run, tmp_path):
    base = ["--db", str(tmp_path / "m.db"), "--user", "alice"]
    added = json.loads(run("memories", "add", *base, "--json", "Prefers dark mode").output)
    updated = json.loads(
        run("memories", "update", *base, added["id"], "--topics", "ui,theme", "--json").output
    )
    assert updated["memory"] == {**added["memory"], "topics": ["ui", "theme"]}
    nothing = run("memories", "update", *base, added["id"], ok=False)
    assert nothing.exit_code == 2 and "give a new TEXT or at least one field" in nothing.output


# -- errors: one line, non-zero, no traceback ------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["memories", "search", "--user", "a", "--after", "yesterday", "q"],
            "InvalidTimeError: after",
        ),
        (["export", "--app", "x", "-o", "/missing/dir/x.jsonl"], "No such file or directory"),
    ],
)
def test_bad_arguments_are_one_line_errors(run, tmp_path, args, message):
    run("memories", "add", "--user", "a", "--app", "x", "seed")  # the default database exists
    result = run(*args, ok=False)
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "command",
    [
        ["get"],
        ["update", "--topic", "t"],
        ["update"],
        ["delete"],
        ["history"],
        ["purge", "--yes"],
    ],
)
def test_an_unknown_id_is_exit_1_with_the_same_message_everywhere(run, tmp_path, command):
    db = str(tmp_path / "m.db")
    run("memories", "add", "--db", db, "--user", "alice", "exists")
    name, *options = command
    args = ["memories", name, "--db", db, "--user", "alice", *options, "0badc0ffee0badc0ffee"]
    if command == ["update"]:
        args.append("new text")
    result = run(*args, ok=False)
    assert result.exit_code == 1, result.output
    assert (
        result.output.strip()
        == "Error: MemoryNotFoundError: memory '0badc0ffee0badc0ffee' not found"
    )


# -- reads create nothing ----------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["memories", "list", "--user", "a"],
        ["memories", "search", "--user", "a", "q"],
        ["memories", "get", "--user", "a", "abcdefgh"],
        ["memories", "users"],
        ["export", "-o", "-"],
    ],
)
def test_a_read_on_a_mistyped_path_creates_nothing(run, tmp_path, command):
    missing = tmp_path / "typo" / "memories.db"
    result = run(*command, "--db", str(missing), ok=False)
    assert result.exit_code == 1
    assert f"no memory database at {missing}" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not missing.parent.exists()


def test_a_read_on_someone_elses_sqlite_file_leaves_it_unchanged(run, tmp_path):
    import sqlite3

    theirs = tmp_path / "theirs.db"
    conn = sqlite3.connect(theirs)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()
    before = theirs.read_bytes()
    for command in (["list", "--user", "a"], ["search", "--user", "a", "q"]):
        result = run("memories", *command, "--db", str(theirs), ok=False)
        assert result.exit_code == 1
        assert "is not a langmem-trpc database" in result.output
        assert "opened read-only and left unchanged" in result.output
    assert theirs.read_bytes() == before
    conn = sqlite3.connect(theirs)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["notes"]
    conn.close()
    assert [p.name for p in tmp_path.iterdir()] == ["theirs.db"]  # no -wal, no -shm


@pytest.mark.postgres
def test_a_read_on_postgres_creates_no_schema(run, pg_url):
    import psycopg

    def tables() -> list[str]:
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE 'langmem%'"
            ).fetchall()
        return [r[0] for r in rows]

    result = run("memories", "list", "--db", pg_url, "--user", "alice", ok=False)
    assert result.exit_code == 1 and "tables are missing" in result.output
    assert "Traceback" not in result.output
    assert tables() == []
    run("memories", "add", "--db", pg_url, "--user", "alice", "now it exists")
    assert tables()
    assert "now it exists" in run("memories", "list", "--db", pg_url, "--user", "alice").output


def test_an_unexpected_failure_is_one_line_too(run, tmp_path, monkeypatch):
    from langmem_trpc.backends.sqlite import SQLiteMemoryService

    def broken(self, *args, **kwargs):
        raise RuntimeError("disk on fire\nsecond line")

    db = str(tmp_path / "m.db")
    run("memories", "add", "--db", db, "--user", "a", "x")
    monkeypatch.setattr(SQLiteMemoryService, "read", broken)
    result = run("memories", "list", "--db", db, "--user", "a", ok=False)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip() == (
        "Error: unexpected RuntimeError: disk on fire second line (-vv shows the traceback)"
    )


def test_error_messages_escape_what_they_quote(run, tmp_path):
    hostile = tmp_path / "\x1b[31mred\u202e" / "m.db"
    result = run("memories", "list", "--db", str(hostile), "--user", "a", ok=False)
    assert result.exit_code == 1
    assert "\x1b" not in result.output and "\u202e" not in result.output
    assert "\\x1b[31mred\\u202e" in result.output


def test_history_shows_the_reconcile_decision(run, tmp_path):
    from langmem_trpc import SQLiteMemoryService, UserKey
    from langmem_trpc.extraction import Action, MemoryOp
    from langmem_trpc.extraction.execute import execute_ops
    from langmem_trpc.types import Source

    db = str(tmp_path / "m.db")
    user = UserKey("support", "alice")
    actions = {Action.ADD, Action.UPDATE}
    with SQLiteMemoryService(db) as svc:
        source = Source(thread_id="t1", actor="worker")
        ((outcome,), _) = execute_ops(
            svc, user, [MemoryOp.add("Production runs Go 1.23")], actions=actions, source=source
        )
        decided = MemoryOp.update(outcome.memory_id, "Production runs Go 1.24").with_decision(
            "update tier=update score=0.72 jaccard=0.67"
        )
        execute_ops(svc, user, [decided], actions=actions, source=source)
    base = ["--db", db, "--app", "support", "--user", "alice"]
    lines = run("memories", "history", *base, outcome.memory_id).output.splitlines()
    assert lines[0].endswith("[worker thread t1 decision add]")
    assert lines[1].endswith(
        "[worker thread t1 decision update tier=update score=0.72 jaccard=0.67]"
    )
    events = json.loads(run("memories", "history", *base, "--json", outcome.memory_id).output)
    assert events[1]["source"]["decision"] == "update tier=update score=0.72 jaccard=0.67"


# -- first-hour frictions (issue 30) ------------------------------------------------


@pytest.mark.parametrize(
    ("command", "nothing"),
    [(["clear"], "nothing deleted"), (["purge"], "nothing purged")],
)
def test_clear_and_purge_without_yes_and_without_an_answer_delete_nothing(
    run, tmp_path, command, nothing
):
    base = ["--db", str(tmp_path / "m.db"), "--user", "alice"]
    run("memories", "add", *base, "keep me")
    result = run("memories", *command, *base, ok=False)  # CliRunner: empty stdin, no terminal
    assert result.exit_code == 1
    assert f"Error: {nothing}; pass --yes to skip the question" in result.output
    assert "unexpected" not in result.output and "Abort" not in result.output
    refused = CliRunner().invoke(cli, ["memories", *command, *base], input="n\n")
    assert refused.exit_code == 1 and nothing in refused.output
    assert "keep me" in run("memories", "list", *base).output
    agreed = CliRunner().invoke(cli, ["memories", *command, *base], input="y\n")
    assert agreed.exit_code == 0, agreed.output


def test_a_too_short_id_prefix_says_how_long_a_prefix_must_be(run, tmp_path):
    base = ["--db", str(tmp_path / "m.db"), "--user", "alice"]
    added = json.loads(run("memories", "add", *base, "--json", "Prefers dark mode").output)
    for command in (["get"], ["history"], ["delete"], ["update", "--topic", "t"]):
        result = run("memories", *command, *base, added["id"][:2], ok=False)
        assert result.exit_code == 1
        assert result.output.strip() == (
            f"Error: InvalidInputError: memory_id: no memory has the id {added['id'][:2]!r}, "
            "and an id prefix needs at least 8 characters"
        )
    assert "Prefers dark mode" in run("memories", "get", *base, added["id"][:8]).output


def test_history_of_a_topics_only_update_says_the_text_is_unchanged(run, tmp_path):
    base = ["--db", str(tmp_path / "m.db"), "--user", "alice"]
    added = json.loads(run("memories", "add", *base, "--json", "Prefers dark mode").output)
    run("memories", "update", *base, added["id"], "--topics", "ui")
    run("memories", "update", *base, added["id"], "Prefers light mode")
    lines = run("memories", "history", *base, added["id"]).output.strip().splitlines()
    assert len(lines) == 3
    assert "'Prefers dark mode' -> 'Prefers dark mode'" not in lines[1]
    assert "update 'Prefers dark mode' (text unchanged; history records only the text)" in lines[1]
    assert "'Prefers dark mode' -> 'Prefers light mode'" in lines[2]


@pytest.mark.parametrize(
    "command",
    [
        ["memories", "add", "--user", "a", "x"],
        ["memories", "clear", "--user", "a", "--yes"],
        ["import", "-"],
    ],
)
@pytest.mark.parametrize("form", ["{}", "sqlite://{}", "lancedb://{}"])
def test_a_write_on_a_mistyped_path_creates_no_folder(run, tmp_path, command, form):
    missing = tmp_path / "nonexistent_dir2" / "m.db"
    result = run(*command, "--db", form.format(missing), ok=False)
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"Error: ConfigurationError: --db: folder {str(missing.parent)!r} does not exist "
        "(nothing was created; create the folder first or fix the path)"
    )
    assert not missing.parent.exists()


def test_the_default_location_is_created_but_a_dsn_folder_is_not(run, tmp_path, monkeypatch):
    monkeypatch.setenv("LANGMEM_TRPC_HOME", str(tmp_path / "new" / "home"))
    run("memories", "add", "--user", "a", "x")
    assert (tmp_path / "new" / "home" / "memories.db").exists()
    monkeypatch.setenv("LANGMEM_TRPC_DSN", str(tmp_path / "typo" / "m.db"))
    result = run("memories", "add", "--user", "a", "x", ok=False)
    assert result.exit_code == 1 and "folder" in result.output and "does not exist" in result.output
    assert not (tmp_path / "typo").exists()
    (tmp_path / "typo").mkdir()
    run("memories", "add", "--user", "a", "x")  # the folder exists: the file is created
    assert (tmp_path / "typo" / "m.db").exists()
