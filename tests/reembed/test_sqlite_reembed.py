"""Online re-embedding of a SQLite file: cutover, resume, concurrency, other processes."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from langmem_trpc import SearchOptions, UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.errors import ConfigurationError
from langmem_trpc.service.reembed import ReembedProgress

from . import embedders
from .embedders import new, old, wide

USERS = [UserKey("app", f"u{i}") for i in range(3)]
ROOT = Path(__file__).resolve().parents[2]


def _texts(user: UserKey, n: int) -> list[str]:
    return [
        f"{user.user_id} remembers fact {i}: {'tea coffee juice water'.split()[i % 4]} {i * 13}"
        for i in range(n)
    ]


def _seed(path: Path, n: int = 120) -> SQLiteMemoryService:
    svc = SQLiteMemoryService(path, old)
    for user in USERS:
        svc.add_many(user, _texts(user, n))
    gone = svc.search(USERS[0], _texts(USERS[0], n)[5], SearchOptions(hybrid=False))[0]
    svc.delete(USERS[0], gone.id)  # soft-deleted: re-embedded too (a restore brings it back)
    return svc


def _vectors_are(path: Path, model: object) -> None:
    """Every stored vector (deleted rows too) is `model`'s unit embedding of its text."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT text, embedding FROM memories").fetchall()
        assert conn.execute("SELECT count(*) FROM reembed_vectors").fetchone() == (0,)
    for text, blob in rows:
        want = np.asarray(model.embed_documents([text])[0], np.float32)  # type: ignore[attr-defined]
        assert np.allclose(np.frombuffer(blob, np.float32), want / np.linalg.norm(want), atol=1e-6)


def _exact_hit(svc: SQLiteMemoryService, user: UserKey, text: str) -> None:
    """A vector-only search for a stored text finds it at cosine ~1: with a query of one
    model over vectors of another, the best cosine is far lower."""
    hits = svc.search(user, text, SearchOptions(hybrid=False, similarity_threshold=0.0))
    assert hits and hits[0].memory.text == text and (hits[0].score or 0) > 0.99, hits[:1]


def test_reembed_cuts_over_and_back_across_dimensions(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    svc = _seed(path)
    seen: list[ReembedProgress] = []
    report = svc.reembed(wide, batch_size=50, progress=seen.append)
    assert report.cut_over and report.generation == 1 and report.embedded == 360
    assert seen[-1].done == seen[-1].total == 360 and seen[-1].rate > 0
    _vectors_are(path, wide)
    _exact_hit(svc, USERS[1], _texts(USERS[1], 120)[7])  # this service switched itself
    back = svc.reembed(old, batch_size=64)
    assert back.cut_over and back.generation == 2
    _vectors_are(path, old)
    svc.close()
    with SQLiteMemoryService(path, old) as reopened:
        _exact_hit(reopened, USERS[2], _texts(USERS[2], 120)[3])
    with pytest.raises(ConfigurationError, match="768-dimension"):
        SQLiteMemoryService(path, wide)


def test_a_service_still_on_the_old_model_refuses_after_the_cutover(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    svc = _seed(path, 20)
    stale = SQLiteMemoryService(path, old)
    keyword_only = SQLiteMemoryService(path)
    svc.reembed(new)
    with pytest.raises(ConfigurationError, match="re-embedded.*reopen it with the new embedder"):
        stale.search(USERS[0], "tea")
    with pytest.raises(ConfigurationError, match="re-embedded"):
        stale.add(USERS[0], "written with the old model")
    with pytest.raises(ConfigurationError, match="langmem-trpc reembed"):
        SQLiteMemoryService(path, old)
    assert keyword_only.search(USERS[0], "tea")  # no embedder: nothing to mix
    keyword_only.add(USERS[0], "a keyword-only write gets its vector from the new model")
    with SQLiteMemoryService(path, new) as fresh:
        _exact_hit(fresh, USERS[0], "a keyword-only write gets its vector from the new model")
    for service in (svc, stale, keyword_only):
        service.close()


def test_searches_and_writes_in_other_threads_never_fail_nor_mix(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    svc = _seed(path, 200)
    errors: list[BaseException] = []
    stop = threading.Event()
    written: list[str] = []

    def searching(user: UserKey) -> None:
        texts = _texts(user, 200)
        del texts[5]  # u0's fifth memory is deleted
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
            text = f"written during the re-embed, number {i}"
            try:
                svc.add(USERS[2], text)
                written.append(text)
            except BaseException as exc:
                errors.append(exc)
                return
            i += 1

    threads = [threading.Thread(target=searching, args=(u,)) for u in USERS[:2]]
    threads.append(threading.Thread(target=writing))
    for thread in threads:
        thread.start()
    report = svc.reembed(new, batch_size=20)
    time.sleep(0.2)  # searches and writes after the cutover, on the new model
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == [] and report.cut_over and written
    _vectors_are(path, new)
    svc.close()


_SEARCHER = """
import sys
from langmem_trpc import SearchOptions, UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.errors import ConfigurationError
from tests.reembed.embedders import old
svc = SQLiteMemoryService(sys.argv[1], old)
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


def test_another_process_searches_the_old_vectors_until_the_cutover_then_refuses(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.db"
    _seed(path, 150).close()
    text = _texts(USERS[1], 150)[42]
    searcher = subprocess.Popen(
        [sys.executable, "-c", _SEARCHER, str(path), text],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert searcher.stdout is not None and searcher.stdout.readline().strip() == "ready"
    run = _cli("reembed", "--db", str(path), "--embeddings", "tests.reembed.embedders:SlowNew",
               "--batch", "50", env={"REEMBED_TEST_SLEEP": "0.1"})  # fmt: skip
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    verdict = searcher.stdout.readline().split()
    searcher.wait(timeout=30)
    assert verdict[0] == "refused" and int(verdict[1]) > 0, verdict
    _vectors_are(path, new)


def test_sigkill_mid_reembed_then_a_rerun_completes(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    _seed(path, 150).close()
    spec = "tests.reembed.embedders:SlowNew"
    run = _cli("reembed", "--db", str(path), "--embeddings", spec, "--batch", "30")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.1)
        with sqlite3.connect(path, timeout=10) as conn:
            (made,) = conn.execute("SELECT count(*) FROM reembed_vectors").fetchone()
        if made >= 60:
            break
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert 60 <= made < 450
    with SQLiteMemoryService(path, old) as still_old:  # no cutover: all old vectors served
        _exact_hit(still_old, USERS[0], _texts(USERS[0], 150)[9])
    rerun = _cli("reembed", "--db", str(path), "--embeddings", spec, "--batch", "100",
                 env={"REEMBED_TEST_SLEEP": "0"})  # fmt: skip
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    assert "carried over" in out and "cut over" in out, out
    _vectors_are(path, new)


def test_areembed_and_dry_run(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    svc = _seed(path, 30)
    plan = svc.reembed_plan()
    assert plan.texts == 90 and plan.tokens > 90
    assert svc.reembed_plan([USERS[0]]).texts == 30
    dry = _cli("reembed", "--db", str(path), "--embeddings", "tests.reembed.embedders:new",
               "--dry-run")  # fmt: skip
    out, _ = dry.communicate(timeout=60)
    assert "90 texts" in out
    report = asyncio.run(svc.areembed(new))
    assert report.cut_over
    _vectors_are(path, new)
    svc.close()


def test_users_embeds_only_theirs_and_waits_for_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    svc = _seed(path, 30)
    partial = svc.reembed(embedders.new, users=[USERS[0]])
    assert not partial.cut_over and partial.embedded == 30
    _exact_hit(svc, USERS[1], _texts(USERS[1], 30)[2])  # still the old model
    rest = svc.reembed(embedders.new)
    assert rest.cut_over and rest.resumed == 30 and rest.embedded == 60
    _vectors_are(path, new)
    svc.close()
