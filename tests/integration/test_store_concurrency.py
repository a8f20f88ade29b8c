"""MemoryStore under concurrency (issue #32.1-2): async ops on one key apply in the
order they were issued, on every backend; closing a SQLite service while async
calls still read waits for them instead of crashing the process.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from langmem_trpc import MemoryStore, UserKey
from langmem_trpc.errors import BackendError
from langmem_trpc.testing import HashingEmbeddings

NS = ("demo", "alice")


async def test_put_then_delete_of_one_key_applies_in_issue_order(backend_store: MemoryStore):
    for round_ in range(300):
        await asyncio.gather(
            backend_store.aput(NS, f"k{round_ % 7}", {"memory": f"note {round_}"}),
            backend_store.adelete(NS, f"k{round_ % 7}"),
        )
    assert await backend_store.asearch(NS, limit=10) == []
    assert backend_store.service.count(UserKey(*NS)) == 0


async def test_a_read_issued_after_a_put_sees_it(backend_store: MemoryStore):
    for round_ in range(100):
        _, got, _ = await asyncio.gather(
            backend_store.aput(NS, "k", {"memory": f"version {round_}"}),
            backend_store.aget(NS, "k"),
            backend_store.adelete(NS, "k"),
        )
        assert got is not None and got.value == {"memory": f"version {round_}"}


async def test_views_of_one_store_share_the_order(backend_store: MemoryStore):
    alice = backend_store.for_user(*NS)
    for round_ in range(100):
        await asyncio.gather(
            alice.aput(NS, "k", {"memory": f"note {round_}"}), backend_store.adelete(NS, "k")
        )
    assert backend_store.service.count(UserKey(*NS)) == 0


async def test_async_batches_run_in_the_callers_context_off_the_loop(
    backend_store: MemoryStore,
):
    import threading

    loop_thread = threading.get_ident()
    seen: list[int] = []
    real = backend_store.batch

    def spy(ops):  # type: ignore[no-untyped-def]
        seen.append(threading.get_ident())
        return real(ops)

    backend_store.batch = spy  # type: ignore[method-assign]
    await backend_store.aput(NS, "k", {"memory": "x"})
    assert seen and loop_thread not in seen


_CLOSE_WHILE_READING = textwrap.dedent(
    """
    import asyncio, sys
    from langmem_trpc import MemoryStore, UserKey
    from langmem_trpc.backends.sqlite import SQLiteMemoryService
    from langmem_trpc.errors import BackendError
    from langmem_trpc.testing import HashingEmbeddings

    path, rounds = sys.argv[1], int(sys.argv[2])
    user = UserKey("a", "u")
    seed = MemoryStore(SQLiteMemoryService(path, embeddings=HashingEmbeddings()))
    for i in range(300):
        seed.put(("a", "u"), f"k{i}", {"memory": f"fact {i} about tea and coffee {i * 7}"})
    seed.service.close()

    async def fail_soon():
        await asyncio.sleep(0.005)
        raise RuntimeError("a failed call")

    async def shut_down_after_a_failed_gather(svc):
        store = MemoryStore(svc)
        calls = [store.asearch(("a", "u"), query="tea coffee", limit=50) for _ in range(10)]
        calls += [svc.asearch(user, "tea coffee") for _ in range(20)]
        calls += [asyncio.to_thread(svc.read, user) for _ in range(20)]
        try:
            await asyncio.gather(*calls, fail_soon())
        except RuntimeError:
            pass
        svc.close()  # worker threads are still reading
        try:
            svc.read(user)
        except BackendError as exc:
            assert "closed" in str(exc), exc
        else:
            raise AssertionError("a closed service answered")

    for _ in range(rounds):
        svc = SQLiteMemoryService(path, embeddings=HashingEmbeddings())
        asyncio.run(shut_down_after_a_failed_gather(svc))
    print("survived")
    """
)


def test_closing_sqlite_while_async_calls_read_does_not_crash(tmp_path: Path):
    script = tmp_path / "close_while_reading.py"
    script.write_text(_CLOSE_WHILE_READING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "m.db"), "10"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # -11: SIGSEGV
    assert done.stdout.strip().endswith("survived")


def test_a_closed_sqlite_service_refuses_new_work_clearly(tmp_path: Path):
    from langmem_trpc.backends.sqlite import SQLiteMemoryService

    svc = SQLiteMemoryService(str(tmp_path / "m.db"), embeddings=HashingEmbeddings())
    svc.add(UserKey(*NS), "Alice likes tea")
    svc.close()
    svc.close()  # idempotent
    with pytest.raises(BackendError, match="closed"):
        svc.read(UserKey(*NS))
    with pytest.raises(BackendError, match="closed"):
        svc.add(UserKey(*NS), "Alice likes coffee")


def test_close_waits_for_a_transaction_in_flight(tmp_path: Path):
    import threading
    import time

    from langmem_trpc.backends.sqlite._connection import Database

    db = Database(tmp_path / "m.db")
    entered, release = threading.Event(), threading.Event()

    def slow(conn):  # type: ignore[no-untyped-def]
        entered.set()
        release.wait(5)
        return conn.execute("SELECT count(*) FROM langmem_migrations").fetchone()[0]

    result: list[int] = []
    reader = threading.Thread(target=lambda: result.append(db.read(slow)))
    reader.start()
    assert entered.wait(5)
    closer = threading.Thread(target=db.close)
    closer.start()
    time.sleep(0.2)
    assert closer.is_alive()  # waiting for the read, not closing under it
    with pytest.raises(BackendError, match="closed"):
        db.read(lambda conn: None)  # new work is refused at once
    release.set()
    reader.join(5)
    closer.join(5)
    assert not closer.is_alive() and result and result[0] >= 1


async def test_langgraphs_large_batch_shape_runs_without_an_error(backend_store: MemoryStore):
    """LangGraph's `test_large_batches_async` shape at a twentieth of its size (3,000 ops,
    all gathered; the full 60,000 run is `benchmarks/bench_store.py --large-n 1000`)."""
    calls = []
    for m in range(10):
        ns = ("test", "foo", "bar", "baz", str(m % 2))
        for i in range(50):
            calls += [
                backend_store.aput(ns, f"key{i}", value={"foo": f"bar{i}"}),
                backend_store.aget(ns, f"key{i}"),
                backend_store.alist_namespaces(prefix=None, max_depth=m + 1),
                backend_store.asearch(("test",)),
                backend_store.aput(ns, f"key{i}", value={"foo": f"bar{i}"}),
                backend_store.adelete(ns, f"key{i}"),
            ]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert all(got is not None for got in results[1::6])  # each get sees its put
    assert await backend_store.asearch(("test",)) == []
