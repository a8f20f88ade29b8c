"""Online re-embedding of a LanceDB directory: cutover, resume, concurrency, a killed CLI."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lancedb", reason="the [lancedb] extra (lancedb) is not installed")

import lancedb

from langmem_trpc import SearchOptions, UserKey
from langmem_trpc.backends.lancedb import LanceDBMemoryService
from langmem_trpc.backends.lancedb._reembed import SHADOW, open_shadow
from langmem_trpc.errors import ConfigurationError
from langmem_trpc.service.reembed import ReembedProgress
from langmem_trpc.testing import HashingEmbeddings

from .embedders import new, old, wide

USERS = [UserKey("app", f"u{i}") for i in range(3)]
ROOT = Path(__file__).resolve().parents[2]


def _texts(user: UserKey, n: int) -> list[str]:
    return [
        f"{user.user_id} remembers fact {i}: {'tea coffee juice water'.split()[i % 4]} {i * 13}"
        for i in range(n)
    ]


def _seed(path: Path, n: int = 120) -> LanceDBMemoryService:
    svc = LanceDBMemoryService(path, old)
    for user in USERS:
        svc.add_many(user, _texts(user, n))
    gone = svc.search(USERS[0], _texts(USERS[0], n)[5], SearchOptions(hybrid=False))[0]
    svc.delete(USERS[0], gone.id)  # soft-deleted: re-embedded too (a restore brings it back)
    return svc


def _shadow_rows(path: Path) -> int:
    """Rows in the shadow table; 0 also while a CLI in another process is creating it."""
    shadow = open_shadow(lancedb.connect(str(path)))
    return 0 if shadow is None else int(shadow.count_rows())


def _vectors_are(path: Path, model: object) -> None:
    """Every stored memory vector (deleted rows too) is `model`'s unit embedding of its
    text, and no shadow is left."""
    table = lancedb.connect(str(path)).open_table("records")
    found = table.search().where("rec = 'm'").limit(None).to_arrow().to_pylist()
    assert found and _shadow_rows(path) == 0
    for row in found:
        text = json.loads(row["body"])["memory"]["text"]
        want = np.asarray(model.embed_documents([text])[0], np.float32)  # type: ignore[attr-defined]
        got = np.asarray(row["vector"], np.float32)
        assert got.shape == want.shape and np.allclose(got, want / np.linalg.norm(want), atol=1e-6)


def _exact_hit(svc: LanceDBMemoryService, user: UserKey, text: str) -> None:
    """A vector-only search for a stored text finds it at cosine ~1: with a query of one
    model over vectors of another, the best cosine is far lower."""
    hits = svc.search(user, text, SearchOptions(hybrid=False, similarity_threshold=0.0))
    assert hits and hits[0].memory.text == text and (hits[0].score or 0) > 0.99, hits[:1]


def test_reembed_cuts_over_and_back_across_dimensions(tmp_path: Path) -> None:
    path = tmp_path / "lance"
    svc = _seed(path)
    older = svc.search(USERS[1], _texts(USERS[1], 120)[8])[0]
    svc.update(USERS[1], older.id, "u1 moved to a new fact", supersede=True)  # + 1 row
    seen: list[ReembedProgress] = []
    report = svc.reembed(wide, batch_size=50, progress=seen.append)
    assert report.cut_over and report.generation == 1 and report.embedded == 361
    assert seen[-1].done == seen[-1].total == 361 and seen[-1].rate > 0
    _vectors_are(path, wide)  # the superseded and the deleted versions too
    assert svc.get(USERS[1], older.id).superseded_by is not None  # validity kept
    _exact_hit(svc, USERS[1], _texts(USERS[1], 120)[7])  # this service switched itself
    assert svc.store_info().embedder.dims == 768  # type: ignore[union-attr]
    back = svc.reembed(old, batch_size=64)
    assert back.cut_over and back.generation == 2
    _vectors_are(path, old)
    assert svc.reembed(old).embedded == 0  # already on it: nothing to do
    svc.close()
    with LanceDBMemoryService(path, old) as reopened:
        _exact_hit(reopened, USERS[2], _texts(USERS[2], 120)[3])
    with pytest.raises(ConfigurationError, match="768-dimension"):
        LanceDBMemoryService(path, wide)


def test_a_same_dimension_model_change_is_refused_and_points_to_reembed(tmp_path: Path) -> None:
    path = tmp_path / "lance"
    _seed(path, 10).close()
    with pytest.raises(ConfigurationError, match="another model.*langmem-trpc reembed"):
        LanceDBMemoryService(path, new)
    with LanceDBMemoryService(path) as keyword_only:  # no embedder: nothing to mix
        assert keyword_only.reembed(new).cut_over  # and it serves the new model afterwards
        _exact_hit(keyword_only, USERS[0], _texts(USERS[0], 10)[2])
    with pytest.raises(ConfigurationError, match="another model.*langmem-trpc reembed"):
        LanceDBMemoryService(path, old)
    with LanceDBMemoryService(path, new) as fresh:
        fresh.add(USERS[0], "written after the cutover")
        _exact_hit(fresh, USERS[0], "written after the cutover")
    _vectors_are(path, new)


def test_a_keyword_only_directory_gets_its_first_vectors(tmp_path: Path) -> None:
    path = tmp_path / "lance"
    with LanceDBMemoryService(path) as svc:  # created without an embedder: no vector column
        svc.add(USERS[0], "Likes green tea")
        assert svc.reembed(wide).cut_over
        _exact_hit(svc, USERS[0], "Likes green tea")
    _vectors_are(path, wide)
    with LanceDBMemoryService(path, wide) as again:
        _exact_hit(again, USERS[0], "Likes green tea")


def test_searches_and_writes_in_other_threads_never_fail_nor_mix(tmp_path: Path) -> None:
    path = tmp_path / "lance"
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
    time.sleep(0.3)  # searches and writes after the cutover, on the new model
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == [] and report.cut_over and written
    _vectors_are(path, new)  # the writes made during the fill included
    svc.close()


class _FailingNew(HashingEmbeddings):
    """`new` until its third document batch, which fails (a provider outage mid-run)."""

    def __init__(self) -> None:
        super().__init__(seed="new")
        self.batches = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.batches += 1
        if self.batches == 3:
            raise RuntimeError("provider outage")
        return super().embed_documents(texts)


def test_an_interrupted_run_serves_old_vectors_and_a_rerun_resumes(tmp_path: Path) -> None:
    path = tmp_path / "lance"
    svc = _seed(path, 40)
    with pytest.raises(RuntimeError, match="provider outage"):
        svc.reembed(_FailingNew(), batch_size=25)
    assert _shadow_rows(path) == 50
    _exact_hit(svc, USERS[1], _texts(USERS[1], 40)[11])  # no cutover: all old vectors
    info = svc.store_info()
    assert info.reembed_done == 50 and info.reembed_target is not None
    svc.update(USERS[0], svc.search(USERS[0], _texts(USERS[0], 40)[0])[0].id, "edited meanwhile")
    report = svc.reembed(new, batch_size=25)
    assert report.cut_over and report.resumed + report.embedded == 120, report
    assert report.resumed in (49, 50)  # 50 in the shadow, one maybe edited since
    assert svc.store_info().reembed_target is None
    _vectors_are(path, new)
    svc.close()


def test_a_crash_between_the_new_table_and_the_identity_file_is_finished_at_open(
    tmp_path: Path,
) -> None:
    """The cutover writes the new identity into `records` with the vectors, then the file:
    an open that finds the file behind (the crash window) records the table's."""
    path = tmp_path / "lance"
    svc = _seed(path, 10)
    before = (path / "langmem_embedder.json").read_text()
    svc.reembed(new)
    svc.close()
    new_identity = (path / "langmem_embedder.json").read_text()
    (path / "langmem_embedder.json").write_text(before)  # as if killed before the file
    (path / "langmem_reembed.json").write_text(new_identity)  # and before the cleanup
    with pytest.raises(ConfigurationError, match="another model"):
        LanceDBMemoryService(path, old)
    with LanceDBMemoryService(path, new) as reopened:
        _exact_hit(reopened, USERS[1], _texts(USERS[1], 10)[4])
        info = reopened.store_info()
        assert info.embedder.generation == 1 and info.reembed_target is None  # type: ignore[union-attr]
    assert not (path / "langmem_reembed.json").exists()


@pytest.mark.parametrize("target", [None, new], ids=["no-target", "target-recorded"])
def test_a_shadow_killed_inside_its_creation_is_made_again(tmp_path: Path, target: object) -> None:
    """A kill inside `create_table` leaves the shadow's directory without a version:
    listed, but not openable. The next run (or a store open) must not fail on it."""
    path = tmp_path / "lance"
    _seed(path, 10).close()
    if target is not None:  # an earlier run for this model recorded it, then was killed
        with LanceDBMemoryService(path, old) as svc:
            svc.reembed(new, users=[USERS[0]])
    (path / f"{SHADOW}.lance").mkdir(exist_ok=True)
    for leftover in (path / f"{SHADOW}.lance").iterdir():  # the directory, no version in it
        shutil.rmtree(leftover)
    (path / f"{SHADOW}.lance" / "_versions").mkdir()
    with LanceDBMemoryService(path, old) as svc:
        assert svc.store_info().embedder.generation == 0  # type: ignore[union-attr]
        report = svc.reembed(new, batch_size=7)
        assert report.cut_over and report.resumed + report.embedded == 30
    _vectors_are(path, new)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "langmem_trpc.cli", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigkill_mid_reembed_then_a_rerun_completes(tmp_path: Path) -> None:
    path = tmp_path / "lance"
    _seed(path, 150).close()
    url, spec = f"lancedb://{path}", "tests.reembed.embedders:SlowNew"
    run = _cli("reembed", "--db", url, "--embeddings", spec, "--batch", "30")
    deadline, made = time.monotonic() + 60, 0
    while time.monotonic() < deadline and made < 60:
        time.sleep(0.1)
        made = _shadow_rows(path)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    made = _shadow_rows(path)
    assert 60 <= made < 450
    with LanceDBMemoryService(path, old) as still_old:  # no cutover: all old vectors served
        _exact_hit(still_old, USERS[0], _texts(USERS[0], 150)[9])
    rerun = _cli("reembed", "--db", url, "--embeddings", spec, "--batch", "100",
                 env={"REEMBED_TEST_SLEEP": "0"})  # fmt: skip
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    assert f"({made} carried over" in out and "cut over" in out, out
    _vectors_are(path, new)


def test_areembed_dry_run_and_users(tmp_path: Path) -> None:
    path = tmp_path / "lance"
    svc = _seed(path, 30)
    plan = svc.reembed_plan()
    assert plan.texts == 90 and plan.tokens > 90
    assert svc.reembed_plan([USERS[0]]).texts == 30
    partial = svc.reembed(new, users=[USERS[0]])
    assert not partial.cut_over and partial.embedded == 30
    _exact_hit(svc, USERS[1], _texts(USERS[1], 30)[2])  # still the old model
    svc.close()
    dry = _cli("reembed", "--db", f"lancedb://{path}", "--embeddings",
               "tests.reembed.embedders:new", "--dry-run")  # fmt: skip
    out, err = dry.communicate(timeout=60)
    assert "90 texts" in out, err
    svc = LanceDBMemoryService(path, old)
    report = asyncio.run(svc.areembed(new))
    assert report.cut_over and report.resumed == 30 and report.embedded == 60
    _vectors_are(path, new)
    svc.close()
