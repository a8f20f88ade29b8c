"""Validity filtering on SQLite (issue 26, "Done when"). Prints figures; not a test.

Two measurements, on the synthetic memories and lookup vectors of bench_sqlite.py:

* hybrid search p50 at `--n` memories (10,000) on this tree against `--baseline-tree`
  (a checkout of the code before validity, e.g. `git worktree add /tmp/old afdae79`)
  in the same run: each run is one child process per tree, alternating which goes
  first, that builds the file and times every query once; the figure is the median
  over `--runs` runs of each run's p50;
* a user with a chain of `--chain` versions of one fact (each `update(...,
  supersede=True)` of the last) against a user with the same memories and no chain:
  default hybrid search p50 (median over `--runs` passes) and what the fact's query
  returns for each.

Usage:
    git worktree add /tmp/old afdae79
    python benchmarks/bench_sqlite_validity.py --baseline-tree /tmp/old
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bench_sqlite import (
    LookupEmbeddings,
    make_queries,
    make_texts,
    make_vocabulary,
    time_calls,
    unit_vectors,
    vector_table,
)

from langmem_trpc import Limits, SearchOptions, UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService

PLAIN = UserKey("bench", "plain")
CHAINED = UserKey("bench", "chained")
UNLIMITED = Limits(capacity=None)
FACT = "Production runs Go version 1.{} on the cluster"
FACT_QUERY = "which Go version runs on the production cluster"


class Lookup(LookupEmbeddings):
    """bench_sqlite's lookup vectors; a text not in the table (the embedder identity
    probe) gets a vector seeded by its length."""

    def embed_query(self, text: str) -> list[float]:
        if text not in self.table:
            dim = len(next(iter(self.table.values())))
            rng = np.random.default_rng(len(text))
            return unit_vectors(1, dim, rng)[0].tolist()  # type: ignore[no-any-return]
        return self.table[text]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]


def corpus(n: int, dim: int, queries: int) -> tuple[list[str], list[str], dict[str, list[float]]]:
    """The same memories, queries and vectors in every process (seeded)."""
    rng = np.random.default_rng(26)
    vocab = make_vocabulary(3000, rng)
    texts = make_texts(n, vocab, rng, "m")
    asked = make_queries(queries, vocab, rng)
    return texts, asked, vector_table(texts + asked, dim, rng)


def child(n: int, dim: int, queries: int) -> None:
    """One run on whatever tree PYTHONPATH names: build the file, time each query once."""
    texts, asked, table = corpus(n, dim, queries)
    with tempfile.TemporaryDirectory() as tmp:
        svc = SQLiteMemoryService(Path(tmp) / "b.db", Lookup(table), limits=UNLIMITED)
        for i in range(0, len(texts), 1000):
            svc.add_many(PLAIN, texts[i : i + 1000])
        call = lambda q: svc.search(PLAIN, q, SearchOptions(hybrid=True))  # noqa: E731
        for q in asked[:20]:  # warm: matrix, keyword index, row cache
            call(q)
        wall, cpu = time_calls(call, asked)
        svc.close()
    print(json.dumps({"p50": float(np.median(wall)), "cpu50": float(np.median(cpu))}))


def same_run(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Median over runs of each tree's p50, the trees alternating within each run."""
    here = str(Path(__file__).resolve().parents[1])
    trees = {"this tree": here, "baseline": str(Path(args.baseline_tree).resolve())}
    got: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for run in range(args.runs):
        order = list(trees) if run % 2 == 0 else list(reversed(trees))
        for name in order:
            env = {**os.environ, "PYTHONPATH": trees[name]}
            cmd = [sys.executable, __file__, "--child", "--n", str(args.n)]
            cmd += ["--dim", str(args.dim), "--queries", str(args.queries)]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            got[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {
        name: {key: statistics.median(r[key] for r in runs) for key in ("p50", "cpu50")}
        for name, runs in got.items()
    }


def interleaved(
    calls: dict[str, Callable[[str], Any]], queries: list[str], runs: int
) -> dict[str, dict[str, float]]:
    """Each query timed on every call in turn (the order flips every run, so a drift in
    host load hits both alike): median over runs of the wall and CPU p50 of each."""
    for call in calls.values():
        for q in queries[:20]:  # warm: matrix, keyword index, row cache
            call(q)
    p50: dict[str, list[float]] = {name: [] for name in calls}
    cpu50: dict[str, list[float]] = {name: [] for name in calls}
    for run in range(runs):
        order = list(calls) if run % 2 == 0 else list(reversed(calls))
        wall: dict[str, list[float]] = {name: [] for name in calls}
        cpu: dict[str, list[float]] = {name: [] for name in calls}
        for q in queries:
            for name in order:
                w, c = time_calls(calls[name], [q])
                wall[name] += w
                cpu[name] += c
        for name in calls:
            p50[name].append(float(np.median(wall[name])))
            cpu50[name].append(float(np.median(cpu[name])))
    return {
        name: {"p50": statistics.median(p50[name]), "cpu50": statistics.median(cpu50[name])}
        for name in calls
    }


def chain_figures(args: argparse.Namespace) -> dict[str, Any]:
    texts, asked, table = corpus(args.n, args.dim, args.queries)
    rng = np.random.default_rng(126)
    extra = [FACT.format(i) for i in range(args.chain)] + [FACT_QUERY]
    table.update(zip(extra, unit_vectors(len(extra), args.dim, rng).tolist(), strict=True))
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        svc = SQLiteMemoryService(Path(tmp) / "c.db", Lookup(table), limits=UNLIMITED)
        for user in (PLAIN, CHAINED):
            for i in range(0, len(texts), 1000):
                svc.add_many(user, texts[i : i + 1000])
        svc.add(PLAIN, FACT.format(args.chain - 1))
        head = svc.add(CHAINED, FACT.format(0))
        for i in range(1, args.chain):
            head = svc.update(CHAINED, head.id, FACT.format(i), supersede=True)
        calls = {
            user.user_id: lambda q, u=user: svc.search(u, q, SearchOptions(hybrid=True))
            for user in (PLAIN, CHAINED)
        }
        figures.update(interleaved(calls, asked, args.runs))
        for user in (PLAIN, CHAINED):
            hits = calls[user.user_id](FACT_QUERY)
            figures[user.user_id]["top"] = hits[0].text if hits else None
            figures[user.user_id]["fact versions in results"] = sum(
                h.text.startswith("Production runs Go") for h in hits
            )
            figures[user.user_id]["stored rows"] = svc.count(user)
        past = svc.search(CHAINED, FACT_QUERY, SearchOptions(include_superseded=True))
        figures["chained, include_superseded: fact versions"] = sum(
            h.text.startswith("Production runs Go") for h in past
        )
        svc.close()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chain", type=int, default=100)
    parser.add_argument("--baseline-tree", help="checkout of the code to compare with")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.n, args.dim, args.queries)
        return
    if args.baseline_tree:
        trees = same_run(args)
        print(f"hybrid search at {args.n:,} memories, median of {args.runs} runs (ms):")
        for name, row in trees.items():
            print(f"  {name:10s} p50 {row['p50']:.2f}  cpu p50 {row['cpu50']:.2f}")
        print(f"  ratio      {trees['this tree']['p50'] / trees['baseline']['p50']:.3f}")
    figures = chain_figures(args)
    print(f"chain of {args.chain} versions vs none, default hybrid search (ms):")
    for name, row in figures.items():
        print(f"  {name}: {row}")


if __name__ == "__main__":
    main()
