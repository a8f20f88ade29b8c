"""MemoryStore batch throughput against LangGraph's InMemoryStore and PostgresStore.

The same seeded stream of mixed operations (50% get, 35% put, 15% query
search, limit 5) runs through `store.batch` in batches of `--batch` ops, on one
user and spread across 100 users, for:

* LangGraph `InMemoryStore` and `PostgresStore` (vector index over the same
  hashing embedder, the embedded test server from langmem_trpc.testing.postgres);
* `MemoryStore` over the in-memory, SQLite and PostgreSQL services.

Prints ops/s per store and scenario and each MemoryStore's ratio to the
LangGraph store of the same kind (in-memory vs InMemoryStore, SQLite and
PostgreSQL vs PostgresStore).

    python benchmarks/bench_store.py --ops 10000
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langgraph.store.base import BaseStore, GetOp, Op, PutOp, SearchOp

from langmem_trpc import MemoryStore
from langmem_trpc import open as open_store
from langmem_trpc.service.rules import Limits
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.testing.postgres import PostgresTestServer

WORDS = (
    "alice bob prefers dark mode tea coffee runs go production kubernetes paris cats chess "
    "sunday project zebra ships may database postgres vector memory editor theme deploy "
    "tuesday standup morning allergic peanuts build cache server office machine broken"
).split()
DIMS = 384


def stream(n_ops: int, n_users: int, seed: int = 7) -> list[Op]:
    rng = random.Random(seed)
    keys: list[tuple[tuple[str, str], str]] = []
    ops: list[Op] = []
    for _ in range(n_ops):
        roll = rng.random()
        ns = ("bench", f"u{rng.randrange(n_users)}")
        if roll < 0.35 or not keys:
            key = f"k{rng.randrange(max(1, n_ops // 4))}"
            text = " ".join(rng.choices(WORDS, k=8))
            ops.append(PutOp(ns, key, {"memory": text, "n": rng.randrange(100)}))
            keys.append((ns, key))
        elif roll < 0.85:
            ns, key = rng.choice(keys)
            ops.append(GetOp(ns, key))
        else:
            ops.append(SearchOp(ns, None, 5, 0, " ".join(rng.choices(WORDS, k=3))))
    return ops


def run(store: BaseStore, ops: list[Op], batch: int) -> float:
    start = time.perf_counter()
    for lo in range(0, len(ops), batch):
        store.batch(ops[lo : lo + batch])
    return len(ops) / (time.perf_counter() - start)


def _index() -> Any:
    return {"dims": DIMS, "embed": HashingEmbeddings(), "fields": ["memory"]}


@contextmanager
def stores(
    url: str, workdir: Path, tag: str, limits: Limits | None = None
) -> Iterator[dict[str, Callable[[], BaseStore]]]:
    from langgraph.store.memory import InMemoryStore
    from langgraph.store.postgres import PostgresStore

    limits = limits or Limits(capacity=None)
    opened: list[Any] = []

    def pg_store() -> BaseStore:
        cm = PostgresStore.from_conn_string(url, index=_index())
        store = cm.__enter__()
        store.setup()
        opened.append(cm)
        return store

    def ours(service: Any) -> BaseStore:
        opened.append(service)
        return MemoryStore(service)

    def on(store_url: str) -> Callable[[], BaseStore]:
        return lambda: ours(open_store(store_url, embeddings=HashingEmbeddings(), limits=limits))

    yield {
        "InMemoryStore": lambda: InMemoryStore(index=_index()),
        "MemoryStore/in-memory": on("memory://"),
        "MemoryStore/SQLite": on(f"sqlite://{workdir / f'{tag}.db'}"),
        "PostgresStore": pg_store,
        "MemoryStore/PostgreSQL": on(url),
    }
    for thing in opened:
        if hasattr(thing, "__exit__"):
            thing.__exit__(None, None, None)
        else:
            thing.close()


async def large_batch(store: BaseStore, n: int, m: int) -> tuple[float, list[str]]:
    """LangGraph's async large-batch test shape (`test_large_batches_async`: 6 ops per
    (m, i), all gathered at once); returns the seconds and the errors raised."""
    coros: list[Any] = []
    for j in range(m):
        ns = ("test", "foo", "bar", "baz", str(j % 2))
        for i in range(n):
            coros += [
                store.aput(ns, f"key{i}", value={"foo": "bar" + str(i)}),
                store.aget(ns, f"key{i}"),
                store.alist_namespaces(prefix=None, max_depth=j + 1),
                store.asearch(("test",)),
                store.aput(ns, f"key{i}", value={"foo": "bar" + str(i)}),
                store.adelete(ns, f"key{i}"),
            ]
    start = time.perf_counter()
    results = await asyncio.gather(*coros, return_exceptions=True)
    seconds = time.perf_counter() - start
    assert len(results) == 6 * n * m
    errors = [type(r).__name__ for r in results if isinstance(r, BaseException)]
    left = await store.asearch(("test",), limit=10)
    if left:
        errors.append(f"{len(left)} items left after their deletes")
    return seconds, errors


def scale(workdir: Path, n: int, runs: int = 20) -> None:
    """Index-bounded reads: list_namespaces and no-query search over 3 users x `n` items (SQLite)."""
    store = MemoryStore(
        open_store(f"sqlite://{workdir / 'scale.db'}", limits=Limits(capacity=None))
    )
    ops: list[Op] = [
        PutOp(("app", f"u{u}", f"s{i % 3}"), f"k{i}", {"memory": f"note {i} of user {u}"})
        for u in range(3)
        for i in range(n)
    ]
    for lo in range(0, len(ops), 500):
        store.batch(ops[lo : lo + 500])
    cases: dict[str, Callable[[], Any]] = {
        "list_namespaces(prefix=one user)": lambda: store.list_namespaces(prefix=("app", "u0")),
        "list_namespaces()": lambda: store.list_namespaces(),
        "search(one user, limit=10)": lambda: store.search(("app", "u0"), limit=10),
        "search(app-wide, limit=10)": lambda: store.search(("app",), limit=10),
    }
    for name, call in cases.items():
        call()
        start = time.perf_counter()
        for _ in range(runs):
            call()
        print(
            f"scale {n} items x 3 users  {name:<34} {(time.perf_counter() - start) / runs * 1e3:8.2f} ms"
        )
    store.service.close()


PEERS = {
    "MemoryStore/in-memory": "InMemoryStore",
    "MemoryStore/SQLite": "PostgresStore",
    "MemoryStore/PostgreSQL": "PostgresStore",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--only", default="", help="comma-separated store names")
    parser.add_argument(
        "--scale", type=int, default=0, help="also time index-bounded reads at N items per user"
    )
    parser.add_argument(
        "--large-n",
        type=int,
        default=0,
        help="also run LangGraph's test_large_batches_async shape (upstream: N=1000, 60,000 ops)",
    )
    args = parser.parse_args(argv)
    only = {s for s in args.only.split(",") if s}
    with PostgresTestServer() as server, tempfile.TemporaryDirectory() as tmp:
        if args.scale:
            scale(Path(tmp), args.scale)
        if args.large_n:
            url = server.create_database("bench_store_large")
            # the default capacity (1,000 per user): a delete that overtook its put shows
            with stores(url, Path(tmp), "large", Limits()) as factories:
                for name, factory in factories.items():
                    if not only or name in only:
                        seconds, errors = asyncio.run(large_batch(factory(), args.large_n, 10))
                        print(
                            f"large batch ({60 * args.large_n} ops)  {name:<24} {seconds:7.2f} s"
                            f"  errors: {len(errors)} {sorted(set(errors))[:3]}",
                            flush=True,
                        )
            server.drop_database(url)
        for n_users in (1, 100) if args.ops else ():
            ops = stream(args.ops, n_users)
            url = server.create_database(f"bench_store_{n_users}")
            rates: dict[str, float] = {}
            with stores(url, Path(tmp), f"u{n_users}") as factories:
                for name, factory in factories.items():
                    if only and name not in only:
                        continue
                    rates[name] = run(factory(), ops, args.batch)
                    print(f"{n_users:>3} users  {name:<24} {rates[name]:>9.0f} ops/s", flush=True)
            for name, peer in PEERS.items():
                if name in rates and peer in rates:
                    print(f"{n_users:>3} users  {name} / {peer}: {rates[name] / rates[peer]:.2f}x")
            server.drop_database(url)


if __name__ == "__main__":
    main()
