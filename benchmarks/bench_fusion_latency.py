"""Hybrid search latency per fusion choice, on one SQLite store (prints figures; not a test).

The data of `benchmarks/bench_sqlite.py` (10,000 synthetic memories, one user,
384-dim precomputed vectors, 200 queries); each configuration searches every
query, the configurations interleaved `--repeats` times, so host load hits
them alike. Prints wall p50 / p95 per configuration, and the median over queries
of each query's minimum CPU time across the repeats (robust on a loaded host).
`--names` gives each memory a participant and makes every query name one ("What did
Avery say about ..."): the workload where `FusionSettings.mask_names` embeds a second
query text and fetches the first tier again (the lookup embedder answers the masked
text with a fixed vector, so the figures hold the fetch, not a model's embedding).

    PYTHONPATH=$PWD python benchmarks/bench_fusion_latency.py [--n 10000] [--repeats 3] [--names]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sqlite import (
    UNLIMITED,
    USER,
    LookupEmbeddings,
    make_queries,
    make_texts,
    make_vocabulary,
    vector_table,
)

from langmem_trpc import SearchOptions
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.types import FusionSettings, Memory

CONFIGS = {
    "default": SearchOptions(),
    "scores": SearchOptions(fusion_method="scores"),
    "rrf": SearchOptions(fusion_method="rrf"),
    "rrf + decompose 1.0": SearchOptions(
        fusion_method="rrf", fusion=FusionSettings(decompose_weight=1.0)
    ),
}
if "neighbour_weight" in FusionSettings.model_fields:  # absent before round 10 (old trees)
    CONFIGS["neighbours 0.25"] = SearchOptions(fusion=FusionSettings(neighbour_weight=0.25))
    CONFIGS["feedback 0.25"] = SearchOptions(fusion=FusionSettings(feedback_weight=0.25))
    CONFIGS["session-first 0.5"] = SearchOptions(fusion=FusionSettings(session_weight=0.5))
if "implied_time_boost" in FusionSettings.model_fields:  # round 11's steps (old trees lack them)
    CONFIGS["capped neighbours 0.5"] = SearchOptions(
        fusion=FusionSettings(neighbour_weight=0.5, neighbour_capped=True)
    )
    CONFIGS["reply-only neighbours 0.25"] = SearchOptions(
        fusion=FusionSettings(neighbour_weight=0.25, neighbour_replies_only=True)
    )
    CONFIGS["implied time 1.0"] = SearchOptions(fusion=FusionSettings(implied_time_boost=1.0))
if "mask_names" in FusionSettings.model_fields:  # round 12 (old trees lack it)
    CONFIGS["names masked"] = SearchOptions(fusion=FusionSettings(mask_names=True))
    CONFIGS["names kept"] = SearchOptions(fusion=FusionSettings(mask_names=False))
PEOPLE = ["Avery", "Blake", "Casey", "Devon", "Emery", "Finley", "Harper", "Jordan"]
"""`--names`: each memory's participant, one of these; each query names one."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--names", action="store_true", help="participants named by every query")
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    vocab = make_vocabulary(5000, rng)
    texts = make_texts(args.n, vocab, rng, "m")
    queries = list(dict.fromkeys(make_queries(args.queries, vocab, rng)))
    if args.names:
        queries = [
            f"What did {PEOPLE[i % len(PEOPLE)]} say about {q}" for i, q in enumerate(queries)
        ]
    table = vector_table(texts, 384, rng)
    table.update(vector_table(queries, 384, rng))
    # The embedder-identity probe text gets `LookupEmbeddings`' fixed vector (any tree).
    with tempfile.TemporaryDirectory() as tmp:
        svc = SQLiteMemoryService(Path(tmp) / "b.db", LookupEmbeddings(table), limits=UNLIMITED)
        for i in range(0, len(texts), 1000):
            batch: list[str | Memory] = list(texts[i : i + 1000])
            if args.names:
                batch = [
                    Memory(text=t, participants=[PEOPLE[(i + j) % len(PEOPLE)]])
                    for j, t in enumerate(texts[i : i + 1000])
                ]
            svc.add_many(USER, batch)
        for options in CONFIGS.values():
            svc.search(USER, queries[0], options)
        times: dict[str, list[float]] = {name: [] for name in CONFIGS}
        cpu = {name: [float("inf")] * len(queries) for name in CONFIGS}
        for _ in range(args.repeats):
            for name, options in CONFIGS.items():
                for i, q in enumerate(queries):
                    start, start_cpu = time.perf_counter(), time.process_time()
                    svc.search(USER, q, options)
                    times[name].append((time.perf_counter() - start) * 1000)
                    cpu[name][i] = min(cpu[name][i], (time.process_time() - start_cpu) * 1000)
        svc.close()
    print(f"{args.n} memories, {len(queries)} queries x {args.repeats}, interleaved")
    for name, values in times.items():
        print(
            f"{name:22s} hybrid p50 {np.median(values):6.2f} ms  "
            f"p95 {np.percentile(values, 95):6.2f} ms  "
            f"CPU p50 of per-query minima {np.median(cpu[name]):6.2f} ms"
        )


if __name__ == "__main__":
    main()
