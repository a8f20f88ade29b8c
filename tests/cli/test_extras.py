"""A command whose optional extra is missing says which extra to install, in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from langmem_trpc.cli._common import EXTRAS, RootGroup

ROOT = Path(__file__).resolve().parents[2]

BLOCKING_CLI = """
import sys
blocked = set(sys.argv[1].split(","))

class Block:  # as if the modules were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Block())
from langmem_trpc.cli import cli
cli(sys.argv[2:], prog_name="langmem-trpc")
"""


def _without(modules: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LANGMEM_TRPC_DSN", None)
    env.pop("LANGMEM_TRPC_HOME", None)  # the default database would need platformdirs
    return subprocess.run(
        [sys.executable, "-c", BLOCKING_CLI, modules, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def hint(extra: str, module: str) -> str:
    several = "s" if "," in extra else ""
    return (
        f"Error: missing the [{extra}] extra{several} (module {module!r} is not installed): "
        f"pip install 'langmem-trpc[{extra}]'"
    )


@pytest.mark.parametrize(
    ("blocked", "args", "extra", "module"),
    [
        ("uvicorn", ["ui", "--db", "m.db"], "ui", "uvicorn"),
        ("jinja2", ["ui", "--db", "m.db", "--read-only"], "ui", "jinja2"),
        ("mcp", ["mcp", "--db", "m.db", "--user", "a"], "mcp", "mcp"),
        ("uvicorn", ["mcp", "--db", "m.db", "--user", "a", "--http"], "mcp", "uvicorn"),
        (
            "psycopg",
            ["memories", "list", "--db", "postgresql://127.0.0.1:1/x", "--user", "a"],
            "postgres",
            "psycopg",
        ),
        (
            "lancedb",
            ["memories", "add", "--db", "lancedb://store", "--user", "a", "x"],
            "lancedb",
            "lancedb",
        ),
        ("psycopg", ["worker", "--db", "postgresql://127.0.0.1:1/x"], "postgres,queue", "psycopg"),
    ],
)
def test_a_missing_extra_is_a_one_line_install_hint(tmp_path, blocked, args, extra, module):
    from langmem_trpc import UserKey, open

    with open(str(tmp_path / "m.db")) as svc:  # the read-only commands need a database
        svc.add(UserKey("default", "a"), "seed")
    result = _without(blocked, *args, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == hint(extra, module)


def test_a_missing_module_outside_the_extras_stays_unexpected(tmp_path):
    result = _without("platformdirs", "memories", "list", "--user", "a", cwd=tmp_path)  # no --db
    assert result.returncode == 1
    assert result.stderr.startswith("Error: unexpected ModuleNotFoundError")


def test_the_root_gives_the_hint_for_commands_without_their_own_error_handling(monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)  # `import bm25s` raises ModuleNotFoundError

    @click.group(cls=RootGroup)
    def root() -> None:
        pass

    @root.group()
    def bench() -> None:
        pass

    @bench.command()
    def locomo() -> None:
        import bm25s  # noqa: F401

    result = CliRunner().invoke(root, ["bench", "locomo"])
    assert result.exit_code == 1
    assert result.output.strip() == hint("bench", "bm25s")


def test_the_table_names_every_extra_of_the_package():
    from importlib.metadata import metadata

    extras = set(metadata("langmem-trpc").get_all("Provides-Extra") or [])
    assert set(EXTRAS) == extras - {"test", "dev"}  # the test tools' own extras


@pytest.mark.postgres
def test_the_worker_names_the_queue_extra_on_a_real_database(tmp_path, pg_url):
    result = _without("procrastinate", "worker", "--drain", "--db", pg_url, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == hint("queue", "procrastinate")


@pytest.mark.postgres
def test_jobs_status_without_the_queue_extra_on_a_queue_less_database_says_so(tmp_path, pg_url):
    """A PostgreSQL user of the in-process worker (no [queue] extra, no queue tables) is told
    there is no job queue, not asked to install one (issue 30 item 6)."""
    result = _without("procrastinate", "jobs", "status", "--db", pg_url, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "no job queue in this database" in result.stdout


def test_jobs_status_on_an_unreachable_server_is_a_backend_error_not_unexpected(tmp_path):
    db = "postgresql://127.0.0.1:1/x"
    result = _without("procrastinate", "jobs", "status", "--db", db, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("Error: BackendError: cannot read the PostgreSQL database")
