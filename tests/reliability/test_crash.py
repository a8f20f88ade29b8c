"""Process crash between the operations of one job: SIGKILL a worker process mid-batch.

After a restart the same delta is re-processed (the cursor moves only after
the last operation) and the store ends in exactly the state of a run that was
never interrupted: same live memories, same ids, no duplicates.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from langmem_trpc.backends.sqlite import SQLiteMemoryService

from .crash_job import USER, WRITES, seed

ROOT = Path(__file__).resolve().parents[2]


def _run(db: Path, crash_at: int) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "tests.reliability.crash_job", str(db), str(crash_at)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(done.stderr)
    return done.returncode


def _state(db: Path) -> tuple[list[tuple[str, str]], bool, str]:
    with SQLiteMemoryService(db) as svc:
        live = sorted((e.id if e.id.startswith("seed-") else "", e.text) for e in svc.read(USER))
        cursor = svc.get_cursor(USER, "thread-1")
        check = svc._db.connection().execute("PRAGMA integrity_check").fetchone()[0]  # type: ignore[attr-defined]
    return live, cursor is not None, check


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[tuple[str, str]], bool, str]:
    db = tmp_path_factory.mktemp("ref") / "m.db"
    seed(str(db))
    assert _run(db, 0) == 0
    return _state(db)


@pytest.mark.parametrize("crash_at", [1, 3, 5, 7, WRITES])
def test_killed_mid_batch_then_restarted_matches_an_uninterrupted_run(
    crash_at: int, tmp_path: Path, reference: tuple[list[tuple[str, str]], bool, str]
) -> None:
    db = tmp_path / "m.db"
    seed(str(db))
    assert _run(db, crash_at) == -signal.SIGKILL
    live, has_cursor, _ = _state(db)
    assert has_cursor is (crash_at >= WRITES)  # the cursor is the last write
    if crash_at < WRITES - 1:
        assert live != reference[0], "the kill did not interrupt the batch"
    assert _run(db, 0) == 0  # restart: the same delta is read again
    assert _state(db) == reference
    texts = [t for _, t in reference[0]]
    assert len(texts) == len(set(texts))
    assert reference[2] == "ok"
