"""SQLite claims are byte-range locks on `<db>-claims`: other services and processes
are excluded, and the kernel frees a killed process's claims at once."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from langmem_trpc import SQLiteMemoryService, UserKey
from langmem_trpc.errors import BackendError

ALICE = UserKey("app", "alice")


def test_two_services_on_one_file_exclude_each_other(tmp_path):
    path = tmp_path / "m.db"
    with SQLiteMemoryService(path) as first, SQLiteMemoryService(path) as second:
        assert first.claim_thread(ALICE, "t", "job-1", 60) is not None
        assert second.claim_thread(ALICE, "t", "job-2", 60) is None
        assert second.claim_thread(ALICE, "other-thread", "job-2", 60) is not None
        first.release_thread(ALICE, "t", "job-1")
        assert second.claim_thread(ALICE, "t", "job-2", 60) is not None


def test_a_killed_process_frees_its_claims_at_once(tmp_path):
    path = tmp_path / "m.db"
    SQLiteMemoryService(path).close()
    code = textwrap.dedent(
        f"""
        import os, signal
        from langmem_trpc import SQLiteMemoryService, UserKey
        svc = SQLiteMemoryService({str(path)!r})
        assert svc.claim_thread(UserKey("app", "alice"), "t", "doomed", 3600) is not None
        print("claimed", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    with SQLiteMemoryService(path) as svc:
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline().strip() == "claimed"
        child.wait(timeout=60)
        assert child.returncode == -9
        assert svc.claim_thread(ALICE, "t", "next", 60) is not None  # no TTL to wait for


def test_a_live_process_claim_blocks_another_process(tmp_path):
    path = tmp_path / "m.db"
    SQLiteMemoryService(path).close()
    code = textwrap.dedent(
        f"""
        import sys
        from langmem_trpc import SQLiteMemoryService, UserKey
        svc = SQLiteMemoryService({str(path)!r})
        assert svc.claim_thread(UserKey("app", "alice"), "t", "holder", 3600) is not None
        print("claimed", flush=True)
        sys.stdin.readline()
        """
    )
    with SQLiteMemoryService(path) as svc:
        child = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "claimed"
        assert svc.claim_thread(ALICE, "t", "me", 60) is None
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait(timeout=60)
        assert svc.claim_thread(ALICE, "t", "me", 60) is not None


def test_a_claim_is_given_back_when_reading_under_it_fails(tmp_path, monkeypatch):
    svc = SQLiteMemoryService(str(tmp_path / "m.db"))
    try:

        def broken(work):
            raise BackendError("disk I/O error")

        with monkeypatch.context() as patch:
            patch.setattr(svc._db, "read", broken)
            with pytest.raises(BackendError):
                svc.claim_thread(ALICE, "t", "job-1", 30)
        assert svc.claim_thread(ALICE, "t", "job-2", 30) is not None
    finally:
        svc.close()
