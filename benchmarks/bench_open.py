"""What opening a store through the registry costs (prints figures; not a test).

Per call, interleaved `--rounds` times so host load hits every arm alike: the
SQLite constructor on an existing file, `langmem_trpc.open(path)` (entry-point
lookup, option check, `setup()`), `open(path, create=False)` (a read-only
probe instead of setup) and `open("memory://")`; plus the first entry-point
scan of a new `BackendRegistry`. Prints the median per arm.

    PYTHONPATH=$PWD python benchmarks/bench_open.py [--calls 50] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import langmem_trpc
from langmem_trpc import SQLiteMemoryService
from langmem_trpc.registry import BackendRegistry


def per_call_ms(action: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        action()
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    path = str(Path(tempfile.mkdtemp(prefix="langmem-open-")) / "open.db")
    SQLiteMemoryService(path).close()  # the file exists: every arm opens it
    started = time.perf_counter()
    BackendRegistry().schemes()
    scan_ms = (time.perf_counter() - started) * 1e3
    arms: dict[str, Callable[[], object]] = {
        "SQLiteMemoryService(path)": lambda: SQLiteMemoryService(path).close(),
        "open(path)": lambda: langmem_trpc.open(path).close(),
        "open(path, create=False)": lambda: langmem_trpc.open(path, create=False).close(),
        "open('memory://')": lambda: langmem_trpc.open("memory://").close(),
    }
    figures: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.rounds):
        for name, action in arms.items():
            figures[name].append(per_call_ms(action, args.calls))
    print(f"first entry-point scan: {scan_ms:.1f} ms")
    for name, values in figures.items():
        print(f"{name:28s} {statistics.median(values):7.3f} ms per call")


if __name__ == "__main__":
    main()
