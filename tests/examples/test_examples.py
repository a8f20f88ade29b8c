"""Every example runs offline (scripted models) and prints what it promises."""

from __future__ import annotations

import os
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


def _run(name: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, env=env, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
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
