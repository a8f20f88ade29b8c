"""Speed of the embedded SQLite backend (issue 2, "Speed"). Prints figures; not a test.

One user, synthetic memories (Zipf-distributed words), 384-dimension random
unit vectors computed before any timing (a lookup `Embeddings`, so embedding
time is excluded). Measures, in one run:

* batch add throughput (`add_many`, one transaction per batch; text, FTS,
  history and fingerprint included) and single `add()` throughput, wall and
  CPU, on a file and on `:memory:` (2,000 memories);
* search latency p50/p95: hybrid, keyword leg alone (keyword-only service),
  vector leg alone (hybrid=False with an embedder);
* LangGraph `InMemoryStore` vector search on the same data and vectors;
* keyword top-10 agreement with the in-memory reference scorer (the FTS5
  candidate cut-off is the one approximation);
* LanceDB (`LanceDBMemoryService`) on the same memories, vectors and queries:
  batch and single add throughput, hybrid / keyword / vector search p50, the
  cold first search (the user's state loaded from the table) and its keyword
  top-10 agreement with the reference (`--no-lancedb` skips it);
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
import os
import shutil
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
    """Vectors computed before timing; embedding costs a dict lookup.

    The vectors are lists of floats, as real LangChain embedders return them
    (InMemoryStore keeps what the embedder returns, so this matters for it).
    """

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        vector = self.table.get(text)
        if vector is None:  # the embedder identity probe: any fixed vector of the size
            size = len(next(iter(self.table.values())))
            vector = [1.0] + [0.0] * (size - 1)
        return vector


def vector_table(texts: list[str], dim: int, rng: np.random.Generator) -> dict[str, list[float]]:
    return dict(zip(texts, unit_vectors(len(texts), dim, rng).tolist(), strict=True))


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


def time_calls(call: Callable[[str], Any], queries: list[str]) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU (this thread) milliseconds per call.

    On a shared, loaded host the wall clock includes waiting for a core; the
    CPU time is what the call itself costs.
    """
    wall, cpu = [], []
    for query in queries:
        start, start_cpu = time.perf_counter(), time.thread_time()
        call(query)
        cpu.append((time.thread_time() - start_cpu) * 1000)
        wall.append((time.perf_counter() - start) * 1000)
    return wall, cpu


def latency(call: Callable[[str], Any], queries: list[str], runs: int) -> dict[str, float]:
    """Medians over runs of p50/p95 wall time and p50 CPU time."""
    p50, p95, cpu50 = [], [], []
    for _ in range(runs):
        wall, cpu = time_calls(call, queries)
        p50.append(percentile(wall, 50))
        p95.append(percentile(wall, 95))
        cpu50.append(percentile(cpu, 50))
    return {
        "p50": statistics.median(p50),
        "p95": statistics.median(p95),
        "cpu50": statistics.median(cpu50),
    }


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- 10,000 memories -------------------------------------------------------------


def bench_adds(
    texts: list[str], embeddings: Embeddings, runs: int, batch: int | None, memory: bool = False
) -> tuple[float, float]:
    """(wall, CPU) memories per second: `add_many` in batches of `batch`, or one `add()`
    each (`batch` None), into a fresh file (or `:memory:`); medians over `runs`.
    CPU is the process's, so it excludes waiting for a core on a loaded host."""
    wall, cpu = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            svc = SQLiteMemoryService(
                ":memory:" if memory else Path(tmp) / "b.db", embeddings, limits=UNLIMITED
            )
            start, start_cpu = time.perf_counter(), time.process_time()
            if batch is None:
                for text in texts:
                    svc.add(USER, text)
            else:
                for i in range(0, len(texts), batch):
                    svc.add_many(USER, texts[i : i + batch])
            cpu.append(len(texts) / (time.process_time() - start_cpu))
            wall.append(len(texts) / (time.perf_counter() - start))
            svc.close()
    return statistics.median(wall), statistics.median(cpu)


def bench_searches(
    path: Path, embeddings: Embeddings, queries: list[str], runs: int
) -> dict[str, dict[str, float]]:
    hybrid_svc = SQLiteMemoryService(path, embeddings, limits=UNLIMITED)
    keyword_svc = SQLiteMemoryService(path, limits=UNLIMITED)
    start = time.perf_counter()
    hybrid_svc.search(USER, queries[0], SearchOptions(hybrid=True))
    cold = (time.perf_counter() - start) * 1000
    cases = {
        "hybrid": lambda q: hybrid_svc.search(USER, q, SearchOptions(hybrid=True)),
        "keyword leg": lambda q: keyword_svc.search(USER, q),
        "vector leg": lambda q: hybrid_svc.search(USER, q, SearchOptions(hybrid=False)),
    }
    figures: dict[str, dict[str, float]] = {}
    for name, call in cases.items():
        call(queries[0])
        figures[name] = latency(call, queries, runs)
    figures["cold"] = {"p50": cold}
    hybrid_svc.close()
    keyword_svc.close()
    return figures


def bench_search_after_write(
    path: Path, embeddings: Embeddings, extra: list[str], queries: list[str]
) -> tuple[float, float]:
    """First hybrid search after an own `add_many` of one memory (the cached matrix is
    extended), and after the cache is dropped (a full reload, as after another
    process's write): medians over the extra texts."""
    svc = SQLiteMemoryService(path, embeddings, limits=UNLIMITED)
    svc.search(USER, queries[0])
    extended, reloaded = [], []
    for i, text in enumerate(extra):
        svc.add_many(USER, [text])
        start = time.perf_counter()
        svc.search(USER, queries[i % len(queries)])
        extended.append((time.perf_counter() - start) * 1000)
        svc._caches.clear()
        start = time.perf_counter()
        svc.search(USER, queries[(i + 1) % len(queries)])
        reloaded.append((time.perf_counter() - start) * 1000)
    svc.close()
    return statistics.median(extended), statistics.median(reloaded)


def bench_inmemory_store(
    texts: list[str], embeddings: Embeddings, dim: int, queries: list[str], runs: int
) -> tuple[dict[str, float], float]:
    from langgraph.store.memory import InMemoryStore

    store = InMemoryStore(index={"dims": dim, "embed": embeddings, "fields": ["text"]})
    namespace = ("memories", USER.app_name, USER.user_id)
    start = time.perf_counter()
    for i, text in enumerate(texts):
        store.put(namespace, f"m{i}", {"text": text})
    put_rate = len(texts) / (time.perf_counter() - start)
    store.search(namespace, query=queries[0], limit=10)
    figures = latency(lambda q: store.search(namespace, query=q, limit=10), queries, runs)
    return figures, put_rate


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


# -- LanceDB, the same memories and queries, in the same run ---------------------


def bench_lancedb(
    texts: list[str], embeddings: Embeddings, queries: list[str], runs: int, batch: int, dim: int
) -> dict[str, Any]:
    """Batch and single add throughput, search p50/p95, keyword agreement (LanceDB)."""
    from langmem_trpc.backends.lancedb import LanceDBMemoryService

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        svc = LanceDBMemoryService(Path(tmp) / "single", embeddings, limits=UNLIMITED, dims=dim)
        start = time.perf_counter()
        for text in texts[:2000]:
            svc.add(USER, text)
        out["single"] = 2000 / (time.perf_counter() - start)
        svc.close()
        path = Path(tmp) / "bench"
        svc = LanceDBMemoryService(path, embeddings, limits=UNLIMITED, dims=dim)
        start = time.perf_counter()
        for i in range(0, len(texts), batch):
            svc.add_many(USER, texts[i : i + batch])
        out["batch"] = len(texts) / (time.perf_counter() - start)
        copy = Path(tmp) / "keyword"  # a second service on `path` is refused (its lock)
        shutil.copytree(path, copy)
        keyword_svc = LanceDBMemoryService(copy, limits=UNLIMITED)
        start = time.perf_counter()
        keyword_svc.search(USER, queries[0])  # loads the user's state from the table
        out["cold"] = (time.perf_counter() - start) * 1000
        cases = {
            "hybrid": lambda q: svc.search(USER, q, SearchOptions(hybrid=True)),
            "keyword leg": lambda q: keyword_svc.search(USER, q),
            "vector leg": lambda q: svc.search(USER, q, SearchOptions(hybrid=False)),
        }
        for name, call in cases.items():
            call(queries[0])
            out[name] = latency(call, queries, runs)
        reference = InMemoryMemoryService(limits=UNLIMITED)
        for text in texts:
            reference.add(USER, text)
        same = [
            [e.text for e in reference.search(USER, q)]
            == [e.text for e in keyword_svc.search(USER, q)]
            for q in queries[:50]
        ]
        out["exact"] = sum(same) / len(same)
        svc.close()
        keyword_svc.close()
    return out


def print_lancedb(
    lance: dict[str, Any], sqlite: dict[str, dict[str, float]], rates: tuple[float, float]
) -> None:
    print(
        f"\nLanceDB batch add (add_many, one table version per call): {lance['batch']:,.0f} "
        f"memories/s (SQLite {rates[0]:,.0f}); single add() {lance['single']:,.0f}/s "
        f"(SQLite {rates[1]:,.0f})"
    )
    for name in ("hybrid", "keyword leg", "vector leg"):
        f, base = lance[name], sqlite[name]
        print(
            f"LanceDB {name:<12} p50 {f['p50']:6.2f} ms   p95 {f['p95']:6.2f} ms"
            f"   (CPU p50 {f['cpu50']:5.2f} ms; SQLite p50 {base['p50']:.2f} ms)"
        )
    print(f"LanceDB cold first search (loads the user's state): {lance['cold']:.1f} ms")
    print(
        f"LanceDB keyword top-10 vs in-memory reference (50 queries): identical {lance['exact']:.0%}"
    )


# -- 100,000 memories, in a child process (clean resident-memory baseline) ---------


def _big_child(n: int, dim: int, queries: list[str], runs: int, out: Any) -> None:
    rng = np.random.default_rng(42)
    vocab = make_vocabulary(5000, rng)
    query_table = vector_table(queries, dim, rng)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.db"
        chunk, elapsed = 5000, 0.0
        gc.collect()
        base = rss_mb()
        svc = SQLiteMemoryService(path, LookupEmbeddings({}), limits=UNLIMITED)
        for start in range(0, n, chunk):
            texts = make_texts(min(chunk, n - start), vocab, rng, f"m{start}-")
            svc._embeddings = LookupEmbeddings(vector_table(texts, dim, rng))  # not timed
            began = time.perf_counter()
            svc.add_many(USER, texts)
            elapsed += time.perf_counter() - began
            del texts
        svc._embeddings = LookupEmbeddings(query_table)
        gc.collect()
        after_load = rss_mb()
        svc.search(USER, queries[0], SearchOptions(hybrid=True))
        gc.collect()
        after_search = rss_mb()
        hybrid = latency(lambda q: svc.search(USER, q, SearchOptions(hybrid=True)), queries, runs)
        gc.collect()
        after_warm = rss_mb()  # the keyword postings are built by now
        out.put(
            {
                "rate": n / elapsed,
                "added_rss_mb": after_search - base,
                "warm_rss_mb": after_warm - base,
                "rss_after_load_mb": after_load - base,
                "matrix_mb": n * dim * 4 / 2**20,
                "hybrid_p50_ms": hybrid["p50"],
                "hybrid_cpu50_ms": hybrid["cpu50"],
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
    table: dict[str, list[float]] = {}
    store = InMemoryStore(index={"dims": dim, "embed": LookupEmbeddings(table), "fields": ["text"]})
    namespace = ("memories", USER.app_name, USER.user_id)
    for start in range(0, n, 5000):
        texts = make_texts(min(5000, n - start), vocab, rng, f"m{start}-")
        table.clear()
        table.update(vector_table(texts, dim, rng))
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
    parser.add_argument("--no-lancedb", action="store_true", help="skip the LanceDB rows")
    parser.add_argument("--no-big", action="store_true", help="skip the --big child process")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.big, args.runs, args.queries = 2000, 20_000, 3, 100

    rng = np.random.default_rng(7)
    vocab = make_vocabulary(5000, rng)
    texts = make_texts(args.n, vocab, rng, "m")
    queries = list(dict.fromkeys(make_queries(args.queries, vocab, rng)))
    table = vector_table(texts, args.dim, rng)
    table.update(vector_table(queries, args.dim, rng))
    extra = make_texts(5, vocab, rng, "extra")
    table.update(vector_table(extra, args.dim, rng))
    embeddings = LookupEmbeddings(table)
    print(
        f"python {sys.version.split()[0]}, sqlite {__import__('sqlite3').sqlite_version}, "
        f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f} at start"
    )
    print(
        f"{args.n} memories, one user, dim {args.dim}, {len(queries)} queries, "
        f"medians of {args.runs} runs\n"
    )

    rate, rate_cpu = bench_adds(texts, embeddings, args.runs, args.batch)
    print(
        f"batch add (add_many, {args.batch}/transaction): {rate:,.0f} memories/s"
        f" (CPU {rate_cpu:,.0f}/s)  [target >= 10,000]"
    )
    single_runs = max(1, args.runs // 2)
    single, single_cpu = bench_adds(texts[:2000], embeddings, single_runs, None)
    print(
        f"single add() (one transaction each, 2,000):   {single:,.0f} memories/s"
        f" (CPU {single_cpu:,.0f}/s)"
    )
    for label, batch in (("batch add", args.batch), ("single add()", None)):
        wall, cpu = bench_adds(texts[:2000], embeddings, args.runs, batch, memory=True)
        print(f":memory: {label} (2,000): {wall:,.0f} memories/s (CPU {cpu:,.0f}/s)")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        loader = SQLiteMemoryService(path, embeddings, limits=UNLIMITED)
        for i in range(0, len(texts), args.batch):
            loader.add_many(USER, texts[i : i + args.batch])
        loader.close()
        figures = bench_searches(path, embeddings, queries, args.runs)
        print()
        for name in ("hybrid", "keyword leg", "vector leg"):
            f = figures[name]
            print(
                f"SQLite {name:<12} p50 {f['p50']:6.2f} ms   p95 {f['p95']:6.2f} ms"
                f"   (CPU p50 {f['cpu50']:5.2f} ms)"
            )
        print(f"cold first hybrid search (loads the matrix): {figures['cold']['p50']:.1f} ms")
        exact, same = keyword_agreement(path, texts, queries[:50])
        print(
            f"keyword top-10 vs in-memory reference (50 queries): identical {exact:.0%}, "
            f"same set {same:.0%}"
        )
        extended, reloaded = bench_search_after_write(path, embeddings, extra, queries)
        print(
            f"first hybrid search after an own add_many of 1: {extended:.1f} ms "
            f"(matrix extended); with every cache dropped: {reloaded:.1f} ms (full reload)"
        )

    if not args.no_lancedb:
        lance = bench_lancedb(texts, embeddings, queries, args.runs, args.batch, args.dim)
        print_lancedb(lance, figures, (rate, single))

    store, put_rate = bench_inmemory_store(
        texts, embeddings, args.dim, queries[: args.store_queries], max(1, args.runs // 2)
    )
    print(
        f"\nLangGraph InMemoryStore vector search p50 {store['p50']:.2f} ms"
        f"  p95 {store['p95']:.2f} ms   (CPU p50 {store['cpu50']:.2f} ms; put {put_rate:,.0f}/s)"
    )
    for name in ("hybrid", "vector leg"):
        f = figures[name]
        print(
            f"ratio InMemoryStore / SQLite {name}: wall {store['p50'] / f['p50']:.0f}x, "
            f"CPU {store['cpu50'] / f['cpu50']:.0f}x  [target >= 50x]"
        )

    if args.no_big:
        return
    big = run_child(_big_child, args.big, args.dim, queries[:100], max(1, args.runs // 2))
    print(f"\n{args.big:,} memories (child process):")
    print(f"  batch add {big['rate']:,.0f} memories/s; file {big['file_mb']:.0f} MB")
    print(
        f"  added resident memory {big['added_rss_mb']:.0f} MB after the first search "
        f"({big['rss_after_load_mb']:.0f} MB before it); raw float32 matrix "
        f"{big['matrix_mb']:.0f} MB; ratio {big['added_rss_mb'] / big['matrix_mb']:.2f}x"
        "  [target < 2x]"
    )
    print(
        f"  added resident memory after {max(1, args.runs // 2)} passes of searches (keyword "
        f"postings built): {big['warm_rss_mb']:.0f} MB; ratio "
        f"{big['warm_rss_mb'] / big['matrix_mb']:.2f}x  [target < 2x]"
    )
    print(
        f"  hybrid search p50 {big['hybrid_p50_ms']:.2f} ms (CPU p50 {big['hybrid_cpu50_ms']:.2f} ms)"
    )
    if args.store_big:
        store_big = run_child(_store_big_child, args.big, args.dim)
        print(f"  InMemoryStore added resident memory {store_big['added_rss_mb']:.0f} MB")
    print(f"\nload average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
