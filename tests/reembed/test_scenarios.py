"""Online re-embedding, the scenarios every backend with a shadow column shares (SQLite,
PostgreSQL): cutover and back, concurrent threads, another process, SIGKILL then rerun,
async and dry run. Each backend brings a `Store`: how to open it, where its shadow
vectors are counted, and how its stored vectors are read back. LanceDB's single-writer
lock turns "another process opens the same store" into a lock refusal, so it keeps its
own tests (test_lancedb_reembed.py); SQLite-only rules stay in test_sqlite_reembed.py.
The conformance rules every re-embedding backend keeps are `testing.ReembedConformance`
(test_conformance.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import langmem_trpc
from langmem_trpc import Limits, SearchOptions, UserKey
from langmem_trpc.errors import ConfigurationError
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.service.reembed import ReembedProgress

from .embedders import new, old, wide

USERS = [UserKey("app", f"u{i}") for i in range(3)]
ROOT = Path(__file__).resolve().parents[2]
SLOW = "tests.reembed.embedders:SlowNew"
UNLIMITED = Limits(capacity=None)


@dataclass
class Store:
    """One backend's store under test."""

    url: str
    """What `langmem_trpc.open` and `langmem-trpc reembed --db` take."""
    options: dict[str, Any]
    stored: Callable[[], list[tuple[str, np.ndarray]]]
    """Every stored (text, vector), deleted rows too, with no shadow vector left."""
    shadow: Callable[[], int]
    """How many shadow vectors a re-embed in progress has written."""

    def open(self, embeddings: object) -> MemoryService:
        # No capacity: the writer thread of the concurrency scenario adds as long as the
        # re-embed runs, which on a fast host passes the default 1,000 memories.
        return langmem_trpc.open(self.url, embeddings=embeddings, limits=UNLIMITED, **self.options)


def _sqlite_store(path: Path) -> Store:
    def stored() -> list[tuple[str, np.ndarray]]:
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM reembed_vectors").fetchone() == (0,)
            rows = conn.execute("SELECT text, embedding FROM memories").fetchall()
        return [(text, np.frombuffer(blob, np.float32)) for text, blob in rows]

    def shadow() -> int:
        with sqlite3.connect(path, timeout=10) as conn:
            return int(conn.execute("SELECT count(*) FROM reembed_vectors").fetchone()[0])

    return Store(str(path), {}, stored, shadow)


def _postgres_store(url: str) -> Store:
    import psycopg

    def stored() -> list[tuple[str, np.ndarray]]:
        with psycopg.connect(url) as conn:
            columns = conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = 'langmem_memories'::regclass"
                " AND attname LIKE 'embedding%' AND NOT attisdropped"
            ).fetchall()
            assert columns == [("embedding",)]
            rows = conn.execute("SELECT text, embedding::text FROM langmem_memories").fetchall()
        return [
            (text, np.asarray([float(x) for x in lit.strip("[]").split(",")], np.float32))
            for text, lit in rows
        ]

    def shadow() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            try:
                found = conn.execute("SELECT count(embedding_next) FROM langmem_memories")
            except psycopg.errors.UndefinedColumn:
                return 0
            return int(found.fetchone()[0])

    # exact_search_max=10: users above it search through the HNSW index and
    # `langmem_ann_candidates`, which the cutover rebuilds for the new dimension.
    return Store(url, {"exact_search_max": 10}, stored, shadow)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        yield _sqlite_store(tmp_path / "m.db")
    else:
        pytest.importorskip("psycopg")
        yield _postgres_store(request.getfixturevalue("pg_url"))


def _texts(user: UserKey, n: int) -> list[str]:
    words = "tea coffee juice water".split()
    return [f"{user.user_id} remembers fact {i}: {words[i % 4]} {i * 13}" for i in range(n)]


def _seed(store: Store, n: int) -> MemoryService:
    svc = store.open(old)
    for user in USERS:
        svc.add_many(user, _texts(user, n))
    gone = svc.search(USERS[0], _texts(USERS[0], n)[5], SearchOptions(hybrid=False))[0]
    svc.delete(USERS[0], gone.id)  # soft-deleted: re-embedded too (a restore brings it back)
    return svc


def _vectors_are(store: Store, model: Any) -> None:
    """Every stored vector (deleted rows too) is `model`'s unit embedding of its text."""
    for text, got in store.stored():
        want = np.asarray(model.embed_documents([text])[0], np.float32)
        assert got.shape == want.shape
        assert np.allclose(got / np.linalg.norm(got), want / np.linalg.norm(want), atol=1e-5)


def _exact_hit(svc: MemoryService, user: UserKey, text: str) -> None:
    """A vector-only search for a stored text finds it at cosine ~1 (a query of one model
    over vectors of another scores far lower). Twice: PostgreSQL's first search learns
    the user's size, the second reads the HNSW index."""
    for _ in range(2):
        hits = svc.search(user, text, SearchOptions(hybrid=False, similarity_threshold=0.0))
        assert hits and hits[0].memory.text == text and (hits[0].score or 0) > 0.99, hits[:1]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "langmem_trpc.cli", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_reembed_cuts_over_and_back_across_dimensions(store: Store) -> None:
    svc = _seed(store, 60)
    stale = store.open(old)
    seen: list[ReembedProgress] = []
    report = svc.reembed(wide, batch_size=40, progress=seen.append)
    assert report.cut_over and report.generation == 1 and report.embedded == 180
    assert seen[-1].done == seen[-1].total == 180 and seen[-1].rate > 0
    _vectors_are(store, wide)
    _exact_hit(svc, USERS[1], _texts(USERS[1], 60)[7])  # this service switched itself
    with pytest.raises(ConfigurationError, match="re-embedded"):
        stale.search(USERS[1], "tea")
    with pytest.raises(ConfigurationError, match="re-embedded"):
        stale.add(USERS[1], "written with the old model")
    with pytest.raises(ConfigurationError, match="langmem-trpc reembed"):
        store.open(old)
    back = svc.reembed(old, batch_size=64)
    assert back.cut_over and back.generation == 2
    _vectors_are(store, old)
    for service in (svc, stale):
        service.close()
    with store.open(old) as again:
        _exact_hit(again, USERS[2], _texts(USERS[2], 60)[3])
    with pytest.raises(ConfigurationError, match="768-dimension"):
        store.open(wide)


def test_searches_and_writes_in_other_threads_never_fail_nor_mix(store: Store) -> None:
    svc = _seed(store, 80)
    errors: list[BaseException] = []
    stop = threading.Event()
    written: list[str] = []

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
                written.append(f"{i}")
            except BaseException as exc:
                errors.append(exc)
                return
            i += 1

    threads = [threading.Thread(target=searching, args=(u,)) for u in USERS[:2]]
    threads.append(threading.Thread(target=writing))
    for thread in threads:
        thread.start()
    report = svc.reembed(new, batch_size=20)
    time.sleep(0.3)  # searches and writes after the cutover, on the new model
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == [] and report.cut_over and written
    _vectors_are(store, new)
    svc.close()


_SEARCHER = """
import sys
import langmem_trpc
from langmem_trpc import Limits, SearchOptions, UserKey
from langmem_trpc.errors import ConfigurationError
from tests.reembed.embedders import old
svc = langmem_trpc.open(sys.argv[1], embeddings=old)
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


def test_another_process_searches_the_old_vectors_until_the_cutover_then_refuses(
    store: Store,
) -> None:
    _seed(store, 80).close()
    text = _texts(USERS[1], 80)[42]
    searcher = subprocess.Popen(
        [sys.executable, "-c", _SEARCHER, store.url, text],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert searcher.stdout is not None and searcher.stdout.readline().strip() == "ready"
    slow = {"REEMBED_TEST_SLEEP": "0.2"}
    run = _cli("reembed", "--db", store.url, "--embeddings", SLOW, "--batch", "40", env=slow)
    out, err = run.communicate(timeout=180)
    assert run.returncode == 0, err
    verdict = searcher.stdout.readline().split()
    searcher.wait(timeout=30)
    assert verdict[0] == "refused" and int(verdict[1]) > 0, verdict
    _vectors_are(store, new)


def test_sigkill_mid_reembed_then_a_rerun_completes(store: Store) -> None:
    _seed(store, 80).close()
    run = _cli("reembed", "--db", store.url, "--embeddings", SLOW, "--batch", "20")
    made, deadline = 0, time.monotonic() + 90
    while time.monotonic() < deadline and made < 60:
        time.sleep(0.1)
        made = store.shadow()
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert 60 <= made < 240
    with store.open(old) as still_old:  # no cutover: all old vectors served
        _exact_hit(still_old, USERS[0], _texts(USERS[0], 80)[9])
    fast = {"REEMBED_TEST_SLEEP": "0"}
    rerun = _cli("reembed", "--db", store.url, "--embeddings", SLOW, "--batch", "100", env=fast)
    out, err = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, err
    assert "carried over" in out and "cut over" in out, out
    _vectors_are(store, new)


def test_areembed_users_and_dry_run(store: Store) -> None:
    svc = _seed(store, 20)
    plan = svc.reembed_plan()
    assert plan.texts == 60 and plan.tokens > 60
    assert svc.reembed_plan([USERS[0]]).texts == 20
    dry = _cli(
        "reembed", "--db", store.url, "--embeddings", "tests.reembed.embedders:new", "--dry-run"
    )
    out, _ = dry.communicate(timeout=60)
    assert "60 texts" in out
    partial = svc.reembed(new, users=[USERS[0]])
    assert not partial.cut_over and partial.embedded == 20
    _exact_hit(svc, USERS[1], _texts(USERS[1], 20)[2])  # still the old model
    report = asyncio.run(svc.areembed(new))
    assert report.cut_over and report.resumed == 20 and report.embedded == 40
    _vectors_are(store, new)
    svc.close()
