"""CPU per SQLite add, one tree or two side by side (prints figures; not a test).

Process CPU (`time.process_time`) in microseconds per row, best of three fresh services
per run, on `bench_sqlite.py`'s texts and 384-d vectors (seed 7):

- `single_mem`: 2,000 single `add()` calls into ":memory:";
- `single_file`: 2,000 single `add()` calls into a file (WAL);
- `batch_file`: 5,000 rows through `add_many` in calls of 1,000, into a file;
- `many_none`, `many_hash`, `many_lookup`: 10,000 rows through `add_many` in calls of
  1,000, into a file (issue 25's batch scenario), with no embedder, with the test
  embedder `HashingEmbeddings`, and with the 384-d lookup vectors.

One tree (the one on PYTHONPATH):

    PYTHONPATH=$PWD python benchmarks/bench_add.py [MODE ...]

Two trees, each run a subprocess with that tree on PYTHONPATH, old and new alternating
(the order flips every pair, so a drift in host load hits both alike); prints every run,
then per mode the median of the runs' best and the speed old/new (above 1: new is faster):

    git worktree add --detach /tmp/old ccef5b3
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_add.py --ab /tmp/old $PWD --pairs 5
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from langchain_core.embeddings import Embeddings

MODES = ("single_mem", "single_file", "batch_file", "many_none", "many_hash", "many_lookup")
HERE = Path(__file__).resolve().parent


def measure(mode: str) -> list[float]:
    """Microseconds of CPU per row, for three fresh services."""
    sys.path.insert(0, str(HERE))  # bench_sqlite's workload, the same for both trees
    import bench_sqlite as b
    import numpy as np

    from langmem_trpc.backends.sqlite import SQLiteMemoryService

    rng = np.random.default_rng(7)
    vocab = b.make_vocabulary(5000, rng)
    many = mode.startswith("many")
    texts = b.make_texts(10_001 if many else 5001, vocab, rng, "m")
    embeddings: Embeddings | None = b.LookupEmbeddings(b.vector_table(texts, 384, rng))
    if mode == "many_none":
        embeddings = None
    elif mode == "many_hash":
        from langmem_trpc.testing import HashingEmbeddings

        embeddings = HashingEmbeddings()
    rows = 2000 if mode.startswith("single") else 10_000 if many else 5000
    out = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as tmp:
            path = ":memory:" if mode == "single_mem" else Path(tmp) / "b.db"
            service = SQLiteMemoryService(path, embeddings, limits=b.UNLIMITED)
            service.add(b.USER, texts[-1])  # schema, caches and the user's state are warm
            gc.collect()
            start = time.process_time()
            if mode.startswith("single"):
                for text in texts[:rows]:
                    service.add(b.USER, text)
            else:
                for lo in range(0, rows, 1000):
                    service.add_many(b.USER, texts[lo : lo + 1000])
            out.append((time.process_time() - start) / rows * 1e6)
            service.close()
    return out


def side_by_side(old: str, new: str, pairs: int, modes: list[str]) -> None:
    best: dict[tuple[str, str], list[float]] = {}
    for mode in modes:
        for pair in range(pairs):
            order = (("old", old), ("new", new))
            for name, tree in order if pair % 2 == 0 else order[::-1]:
                line = subprocess.run(
                    [sys.executable, __file__, mode],
                    env={**os.environ, "PYTHONPATH": tree},
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout.strip()
                print(name, line, flush=True)
                best.setdefault((name, mode), []).append(float(line.split()[-1]))
    for mode in modes:
        o, n = statistics.median(best["old", mode]), statistics.median(best["new", mode])
        print(
            f"{mode:12s} old {o:7.1f} us ({1e6 / o:,.0f} rows/s)  new {n:7.1f} us"
            f" ({1e6 / n:,.0f} rows/s)  speed old/new {o / n:.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modes", nargs="*", metavar="MODE", help=", ".join(MODES))
    parser.add_argument("--ab", nargs=2, metavar=("OLD", "NEW"), help="two trees to compare")
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    modes = list(args.modes) or list(MODES)
    if unknown := sorted(set(modes) - set(MODES)):
        parser.error(f"unknown mode {', '.join(unknown)} (choose from {', '.join(MODES)})")
    if args.ab:
        side_by_side(*args.ab, args.pairs, modes)
        return
    for mode in modes:
        out = measure(mode)
        print(mode, " ".join(f"{x:.1f}" for x in out), f"min {min(out):.1f}", flush=True)


if __name__ == "__main__":
    main()
