"""Re-embedding speed on SQLite, PostgreSQL and LanceDB (issue 27): rows/s, search p50 during vs before.

N memories over 100 users, written with an "old" 384-dimension model, then
`svc.reembed()` to a "new" 768-dimension model while a second thread searches
(hybrid) the same file through the same service. Both models are lookups of
vectors computed before any timing (`LookupEmbeddings`), so the figures are the
store's cost, not a model's. Per run: the re-embed rate (memories/s, fill and
cutover), the fill's seconds (to the last batch's progress report) and the rest's
(PostgreSQL: the shadow's index build and the cutover), and search p50 before the re-embed and during
it (the same service, same queries, every user's caches warmed by one search
first; the re-embed's shadow writes leave them valid until the cutover). Every
figure is the median over `--runs`.

PostgreSQL runs on a throwaway embedded server (`PostgresTestServer`), or on
`--pg-url`; its re-embed includes the shadow's CREATE INDEX CONCURRENTLY.

Usage:
    python benchmarks/bench_reembed.py                  # 100,000 memories, 3 runs
    python benchmarks/bench_reembed.py --n 20000 --runs 3 --backend postgres
    python benchmarks/bench_reembed.py --n 10000 --runs 3 --backend lancedb
    # PostgreSQL, seeded once, then runs of two checkouts on the same clone (docs/operating.md):
    python benchmarks/bench_reembed.py --backend postgres --pg-url URL --n 20000 --seed-only seed
    python benchmarks/bench_reembed.py --backend postgres --pg-url URL --n 20000 --template seed
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from langmem_trpc import Limits, SearchOptions, UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.service.protocol import MemoryService

USERS = [UserKey("bench", f"user{i}") for i in range(100)]


class LookupEmbeddings(Embeddings):
    """Precomputed unit vectors by text; any other text (the identity probe, a query
    that is not a memory) gets a vector seeded by its hash."""

    def __init__(self, texts: list[str], dims: int, seed: int) -> None:
        self.dims, self.seed = dims, seed
        rng = np.random.default_rng(seed)
        matrix = rng.standard_normal((len(texts), dims)).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        self._vectors = dict(zip(texts, matrix.tolist(), strict=True))

    def _one(self, text: str) -> list[float]:
        found = self._vectors.get(text)
        if found is not None:
            return found
        digest = hashlib.blake2b(f"{self.seed}:{text}".encode(), digest_size=8).digest()
        rng = np.random.default_rng(int.from_bytes(digest, "little"))
        vector = rng.standard_normal(self.dims)
        return list(vector / np.linalg.norm(vector))

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def _texts(n: int) -> list[str]:
    words = "tea coffee hiking paris dentist invoice garden piano sister budget".split()
    return [f"memory {i}: {words[i % 10]} {words[(i * 7) % 10]} {i * 31 % 997}" for i in range(n)]


def _p50(latencies: list[float]) -> float:
    return statistics.median(latencies) * 1000 if latencies else float("nan")


def _search_loop(svc: Any, texts: list[str], stop: threading.Event, count: int = 0) -> list[float]:
    """Hybrid searches round the users until `stop` (or `count` searches, when given)."""
    latencies: list[float] = []
    i = 0
    while not stop.is_set() and (not count or i < count):
        user = USERS[i % len(USERS)]
        started = time.perf_counter()
        svc.search(user, texts[(i * 101) % len(texts)], SearchOptions(max_results=10))
        latencies.append(time.perf_counter() - started)
        i += 1
    return latencies


def _open(target: str, embeddings: Embeddings) -> Any:
    """A SQLite file path, a PostgreSQL URL / libpq `key=value` string, or `lancedb://DIR`."""
    if target.startswith("lancedb://"):
        from langmem_trpc.backends.lancedb import LanceDBMemoryService

        path = target.removeprefix("lancedb://")
        return LanceDBMemoryService(path, embeddings, limits=Limits(capacity=None))
    if target.startswith(("postgresql://", "postgres://")) or "dbname=" in target:
        from langmem_trpc.backends.postgres import PostgresMemoryService

        svc: MemoryService = PostgresMemoryService(target, embeddings, limits=Limits(capacity=None))
        svc.setup()
        return svc
    return SQLiteMemoryService(target, embeddings, limits=Limits(capacity=None))


def seed(svc: Any, texts: list[str]) -> None:
    """`texts` spread evenly over the users, written with `add_many`."""
    per_user = len(texts) // len(USERS)
    for k, user in enumerate(USERS):
        svc.add_many(user, texts[k * per_user : (k + 1) * per_user])


def one_run(n: int, batch: int, target: str, seeded: bool = False) -> dict[str, float]:
    texts = _texts(n)
    old, new = LookupEmbeddings(texts, 384, 1), LookupEmbeddings(texts, 768, 2)
    svc = _open(target, old)
    per_user = n // len(USERS)
    if not seeded:
        print(f"  {type(svc).__name__}: seeding {n} memories", flush=True)
        seed(svc, texts)
    _search_loop(svc, texts, threading.Event(), len(USERS))  # warm: each user's caches
    before = _search_loop(svc, texts, threading.Event(), 3 * len(USERS))
    during: list[float] = []
    stop = threading.Event()
    searcher = threading.Thread(target=lambda: during.extend(_search_loop(svc, texts, stop)))
    searcher.start()
    filled: list[float] = []
    started = time.perf_counter()
    report = svc.reembed(
        new, batch_size=batch, progress=lambda _: filled.append(time.perf_counter())
    )
    seconds = time.perf_counter() - started
    stop.set()
    searcher.join()
    svc.close()
    assert report.cut_over and report.embedded == per_user * len(USERS)
    return {
        "rows_per_s": report.embedded / seconds,
        "seconds": seconds,
        "fill_s": filled[-1] - started,
        "index_and_cutover_s": started + seconds - filled[-1],
        "p50_before_ms": _p50(before),
        "p50_during_ms": _p50(during),
        "searches_during": float(len(during)),
    }


def _postgres_runs(args: argparse.Namespace) -> list[dict[str, float]]:
    """Each run on a fresh database: cloned from `--template` (CREATE DATABASE ...
    TEMPLATE, seconds instead of minutes of seeding), else seeded."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from langmem_trpc.testing.postgres import PostgresTestServer, database_url

    results = []
    with PostgresTestServer(args.pg_url) as server:
        if args.seed_only:
            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{args.seed_only}"')
            url = database_url(server.url, args.seed_only)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            texts = _texts(args.n)
            svc = _open(url, LookupEmbeddings(texts, 384, 1))
            seed(svc, texts)
            svc.close()
            print(f"seeded {args.n} memories into {args.seed_only}")
            return []
        for run in range(args.runs):
            url = server.create_database("bench_reembed")
            if args.template:
                server.drop_database(url)
                name = str(conninfo_to_dict(url)["dbname"])
                with psycopg.connect(server.url, autocommit=True) as conn:
                    conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{args.template}"')
            try:
                results.append(one_run(args.n, args.batch, url, seeded=bool(args.template)))
            finally:
                server.drop_database(url)
            print(f"run {run + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in results[-1].items()))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "lancedb"], default="sqlite")
    parser.add_argument("--pg-url", help="a server to create throwaway databases on")
    parser.add_argument("--seed-only", metavar="DB", help="PostgreSQL: seed database DB, exit")
    parser.add_argument("--template", metavar="DB", help="PostgreSQL: clone each run from DB")
    args = parser.parse_args()
    results = []
    if args.backend == "postgres":
        results = _postgres_runs(args)
        if not results:
            return
    for run in range(args.runs if args.backend != "postgres" else 0):
        with tempfile.TemporaryDirectory() as folder:
            target = str(Path(folder) / "reembed.db")
            if args.backend == "lancedb":
                target = f"lancedb://{Path(folder) / 'reembed'}"
            results.append(one_run(args.n, args.batch, target))
        print(f"run {run + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in results[-1].items()))
    print(f"{args.backend}, {args.n} memories, batch {args.batch}, median of {args.runs} runs:")
    for key in results[0]:
        print(f"  {key}: {statistics.median(r[key] for r in results):.1f}")


if __name__ == "__main__":
    main()
