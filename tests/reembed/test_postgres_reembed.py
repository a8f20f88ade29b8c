"""Online re-embedding of a PostgreSQL database: cutover, resume, concurrency, processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from langmem_trpc import SearchOptions, UserKey
from langmem_trpc.errors import ConfigurationError

from .embedders import new, old, wide

pytestmark = pytest.mark.postgres
psycopg = pytest.importorskip("psycopg")

from langmem_trpc.backends.postgres import PostgresMemoryService  # noqa: E402

USERS = [UserKey("app", f"u{i}") for i in range(3)]
ROOT = Path(__file__).resolve().parents[2]


def _texts(user: UserKey, n: int) -> list[str]:
    words = "tea coffee juice water".split()
    return [f"{user.user_id} remembers fact {i}: {words[i % 4]} {i * 13}" for i in range(n)]


def _open(url: str, embeddings: object) -> PostgresMemoryService:
    """`exact_search_max=10`: users above it search through the HNSW index and
    `langmem_ann_candidates`, which the cutover rebuilds for the new dimension."""
    svc = PostgresMemoryService(url, embeddings, exact_search_max=10)  # type: ignore[arg-type]
    svc.setup()
    return svc


def _seed(url: str, n: int = 60) -> PostgresMemoryService:
    svc = _open(url, old)
    for user in USERS:
        svc.add_many(user, _texts(user, n))
    gone = svc.search(USERS[0], _texts(USERS[0], n)[5], SearchOptions(hybrid=False))[0]
    svc.delete(USERS[0], gone.id)
    return svc


def _vectors_are(url: str, model: object) -> None:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT text, embedding::text FROM langmem_memories").fetchall()
        columns = conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'langmem_memories'::regclass"
            " AND attname LIKE 'embedding%' AND NOT attisdropped"
        ).fetchall()
    assert columns == [("embedding",)]
    for text, literal in rows:
        got = np.asarray([float(x) for x in literal.strip("[]").split(",")], np.float32)
        want = np.asarray(model.embed_documents([text])[0], np.float32)  # type: ignore[attr-defined]
        assert got.shape == want.shape and np.allclose(
            got / np.linalg.norm(got), want / np.linalg.norm(want), atol=1e-5
        )


def _exact_hit(svc: PostgresMemoryService, user: UserKey, text: str) -> None:
    """Twice: the first search learns the user's size, the second (above
    `exact_search_max`) reads the HNSW index."""
    for _ in range(2):
        hits = svc.search(user, text, SearchOptions(hybrid=False, similarity_threshold=0.0))
        assert hits and hits[0].memory.text == text and (hits[0].score or 0) > 0.99, hits[:1]


def test_reembed_cuts_over_and_back_across_dimensions(pg_url: str) -> None:
    svc = _seed(pg_url)
    stale = _open(pg_url, old)
    report = svc.reembed(wide, batch_size=40)
    assert report.cut_over and report.generation == 1 and report.embedded == 180
    _vectors_are(pg_url, wide)
    _exact_hit(svc, USERS[1], _texts(USERS[1], 60)[7])
    with pytest.raises(ConfigurationError, match="re-embedded"):
        stale.search(USERS[1], "tea")
    with pytest.raises(ConfigurationError, match="re-embedded"):
        stale.add(USERS[1], "written with the old model")
    with pytest.raises(ConfigurationError, match="langmem-trpc reembed"):
        _open(pg_url, old)
    back = svc.reembed(old, batch_size=64)
    assert back.cut_over and back.generation == 2
    _vectors_are(pg_url, old)
    for service in (svc, stale):
        service.close()
    again = _open(pg_url, old)
    _exact_hit(again, USERS[2], _texts(USERS[2], 60)[3])
    again.close()


def test_searches_and_writes_in_other_threads_never_fail_nor_mix(pg_url: str) -> None:
    svc = _seed(pg_url, 80)
    errors: list[BaseException] = []
    stop = threading.Event()

    def searching(user: UserKey) -> None:
        texts = [t for t in _texts(user, 80) if t != _texts(USERS[0], 80)[5]]
        i = 0
        while not stop.is_set():
            try:
                _exact_hit(svc, user, texts[i % len(texts)])
            except BaseException as exc:
                errors.append(exc)
                return
            i += 7

    def writing() -> None:
        i = 0
        while not stop.is_set():
            try:
                svc.add(USERS[2], f"written during the re-embed, number {i}")
            except BaseException as exc:
                errors.append(exc)
                return
            i += 1

    threads = [threading.Thread(target=searching, args=(u,)) for u in USERS[:2]]
    threads.append(threading.Thread(target=writing))
    for thread in threads:
        thread.start()
    report = svc.reembed(new, batch_size=20)
    time.sleep(0.3)
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == [] and report.cut_over
    _vectors_are(pg_url, new)
    svc.close()


_SEARCHER = """
import sys
from langmem_trpc import SearchOptions, UserKey
from langmem_trpc.backends.postgres import PostgresMemoryService
from langmem_trpc.errors import ConfigurationError
from tests.reembed.embedders import old
svc = PostgresMemoryService(sys.argv[1], old)
svc.setup()
user, text = UserKey("app", "u1"), sys.argv[2]
ok = 0
print("ready", flush=True)
while True:
    try:
        hits = svc.search(user, text, SearchOptions(hybrid=False, similarity_threshold=0.0))
    except ConfigurationError as exc:
        print("refused" if "re-embedded" in str(exc) else f"error {exc}", ok, flush=True)
        break
    if not hits or hits[0].memory.text != text or hits[0].score < 0.99:
        print("mixed", hits[:1], flush=True)
        break
    ok += 1
"""


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "langmem_trpc.cli", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_another_process_searches_until_the_cutover_then_refuses(pg_url: str) -> None:
    _seed(pg_url, 80).close()
    text = _texts(USERS[1], 80)[42]
    searcher = subprocess.Popen(
        [sys.executable, "-c", _SEARCHER, pg_url, text],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert searcher.stdout is not None and searcher.stdout.readline().strip() == "ready"
    run = _cli("reembed", "--db", pg_url, "--embeddings", "tests.reembed.embedders:SlowNew",
               "--batch", "40", env={"REEMBED_TEST_SLEEP": "0.2"})  # fmt: skip
    out, err = run.communicate(timeout=180)
    assert run.returncode == 0, err
    verdict = searcher.stdout.readline().split()
    searcher.wait(timeout=30)
    assert verdict[0] == "refused" and int(verdict[1]) > 0, verdict
    _vectors_are(pg_url, new)


def test_sigkill_mid_reembed_then_a_rerun_completes(pg_url: str) -> None:
    _seed(pg_url, 80).close()
    spec = "tests.reembed.embedders:SlowNew"
    run = _cli("reembed", "--db", pg_url, "--embeddings", spec, "--batch", "20")
    made = 0
    deadline = time.monotonic() + 90
    with psycopg.connect(pg_url, autocommit=True) as conn:
        while time.monotonic() < deadline and made < 60:
            time.sleep(0.1)
            try:
                (made,) = conn.execute(
                    "SELECT count(embedding_next) FROM langmem_memories"
                ).fetchone()
            except psycopg.errors.UndefinedColumn:
                made = 0
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert 60 <= made < 240
    still_old = _open(pg_url, old)
    _exact_hit(still_old, USERS[0], _texts(USERS[0], 80)[9])
    still_old.close()
    rerun = _cli("reembed", "--db", pg_url, "--embeddings", spec, "--batch", "100",
                 env={"REEMBED_TEST_SLEEP": "0"})  # fmt: skip
    out, err = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, err
    assert "carried over" in out and "cut over" in out, out
    _vectors_are(pg_url, new)


def test_areembed_and_dry_run(pg_url: str) -> None:
    svc = _seed(pg_url, 20)
    assert svc.reembed_plan().texts == 60
    assert svc.reembed_plan([USERS[0]]).texts == 20
    partial = svc.reembed(new, users=[USERS[0]])
    assert not partial.cut_over and partial.embedded == 20
    report = asyncio.run(svc.areembed(new))
    assert report.cut_over and report.resumed == 20
    _vectors_are(pg_url, new)
    svc.close()
