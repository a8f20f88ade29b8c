"""The inspector's users page with many users: time and size (prints figures; not a test).

Seeds 5,000 users of one memory each in a temporary SQLite file, then GETs `/`
seven times through Starlette's TestClient and prints the median time and the
page size. The page reads per-user counts for its 50 shown users only (issue
31, item 15: it ran a count and a read for every user). Runs against the tree
on PYTHONPATH; the token header is ignored by trees without the login gate.

    PYTHONPATH=$PWD python benchmarks/bench_ui_index.py [USERS]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

from langmem_trpc import UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.ui import TOKEN_HEADER, create_app

TOKEN = "benchmark-token-0123456789"


def main() -> None:
    users = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    with tempfile.TemporaryDirectory() as tmp:
        svc = SQLiteMemoryService(str(Path(tmp) / "m.db"))
        try:
            for n in range(users):
                svc.add(UserKey("app", f"user{n:05d}"), f"memory number {n}")
            app = create_app(svc, token=TOKEN)
            headers = {TOKEN_HEADER: TOKEN}
            with TestClient(app, base_url="http://127.0.0.1", headers=headers) as client:
                times, size = [], 0
                for _ in range(7):
                    start = time.perf_counter()
                    page = client.get("/")
                    times.append(time.perf_counter() - start)
                    size = len(page.content)
        finally:
            svc.close()
    median_ms = statistics.median(times) * 1000
    print(f"index, {users:,} users: median {median_ms:.0f} ms of 7, {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
