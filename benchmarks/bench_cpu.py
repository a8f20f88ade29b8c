"""CPU time per operation, for same-run A/B comparisons on a loaded host.

Wall-clock figures of `bench_sqlite.py` and `bench_worker.py` swing by 2-3x when other
work shares this 2-core machine; process CPU time swings far less. Run it from the root
of each tree to compare, alternating, e.g.:

    for i in 1 2 3; do for d in /tmp/old .; do (cd $d && PYTHONPATH=$d \
        python /path/to/bench_cpu.py search); done; done

* `search`: SQLite, 10,000 memories of `bench_sqlite`'s synthetic data and lookup
  embedder, 200 hybrid queries; CPU p50 per search, median of 5 passes.
* `worker`: `bench_worker`'s workload on SQLite, 500 `process()`ed jobs after 50 warm
  ones; CPU per job, the middle of 3 runs.

It imports the benchmark modules of the tree it runs in (`benchmarks/`), so it runs
on old trees whose scripts have the same helpers.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, ".")


def search() -> None:
    import numpy as np

    from benchmarks import bench_sqlite as b
    from langmem_trpc import UserKey
    from langmem_trpc.backends.sqlite import SQLiteMemoryService

    rng = np.random.default_rng(7)
    vocab = b.make_vocabulary(3000, rng)
    texts = b.make_texts(10_000, vocab, rng, "m")
    queries = b.make_queries(200, vocab, rng)
    embeddings = b.LookupEmbeddings(b.vector_table(texts + queries, 384, rng))
    path = Path(tempfile.mkdtemp()) / "cpu.db"
    svc = SQLiteMemoryService(path, embeddings, limits=b.UNLIMITED)
    user = UserKey("app", "u")
    for i in range(0, len(texts), 1000):
        svc.add_many(user, texts[i : i + 1000])
    for query in queries[:20]:
        svc.search(user, query)
    passes = []
    for _ in range(5):
        per = []
        for query in queries:
            start = time.process_time()
            svc.search(user, query)
            per.append(time.process_time() - start)
        passes.append(statistics.median(per) * 1000)
    print(f"hybrid CPU p50 {statistics.median(passes):.3f} ms, passes {passes}")


def worker() -> None:
    from benchmarks import bench_worker as b

    runs = []
    for _ in range(3):
        svc = b.make_service("sqlite", Path(tempfile.mkdtemp()), "cpu")
        jobs = b.workload(50, 12)
        b.overhead(svc, jobs[:50], 30.0)
        start = time.process_time()
        b.overhead(svc, jobs[50:550], 30.0)
        runs.append((time.process_time() - start) / 500 * 1e6)
    print(f"CPU per job {sorted(runs)[1]:.0f} us, runs {[round(r) for r in runs]}")


if __name__ == "__main__":
    {"search": search, "worker": worker}[sys.argv[1] if len(sys.argv) > 1 else "search"]()
