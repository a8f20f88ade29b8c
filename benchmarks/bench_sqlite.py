"""Speed of the embedded SQLite backend (issue 2, "Speed"). Prints figures; not a test.

One user, synthetic memories (Zipf-distributed words), 384-dimension random
unit vectors computed before any timing (a lookup `Embeddings`, so embedding
time is excluded). Measures, in one run:

* batch add throughput (`add_many`, one transaction per batch; text, FTS,
  history and fingerprint included) and single `add()` throughput;
* search latency p50/p95: hybrid, keyword leg alone (keyword-only service),
  vector leg alone (hybrid=False with an embedder);
* LangGraph `InMemoryStore` vector search on the same data and vectors;
* keyword top-10 agreement with the in-memory reference scorer (the FTS5
  candidate cut-off is the one approximation);
* 100,000 memories in a child process: added resident memory against the
  raw float32 matrix, and hybrid search latency.

Every figure is the median over `--runs` runs.

Usage:
    .venv/bin/python benchmarks/bench_sqlite.py            # full run (a few minutes)
    .venv/bin/python benchmarks/bench_sqlite.py --quick    # smaller smoke run
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from langmem_trpc import InMemoryMemoryService, Limits, SearchOptions, UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService

USER = UserKey("bench", "alice")
UNLIMITED = Limits(capacity=None)


class LookupEmbeddings(Embeddings):
    """Vectors computed before timing; embedding costs a dict lookup."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.table[t] for t in texts]  # type: ignore[misc]

    def embed_query(self, text: str) -> list[float]:
        return self.table[text]  # type: ignore[return-value]


def make_vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters, size=int(rng.integers(3, 10)))))
    return sorted(words)


def make_texts(n: int, vocab: list[str], rng: np.random.Generator, prefix: str) -> list[str]:
    weights = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    weights /= weights.sum()
    lengths = rng.integers(6, 16, size=n)
    picks = rng.choice(len(vocab), size=int(lengths.sum()), p=weights)
    texts, at = [], 0
    for i, length in enumerate(lengths):
        words = [vocab[j] for j in picks[at : at + length]]
        at += length
        texts.append(f"{prefix}{i} " + " ".join(words))
    return texts


def make_queries(n: int, vocab: list[str], rng: np.random.Generator) -> list[str]:
    weights = 1.0 / np.arange(1, len(vocab) + 1) ** 0.8
    weights /= weights.sum()
    return [
        " ".join(vocab[j] for j in rng.choice(len(vocab), size=int(rng.integers(2, 5)), p=weights))
        for _ in range(n)
    ]


def unit_vectors(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    matrix = rng.standard_normal((n, dim)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def time_calls(call: Callable[[str], Any], queries: list[str]) -> list[float]:
    out = []
    for query in queries:
        start = time.perf_counter()
        call(query)
        out.append((time.perf_counter() - start) * 1000)
    return out


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- 10,000 memories -------------------------------------------------------------


def bench_batch_add(texts: list[str], embeddings: Embeddings, runs: int, batch: int) -> float:
    rates = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            svc = SQLiteMemoryService(Path(tmp) / "b.db", embeddings, limits=UNLIMITED)
            start = time.perf_counter()
            for i in range(0, len(texts), batch):
                svc.add_many(USER, texts[i : i + batch])
            rates.append(len(texts) / (time.perf_counter() - start))
            svc.close()
    return statistics.median(rates)


def bench_single_add(texts: list[str], embeddings: Embeddings, runs: int) -> float:
    rates = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            svc = SQLiteMemoryService(Path(tmp) / "s.db", embeddings, limits=UNLIMITED)
            start = time.perf_counter()
            for text in texts:
                svc.add(USER, text)
            rates.append(len(texts) / (time.perf_counter() - start))
            svc.close()
    return statistics.median(rates)


def bench_searches(
    path: Path, embeddings: Embeddings, queries: list[str], runs: int
) -> dict[str, tuple[float, float]]:
    hybrid_svc = SQLiteMemoryService(path, embeddings, limits=UNLIMITED)
    keyword_svc = SQLiteMemoryService(path, limits=UNLIMITED)
    start = time.perf_counter()
    hybrid_svc.search(USER, queries[0], SearchOptions(hybrid=True))
    cold = (time.perf_counter() - start) * 1000
    cases = {
        "hybrid": lambda q: hybrid_svc.search(USER, q, SearchOptions(hybrid=True)),
        "keyword leg": lambda q: keyword_svc.search(USER, q),
        "vector leg": lambda q: hybrid_svc.search(USER, q),
    }
    figures: dict[str, tuple[float, float]] = {}
    for name, call in cases.items():
        call(queries[0])
        p50s, p95s = [], []
        for _ in range(runs):
            times = time_calls(call, queries)
            p50s.append(percentile(times, 50))
            p95s.append(percentile(times, 95))
        figures[name] = (statistics.median(p50s), statistics.median(p95s))
    figures["cold first hybrid search (loads the matrix)"] = (cold, cold)
    hybrid_svc.close()
    keyword_svc.close()
    return figures


def bench_inmemory_store(
    texts: list[str], embeddings: Embeddings, dim: int, queries: list[str], runs: int
) -> tuple[float, float, float]:
    from langgraph.store.memory import InMemoryStore

    store = InMemoryStore(index={"dims": dim, "embed": embeddings, "fields": ["text"]})
    namespace = ("memories", USER.app_name, USER.user_id)
    start = time.perf_counter()
    for i, text in enumerate(texts):
        store.put(namespace, f"m{i}", {"text": text})
    put_rate = len(texts) / (time.perf_counter() - start)
    store.search(namespace, query=queries[0], limit=10)
    p50s, p95s = [], []
    for _ in range(runs):
        times = time_calls(lambda q: store.search(namespace, query=q, limit=10), queries)
        p50s.append(percentile(times, 50))
        p95s.append(percentile(times, 95))
    return statistics.median(p50s), statistics.median(p95s), put_rate


def keyword_agreement(path: Path, texts: list[str], queries: list[str]) -> tuple[float, float]:
    """Share of queries whose keyword top-10 (ids and order) equals the reference's."""
    reference = InMemoryMemoryService(limits=UNLIMITED)
    svc = SQLiteMemoryService(path, limits=UNLIMITED)
    for text in texts:
        reference.add(USER, text)
    exact = same_set = 0
    for query in queries:
        want = [e.text for e in reference.search(USER, query)]
        got = [e.text for e in svc.search(USER, query)]
        exact += want == got
        same_set += set(want) == set(got)
    svc.close()
    return exact / len(queries), same_set / len(queries)


# -- 100,000 memories, in a child process (clean resident-memory baseline) ---------


def _big_child(n: int, dim: int, queries: list[str], runs: int, out: Any) -> None:
    rng = np.random.default_rng(42)
    vocab = make_vocabulary(5000, rng)
    query_vectors = unit_vectors(len(queries), dim, rng)
    query_table = dict(zip(queries, query_vectors, strict=True))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.db"
        chunk, elapsed = 5000, 0.0
        gc.collect()
        base = rss_mb()
        svc = SQLiteMemoryService(path, LookupEmbeddings({}), limits=UNLIMITED)
        for start in range(0, n, chunk):
            texts = make_texts(min(chunk, n - start), vocab, rng, f"m{start}-")
            table = dict(zip(texts, unit_vectors(len(texts), dim, rng), strict=True))
            svc._embeddings = LookupEmbeddings(table)  # precomputed: not timed
            began = time.perf_counter()
            svc.add_many(USER, texts)
            elapsed += time.perf_counter() - began
            del texts, table
        svc._embeddings = LookupEmbeddings(query_table)
        gc.collect()
        after_load = rss_mb()
        svc.search(USER, queries[0], SearchOptions(hybrid=True))
        gc.collect()
        after_search = rss_mb()
        p50s = []
        for _ in range(runs):
            times = time_calls(lambda q: svc.search(USER, q, SearchOptions(hybrid=True)), queries)
            p50s.append(percentile(times, 50))
        out.put(
            {
                "rate": n / elapsed,
                "added_rss_mb": after_search - base,
                "rss_after_load_mb": after_load - base,
                "matrix_mb": n * dim * 4 / 2**20,
                "hybrid_p50_ms": statistics.median(p50s),
                "file_mb": path.stat().st_size / 2**20,
            }
        )
        svc.close()


def _store_big_child(n: int, dim: int, out: Any) -> None:
    from langgraph.store.memory import InMemoryStore

    rng = np.random.default_rng(43)
    vocab = make_vocabulary(5000, rng)
    gc.collect()
    base = rss_mb()
    table: dict[str, np.ndarray] = {}
    store = InMemoryStore(index={"dims": dim, "embed": LookupEmbeddings(table), "fields": ["text"]})
    namespace = ("memories", USER.app_name, USER.user_id)
    for start in range(0, n, 5000):
        texts = make_texts(min(5000, n - start), vocab, rng, f"m{start}-")
        table.clear()
        table.update(zip(texts, unit_vectors(len(texts), dim, rng), strict=True))
        for i, text in enumerate(texts):
            store.put(namespace, f"m{start + i}", {"text": text})
    table.clear()
    gc.collect()
    out.put({"added_rss_mb": rss_mb() - base})


def run_child(target: Callable[..., None], *args: Any) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=target, args=(*args, queue))
    process.start()
    result: dict[str, float] = queue.get()
    process.join()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--big", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--store-queries", type=int, default=30)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1000, help="memories per add_many call")
    parser.add_argument("--store-big", action="store_true", help="also InMemoryStore at --big")
    parser.add_argument("--quick", action="store_true", help="n=2000, big=20000, runs=3")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.big, args.runs, args.queries = 2000, 20_000, 3, 100

    rng = np.random.default_rng(7)
    vocab = make_vocabulary(5000, rng)
    texts = make_texts(args.n, vocab, rng, "m")
    queries = list(dict.fromkeys(make_queries(args.queries, vocab, rng)))
    table = dict(zip(texts, unit_vectors(len(texts), args.dim, rng), strict=True))
    table.update(zip(queries, unit_vectors(len(queries), args.dim, rng), strict=True))
    embeddings = LookupEmbeddings(table)
    print(f"python {sys.version.split()[0]}, sqlite {__import__('sqlite3').sqlite_version}")
    print(f"{args.n} memories, one user, dim {args.dim}, {len(queries)} queries, "
          f"medians of {args.runs} runs\n")

    rate = bench_batch_add(texts, embeddings, args.runs, args.batch)
    print(f"batch add (add_many, {args.batch}/transaction): {rate:,.0f} memories/s"
          f"  [target >= 10,000]")
    single = bench_single_add(texts[:2000], embeddings, max(1, args.runs // 2))
    print(f"single add() (one transaction each, 2,000):   {single:,.0f} memories/s")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        loader = SQLiteMemoryService(path, embeddings, limits=UNLIMITED)
        for i in range(0, len(texts), args.batch):
            loader.add_many(USER, texts[i : i + args.batch])
        loader.close()
        figures = bench_searches(path, embeddings, queries, args.runs)
        print()
        for name, (p50, p95) in figures.items():
            if name.startswith("cold"):
                print(f"{name}: {p50:.1f} ms")
            else:
                print(f"SQLite {name:<12} p50 {p50:6.2f} ms   p95 {p95:6.2f} ms")
        exact, same = keyword_agreement(path, texts, queries[:50])
        print(f"keyword top-10 vs in-memory reference: identical {exact:.0%}, same set {same:.0%}")

    store_p50, store_p95, put_rate = bench_inmemory_store(
        texts, embeddings, args.dim, queries[: args.store_queries], max(1, args.runs // 2)
    )
    hybrid_p50 = figures["hybrid"][0]
    vector_p50 = figures["vector leg"][0]
    print(f"\nLangGraph InMemoryStore vector search p50 {store_p50:.2f} ms  p95 {store_p95:.2f} ms"
          f"  (put {put_rate:,.0f}/s)")
    print(f"ratio InMemoryStore / SQLite hybrid: {store_p50 / hybrid_p50:.0f}x  [target >= 50x]")
    print(f"ratio InMemoryStore / SQLite vector leg: {store_p50 / vector_p50:.0f}x")

    big = run_child(_big_child, args.big, args.dim, queries[:100], max(1, args.runs // 2))
    print(f"\n{args.big:,} memories (child process):")
    print(f"  batch add {big['rate']:,.0f} memories/s; file {big['file_mb']:.0f} MB")
    print(f"  added resident memory {big['added_rss_mb']:.0f} MB after the first search "
          f"({big['rss_after_load_mb']:.0f} MB before it); raw float32 matrix "
          f"{big['matrix_mb']:.0f} MB; ratio {big['added_rss_mb'] / big['matrix_mb']:.2f}x"
          "  [target < 2x]")
    print(f"  hybrid search p50 {big['hybrid_p50_ms']:.2f} ms")
    if args.store_big:
        store_big = run_child(_store_big_child, args.big, args.dim)
        print(f"  InMemoryStore added resident memory {store_big['added_rss_mb']:.0f} MB")


if __name__ == "__main__":
    main()
