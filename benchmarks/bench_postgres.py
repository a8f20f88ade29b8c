"""Speed of the PostgreSQL + pgvector backend against LangGraph's PostgresStore (issue 3, "Speed").

Prints figures; not a test. Embedded PostgreSQL 18 + pgvector 0.8 (or
LANGMEM_TRPC_PG_URL), 384-dimension vectors precomputed before any timing
(a lookup `Embeddings`), synthetic memories of Zipf-distributed words.
Vectors are clustered (centroid + noise, unit length) like real sentence
embeddings; both stores get the same vectors and queries.

Measured in one run:

* heavy user: bulk ingest (`add_many`, 1,000 per statement; `--ingest deferred`:
  `defer_index=True`, then `index_pending()`: "ingest_per_s" is the load alone,
  "ingest_e2e_per_s" includes indexing; `--ingest default`: HNSW maintained per row),
  vector-only search p50 and recall@10 against exact (numpy) search,
  hybrid search p50/p95;
* LangGraph `PostgresStore` on the same items in one namespace: `put`
  throughput (one call per item, and `batch` of 1,000 PutOps), vector
  search p50 and recall@10;
* many users: hybrid search p50 for a typical user (exact-scan branch);
* the recall@10 / p50 curve over `--ef-curve` values of `hnsw.ef_search`, both stores.

Every latency figure is the median over `--runs` passes of the query set.

Usage:
    .venv/bin/python benchmarks/bench_postgres.py --quick
    .venv/bin/python benchmarks/bench_postgres.py --heavy 100000 --users 1000 --per-user 100
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import psycopg
from langchain_core.embeddings import Embeddings

from langmem_trpc import Limits, PostgresMemoryService, SearchOptions, UserKey
from langmem_trpc.testing.postgres import PostgresTestServer
from langmem_trpc.types import Memory

DIMS = 384
UNLIMITED = Limits(capacity=None)


class LookupEmbeddings(Embeddings):
    """Vectors computed before timing; embedding costs a dict lookup."""

    def __init__(self) -> None:
        self.table: dict[str, list[float]] = {}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        if text in self.table:
            return self.table[text]
        # a text outside the corpus (setup's embedder identity probe): a fixed unit vector
        rng = np.random.default_rng(zlib.crc32(text.encode()))
        vector = rng.standard_normal(DIMS)
        return (vector / np.linalg.norm(vector)).tolist()


class Corpus:
    """Texts, unit vectors and queries (with their vectors) for one benchmark.

    `data` picks the vector distribution (both stores always get the same vectors):

    * "realistic" (default): a topic mixture on a low-dimensional manifold, like
      sentence embeddings. Each item is `topic centroid + L @ z` with a latent
      `z` of `LATENT_DIMS` dimensions projected into 384 by a fixed random `L`,
      plus a little isotropic noise; a query is a *new* point near a random item
      (its latent mixed with fresh latent noise), not a perturbed copy. Calibrated
      so that `PostgresStore` at its default HNSW settings (m 16, ef_construction
      64, ef_search 40) has recall@10 close to the issue's 0.82 at 100k items
      (docs/bench-postgres.md, round 4).
    * "hard" (rounds 1-3): tight clusters of ~100 near-identical points (centroid
      + small full-rank noise), queries = an item plus noise. Every exact top-10 is a
      set of near-ties, which no HNSW index recovers well (PostgresStore: 0.32 at 100k).
    """

    LATENT_DIMS = 384
    TOPICS = 50
    NOISE = 0.3
    QUERY_MIX = 0.45

    def __init__(self, n: int, n_queries: int, seed: int, data: str = "realistic") -> None:
        rng = np.random.default_rng(seed)
        vocab = [self._word(rng) for _ in range(5000)]
        weights = 1.0 / np.arange(1, len(vocab) + 1)
        weights /= weights.sum()
        lengths = rng.integers(6, 16, size=n)
        words = rng.choice(len(vocab), size=int(lengths.sum()), p=weights)
        self.texts: list[str] = []
        pos = 0
        for i, length in enumerate(lengths):
            chunk = [vocab[w] for w in words[pos : pos + length]]
            pos += length
            self.texts.append(f"{' '.join(chunk)} ref{i}")
        picks = rng.integers(0, n, size=n_queries)
        self.picks = picks.tolist()
        if data == "hard":
            vectors, q = self._hard(rng, n, picks)
        elif data == "realistic":
            vectors, q = self._realistic(rng, n, picks)
        else:
            raise ValueError(f"unknown data distribution {data!r}")
        self.vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        self.query_vectors = q / np.linalg.norm(q, axis=1, keepdims=True)
        self.queries = [f"{' '.join(self.texts[p].split()[:3])} q{j}" for j, p in enumerate(picks)]

    @staticmethod
    def _hard(rng: np.random.Generator, n: int, picks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        centroids = rng.standard_normal((max(n // 100, 10), DIMS)).astype(np.float32)
        assign = rng.integers(0, len(centroids), size=n)
        vectors = centroids[assign] + 0.6 * rng.standard_normal((n, DIMS)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        noise = rng.standard_normal((len(picks), DIMS)).astype(np.float32)
        return vectors, vectors[picks] + 0.5 * noise / np.sqrt(DIMS) * 8

    @classmethod
    def _realistic(
        cls, rng: np.random.Generator, n: int, picks: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        d = cls.LATENT_DIMS
        centroids = rng.standard_normal((cls.TOPICS, DIMS)).astype(np.float32) / np.sqrt(DIMS)
        basis = rng.standard_normal((d, DIMS)).astype(np.float32) / np.sqrt(DIMS)
        topic = rng.integers(0, cls.TOPICS, size=n)
        latent = rng.standard_normal((n, d)).astype(np.float32) / np.sqrt(d)
        iso = cls.NOISE / np.sqrt(DIMS)

        def embed(t: np.ndarray, z: np.ndarray) -> np.ndarray:
            out: np.ndarray = 0.6 * centroids[t] + z @ basis
            return out + iso * rng.standard_normal(out.shape).astype(np.float32)

        vectors = embed(topic, latent)
        fresh = rng.standard_normal((len(picks), d)).astype(np.float32) / np.sqrt(d)
        mix = cls.QUERY_MIX
        q_latent = mix * latent[picks] + np.sqrt(1 - mix**2) * fresh
        return vectors, embed(topic[picks], q_latent)

    @staticmethod
    def _word(rng: np.random.Generator) -> str:
        letters = "abcdefghijklmnopqrstuvwxyz"
        return "".join(rng.choice(list(letters), size=int(rng.integers(3, 9))))

    def embeddings(self) -> LookupEmbeddings:
        emb = LookupEmbeddings()
        for text, vec in zip(self.texts, self.vectors, strict=True):
            emb.table[text] = vec.tolist()
        for text, vec in zip(self.queries, self.query_vectors, strict=True):
            emb.table[text] = vec.tolist()
        return emb

    def exact_top(self, k: int = 10) -> list[set[int]]:
        sims = self.query_vectors @ self.vectors.T
        return [set(np.argpartition(-row, k)[:k].tolist()) for row in sims]


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def time_queries(fn: Callable[[int], Any], n: int, runs: int) -> tuple[float, float]:
    """Median over runs of (p50, p95) in milliseconds."""
    p50s, p95s = [], []
    for i in range(min(n, 20)):  # warm caches and pools
        fn(i)
    for _ in range(runs):
        times = []
        for i in range(n):
            start = time.perf_counter()
            fn(i)
            times.append((time.perf_counter() - start) * 1000)
        p50s.append(percentile(times, 50))
        p95s.append(percentile(times, 95))
    return statistics.median(p50s), statistics.median(p95s)


def time_once(fn: Callable[[int], Any], n: int) -> tuple[float, float]:
    """(p50, p95) in ms of one pass with no warm-up: a fresh service's first searches
    (no entry cache, no known user sizes)."""
    times = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - start) * 1000)
    return percentile(times, 50), percentile(times, 95)


def vacuum(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def service(
    url: str, emb: Embeddings, args: argparse.Namespace, ef_search: int | None = None
) -> PostgresMemoryService:
    return PostgresMemoryService(
        url,
        emb,
        limits=UNLIMITED,
        dims=DIMS,
        ef_search=ef_search or args.ef_search,
        exact_search_max=args.exact_max,
        entry_cache_size=args.entry_cache,
    )


def load(
    svc: PostgresMemoryService,
    batches: Sequence[tuple[UserKey, list[Memory], np.ndarray]],
    deferred: bool,
    index: bool = True,
) -> tuple[float, float]:
    """(load rows/s, end-to-end rows/s including `index_pending`) of one bulk import."""
    total = sum(len(m) for _, m, _ in batches)
    start = time.perf_counter()
    for user, memories, vectors in batches:
        svc.add_many(user, memories, vectors=vectors, defer_index=deferred)
    loaded = time.perf_counter() - start
    if deferred and index:
        svc.index_pending(batch_size=5_000)
    return total / loaded, total / (time.perf_counter() - start)


def ours_ef_curve(
    url: str, corpus: Corpus, args: argparse.Namespace, user: UserKey
) -> dict[str, float]:
    """Vector-only recall@10 and p50 per `hnsw.ef_search` (warm service, pinned ANN leg)."""
    emb = corpus.embeddings()
    text_to_index = {t: i for i, t in enumerate(corpus.texts)}
    exact = corpus.exact_top(10)
    vector_only = SearchOptions(max_results=10, similarity_threshold=0.0, hybrid=False)
    out: dict[str, float] = {}
    for ef in args.ef_curve:
        svc = service(url, emb, args, ef_search=ef)
        recall = []
        for i, query in enumerate(corpus.queries):
            hits = svc.search(user, query, vector_only)
            recall.append(len({text_to_index[h.text] for h in hits} & exact[i]) / 10)
        p50, _ = time_queries(
            lambda i, svc=svc: svc.search(user, corpus.queries[i], vector_only),
            len(corpus.queries),
            1,
        )
        svc.close()
        out[f"ef{ef}_recall"] = float(np.mean(recall))
        out[f"ef{ef}_p50"] = p50
    return out


def bench_ours(url: str, corpus: Corpus, args: argparse.Namespace) -> dict[str, float]:
    emb = corpus.embeddings()
    svc = service(url, emb, args)
    svc.setup()
    user = UserKey("bench", "heavy")
    memories = [Memory(text=t) for t in corpus.texts]
    batches = [
        (user, memories[lo : lo + 1000], corpus.vectors[lo : lo + 1000])
        for lo in range(0, len(memories), 1000)
    ]
    ingest, ingest_e2e = load(svc, batches, args.ingest == "deferred")
    vacuum(url)
    text_to_index = {t: i for i, t in enumerate(corpus.texts)}
    exact = corpus.exact_top(10)
    vector_only = SearchOptions(max_results=10, similarity_threshold=0.0, hybrid=False)
    recall = []
    for i, query in enumerate(corpus.queries):
        hits = svc.search(user, query, vector_only)
        recall.append(len({text_to_index[h.text] for h in hits} & exact[i]) / 10)
    n = len(corpus.queries)
    v50, v95 = time_queries(
        lambda i: svc.search(user, corpus.queries[i], vector_only), n, args.runs
    )
    hybrid = SearchOptions(max_results=10, hybrid=True)
    svc.close()
    cold = service(url, emb, args)
    c50, c95 = time_once(lambda i: cold.search(user, corpus.queries[i], hybrid), n)
    cold.close()
    svc = service(url, emb, args)
    h50, h95 = time_queries(lambda i: svc.search(user, corpus.queries[i], hybrid), n, args.runs)
    svc.close()
    curve = ours_ef_curve(url, corpus, args, user)
    return {
        "ingest_per_s": ingest,
        "ingest_e2e_per_s": ingest_e2e,
        "recall10": float(np.mean(recall)),
        "vec_p50": v50,
        "vec_p95": v95,
        "hyb_p50": h50,
        "hyb_p95": h95,
        "hyb_cold_p50": c50,
        "hyb_cold_p95": c95,
        **curve,
    }


def bench_peer(url: str, corpus: Corpus, args: argparse.Namespace) -> dict[str, float]:
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore

    emb = corpus.embeddings()
    ns = ("bench", "heavy")
    index = {"dims": DIMS, "embed": emb, "fields": ["text"]}
    with PostgresStore.from_conn_string(url, index=index) as store:  # type: ignore[arg-type]
        store.setup()
        n_single = min(args.peer_put, len(corpus.texts))
        start = time.perf_counter()
        for i in range(n_single):
            store.put(ns, f"k{i}", {"text": corpus.texts[i]})
        put_rate = n_single / (time.perf_counter() - start)
        start = time.perf_counter()
        for lo in range(n_single, len(corpus.texts), 1000):
            hi = min(lo + 1000, len(corpus.texts))
            store.batch([PutOp(ns, f"k{i}", {"text": corpus.texts[i]}) for i in range(lo, hi)])
        rest = len(corpus.texts) - n_single
        batch_rate = rest / (time.perf_counter() - start) if rest else float("nan")
        vacuum(url)
        exact = corpus.exact_top(10)
        recall = []
        for i, query in enumerate(corpus.queries):
            hits = store.search(ns, query=query, limit=10)
            recall.append(len({int(h.key[1:]) for h in hits} & exact[i]) / 10)
        n = len(corpus.queries)
        p50, p95 = time_queries(
            lambda i: store.search(ns, query=corpus.queries[i], limit=10), n, args.runs
        )
        curve: dict[str, float] = {}
        for ef in args.ef_curve:
            store.conn.execute(f"SET hnsw.ef_search = {int(ef)}")
            rec = []
            for i, query in enumerate(corpus.queries):
                hits = store.search(ns, query=query, limit=10)
                rec.append(len({int(h.key[1:]) for h in hits} & exact[i]) / 10)
            curve[f"ef{ef}_recall"] = float(np.mean(rec))
            curve[f"ef{ef}_p50"], _ = time_queries(
                lambda i: store.search(ns, query=corpus.queries[i], limit=10), n, 1
            )
        store.conn.execute("RESET hnsw.ef_search")
    return {
        "put_per_s": put_rate,
        "batch_per_s": batch_rate,
        "recall10": float(np.mean(recall)),
        "vec_p50": p50,
        "vec_p95": p95,
        **curve,
    }


def bench_many_users(url: str, args: argparse.Namespace) -> dict[str, float]:
    total = args.users * args.per_user
    corpus = Corpus(total, args.queries, seed=7, data=args.data)
    emb = corpus.embeddings()
    svc = service(url, emb, args)
    svc.setup()
    memories = [Memory(text=t) for t in corpus.texts]
    batches = [
        (
            UserKey("bench", f"user{u}"),
            memories[u * args.per_user : (u + 1) * args.per_user],
            corpus.vectors[u * args.per_user : (u + 1) * args.per_user],
        )
        for u in range(args.users)
    ]
    # users of at most `exact_max` rows are served by the exact branch, indexed or not:
    # their rows are loaded deferred and left pending (e2e = load here)
    ingest, ingest_e2e = load(svc, batches, deferred=True, index=False)
    vacuum(url)
    # each query goes to the user who owns the item it was drawn from
    owners = [UserKey("bench", f"user{p // args.per_user}") for p in corpus.picks]
    hybrid = SearchOptions(max_results=10, hybrid=True)
    svc.close()
    cold = service(url, emb, args)
    c50, c95 = time_once(lambda i: cold.search(owners[i], corpus.queries[i], hybrid), len(owners))
    cold.close()
    svc = service(url, emb, args)
    h50, h95 = time_queries(
        lambda i: svc.search(owners[i], corpus.queries[i], hybrid), len(owners), args.runs
    )
    svc.close()
    return {
        "rows": total,
        "ingest_per_s": ingest,
        "ingest_e2e_per_s": ingest_e2e,
        "hyb_p50": h50,
        "hyb_p95": h95,
        "hyb_cold_p50": c50,
        "hyb_cold_p95": c95,
    }


def bench_chain(url: str, corpus: Corpus, args: argparse.Namespace) -> dict[str, float]:
    """Default (current-view) hybrid search p50 on the heavy user, before and after one
    fact gets a chain of 100 versions (`update(supersede=True)` 99 times): over the
    corpus queries, and over queries aimed at the fact, whose nearest rows are then the
    99 superseded versions the filter skips."""
    emb = corpus.embeddings()
    rng = np.random.default_rng(11)
    anchor = corpus.vectors[0]

    def near(scale: float) -> list[float]:
        vec = anchor + scale * rng.standard_normal(DIMS).astype(np.float32) / np.sqrt(DIMS)
        return (vec / np.linalg.norm(vec)).tolist()

    versions = [f"production runs go release 1.{i}" for i in range(CHAIN)]
    fact_queries = [f"which go release runs production q{j}" for j in range(len(corpus.queries))]
    emb.table.update({t: near(0.2) for t in versions})
    emb.table.update({q: near(0.3) for q in fact_queries})
    user = UserKey("bench", "heavy")
    svc = service(url, emb, args)
    svc.setup()
    memories = [Memory(text=t) for t in corpus.texts]
    batches = [
        (user, memories[lo : lo + 1000], corpus.vectors[lo : lo + 1000])
        for lo in range(0, len(memories), 1000)
    ]
    load(svc, batches, args.ingest == "deferred")
    head = svc.add(user, versions[0])
    vacuum(url)
    hybrid = SearchOptions(max_results=10, hybrid=True)
    n = len(corpus.queries)
    out: dict[str, float] = {}
    for stage in ("one_version", "chain100"):
        if stage == "chain100":
            for text in versions[1:]:
                head = svc.update(user, head.id, text, supersede=True)
            vacuum(url)
        for name, queries in (("corpus", corpus.queries), ("fact", fact_queries)):
            p50, _ = time_queries(lambda i, q=queries: svc.search(user, q[i], hybrid), n, args.runs)
            out[f"{stage}_{name}_p50"] = p50
        top = [svc.search(user, q, hybrid)[0].id == head.id for q in fact_queries]
        out[f"{stage}_fact_top1"] = float(np.mean(top))
    svc.close()
    return out


CHAIN = 100
"""Versions of the one fact `bench_chain` supersedes."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heavy", type=int, default=100_000, help="memories of the heavy user")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--per-user", type=int, default=100)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ef-search", type=int, default=200)
    parser.add_argument(
        "--exact-max", type=int, default=2000, help="exact vector scan up to this many live rows"
    )
    parser.add_argument(
        "--peer-put", type=int, default=2000, help="items stored with one put() each"
    )
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument(
        "--data", choices=["realistic", "hard"], default="realistic", help="vector distribution"
    )
    parser.add_argument(
        "--ingest",
        choices=["deferred", "default"],
        default="deferred",
        help="add_many(defer_index=True) then index_pending(), or HNSW maintained per row",
    )
    parser.add_argument(
        "--entry-cache", type=int, default=0, help="entry_cache_size (0: the heavy user's size)"
    )
    parser.add_argument(
        "--ef-curve",
        type=lambda v: [int(x) for x in v.split(",") if x],
        default=[40, 100, 200, 400],
        help="ef_search values of the recall/latency curve (empty: skip)",
    )
    parser.add_argument(
        "--shared-buffers",
        default="1GB",
        help="the embedded server's shared_buffers (PostgreSQL's default 128MB holds less "
        "than the 100k-row table and its HNSW graph); both stores run on it",
    )
    parser.add_argument(
        "--parts",
        type=lambda v: set(v.split(",")),
        default={"heavy", "peer", "many"},
        help="comma-separated: heavy (ours, one big user), peer (PostgresStore), many "
        "(ours, many typical users), chain (ours: the heavy user before and after a "
        "100-version chain of one fact; not in the default set)",
    )
    parser.add_argument("--quick", action="store_true", help="10k heavy user, 100x100 users")
    args = parser.parse_args(argv)
    if args.quick:
        args.heavy, args.users, args.per_user, args.queries, args.peer_put = (
            10_000,
            100,
            100,
            100,
            500,
        )
    if args.entry_cache <= 0:
        args.entry_cache = max(args.heavy, 20_000)
    if args.skip_peer:
        args.parts.discard("peer")
    settings = {"shared_buffers": args.shared_buffers} if args.shared_buffers else {}
    with PostgresTestServer(settings=settings) as server:
        with psycopg.connect(server.url) as conn:
            version = conn.execute("SHOW server_version").fetchone()
            buffers = conn.execute("SHOW shared_buffers").fetchone()
        print(f"PostgreSQL {version and version[0]}, shared_buffers {buffers and buffers[0]}")
        corpus = Corpus(args.heavy, args.queries, seed=1, data=args.data)
        if args.parts & {"heavy", "peer"}:
            print(
                f"heavy user: {args.heavy} memories, {args.queries} queries, runs={args.runs}, "
                f"ef_search={args.ef_search}, data={args.data}, ingest={args.ingest}, "
                f"entry_cache={args.entry_cache}",
                flush=True,
            )
        if "heavy" in args.parts:
            ours = bench_ours(server.create_database("ours"), corpus, args)
            print(
                "  langmem_trpc  " + "  ".join(f"{k}={v:.3f}" for k, v in ours.items()), flush=True
            )
        if "peer" in args.parts:
            peer = bench_peer(server.create_database("peer"), corpus, args)
            print(
                "  PostgresStore " + "  ".join(f"{k}={v:.3f}" for k, v in peer.items()), flush=True
            )
        if {"heavy", "peer"} <= args.parts:
            print(
                f"  ingest ratio (ours add_many / peer put) = {ours['ingest_per_s'] / peer['put_per_s']:.1f}x; "
                f"vs peer batch = {ours['ingest_per_s'] / peer['batch_per_s']:.1f}x; "
                f"vector p50 ours / peer = {ours['vec_p50'] / peer['vec_p50']:.2f}",
                flush=True,
            )
        if "chain" in args.parts:
            chain = bench_chain(server.create_database("chain"), corpus, args)
            print(f"chain: {CHAIN} versions of one fact on the heavy user", flush=True)
            print(
                "  langmem_trpc  " + "  ".join(f"{k}={v:.3f}" for k, v in chain.items()), flush=True
            )
        if "many" in args.parts:
            many = bench_many_users(server.create_database("many"), args)
            print(f"many users: {args.users} x {args.per_user}", flush=True)
            print(
                "  langmem_trpc  " + "  ".join(f"{k}={v:.3f}" for k, v in many.items()), flush=True
            )


if __name__ == "__main__":
    sys.exit(main())
