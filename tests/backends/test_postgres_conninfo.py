"""Connection strings are checked before any pool exists; no secret reaches a log or stderr."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

from langmem_trpc import BackendError, ConfigurationError, PostgresMemoryService
from langmem_trpc.backends.postgres._conninfo import checked_conninfo, redacted

SECRET = "Sup3r%S3cretPw"
ROOT = Path(__file__).resolve().parents[2]

MALFORMED = [
    # an unencoded '%' in a URL's password: libpq quotes the token it cannot decode
    (f"postgresql://app:{SECRET}@127.0.0.1:1/db", "'%' that is not percent-encoding"),
    # a password with a space, unquoted: libpq quotes the word after it
    ("host=127.0.0.1 port=1 password=Sup3r S3cretPw", "not a key=value pair"),
    (f"host=127.0.0.1 port=1 password='{SECRET}", "quoted value is not closed"),
    (f"host=127.0.0.1 port=abc password={SECRET}", "port must be a number"),
]
UNREACHABLE = f"host=127.0.0.1 port=1 dbname=db user=app password={SECRET} connect_timeout=1"


def _leaks(text: str) -> bool:
    return any(part in text for part in (SECRET, "S3cretPw", "Sup3r"))


def _all_text(exc: BaseException, caplog: pytest.LogCaptureFixture) -> str:
    """Everything a user or a log handler could see: the error with its chain, every record."""
    shown = "".join(traceback.format_exception(exc))
    chain: BaseException | None = exc
    while chain is not None:  # the chain even where a traceback would hide it
        shown += repr(chain) + str(chain)
        chain = chain.__cause__ or chain.__context__
    for record in caplog.records:
        shown += record.getMessage() + repr(record.args) + (record.exc_text or "")
        if record.exc_info and record.exc_info[1] is not None:
            shown += "".join(traceback.format_exception(record.exc_info[1]))
    return shown


@pytest.mark.parametrize(("dsn", "problem"), MALFORMED)
def test_a_malformed_string_fails_at_once_without_the_secret(dsn, problem, caplog):
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(ConfigurationError) as raised:
        svc = PostgresMemoryService(dsn, pool_timeout=1)
        svc.setup()
    assert time.monotonic() - started < 1  # refused before a pool could wait for anything
    assert problem in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__context__ is None
    assert not _leaks(_all_text(raised.value, caplog))


def test_an_unreachable_server_says_so_and_logs_no_secret(caplog):
    caplog.set_level(logging.DEBUG)
    svc = PostgresMemoryService(UNREACHABLE, pool_timeout=1)
    try:
        with pytest.raises(BackendError) as raised:
            svc.setup()
        assert "no PostgreSQL connection within the pool timeout" in str(raised.value)

        async def asetup_then_aclose() -> None:
            # The async pool is closed on its own loop: left for asyncio.run to cancel,
            # psycopg_pool's waits (asyncio.wait_for, which can swallow a cancel on 3.11)
            # once hung this test's loop shutdown for its whole timeout in CI.
            try:
                await svc.asetup()
            finally:
                await svc.aclose()

        with pytest.raises(BackendError) as araised:
            asyncio.run(asetup_then_aclose())
    finally:
        svc.close()
    assert caplog.records  # psycopg_pool did log its connection attempts
    assert not _leaks(_all_text(raised.value, caplog) + _all_text(araised.value, caplog))


@pytest.mark.parametrize("dsn", [d for d, _ in MALFORMED[:2]] + [UNREACHABLE])
def test_the_cli_never_prints_the_secret(dsn, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LANGMEM_TRPC_HOME": str(tmp_path)}
    code = "from langmem_trpc.cli import main; main()"
    args = ["-vv", "memories", "list", "--db", dsn, "--user", "alice"]
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert not _leaks(done.stdout + done.stderr), done.stderr
    assert list(tmp_path.iterdir()) == []  # and no SQLite file named after the string


def test_checked_conninfo_returns_a_valid_string_unchanged():
    assert checked_conninfo("postgresql://u:p%25w@h:5432/db") == "postgresql://u:p%25w@h:5432/db"
    assert checked_conninfo("host=/tmp dbname=x") == "host=/tmp dbname=x"


def test_redacted_hides_every_secret():
    shown = redacted(f"postgresql://app:{SECRET.replace('%', '%25')}@h/db?sslpassword=kpw")
    assert "password=***" in shown and "sslpassword=***" in shown and "host=h" in shown
    assert not _leaks(shown) and "kpw" not in shown
    assert redacted("host=x password") == "<unparseable connection string>"
