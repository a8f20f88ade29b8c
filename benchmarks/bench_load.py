"""Load and concurrency: many concurrent agent runs, and several processes on one SQLite file.

Mode `agents` (SQLite or PostgreSQL): `--concurrency` agent runs at once
(asyncio, `create_agent` with a scripted model that calls `memory_search`,
`MemoryPreloadMiddleware`, `MemoryCheckpointer` and a real `AutoMemoryWorker`)
across `--users` users; `--second-turn` of them come back for a second turn in
the same thread. The extractor is fake: it sleeps 50-200 ms (seeded) and
proposes one add per user message, recording the order it saw each user's
turns. Reported: throughput, p50/p95/p99 of preload and tool latency, queue
depth (sampled every 50 ms), jobs lost, duplicate memories, per-user
ordering violations (the last three must be 0).

Mode `processes` (SQLite): `--procs` processes write, update and search the
same file for `--seconds`; reported: operations, errors ("database is
locked" must never surface), and `PRAGMA integrity_check`.

Loopback only; every count and duration is bounded by the arguments.

Run:
    .venv/bin/python benchmarks/bench_load.py agents --backend sqlite
    .venv/bin/python benchmarks/bench_load.py agents --backend postgres
    .venv/bin/python benchmarks/bench_load.py processes --procs 4 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

import langmem_trpc
from langmem_trpc import (
    AutoMemoryWorker,
    MemoryCheckpointer,
    MemoryPreloadMiddleware,
    UserKey,
    create_memory_tools,
)
from langmem_trpc.extraction import ExtractionRequest, MemoryOp
from langmem_trpc.integration import preload as preload_module
from langmem_trpc.integration import tools as tools_module
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.testing import HashingEmbeddings, ScriptedChatModel, tool_call

# -- agents ----------------------------------------------------------------------------


class FakeExtractor:
    """Sleeps like a model (50-200 ms), proposes one add per user message, records order."""

    uses_existing = False

    def __init__(self, seed: int = 7) -> None:
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.seen: dict[str, list[int]] = defaultdict(list)
        self.violations = 0

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        with self.lock:
            delay = self.random.uniform(0.05, 0.2)
        time.sleep(delay)
        ops = []
        for message in request.messages:
            if message.type != "human":
                continue
            text = str(message.content)
            turn = int(text.rsplit(" ", 1)[-1])
            with self.lock:
                seen = self.seen[request.user.user_id]
                if seen and turn <= seen[-1]:
                    self.violations += 1
                seen.append(turn)
            ops.append(MemoryOp.add(text, verbatim=True))
        return ops


class Timings:
    def __init__(self) -> None:
        self.preload: list[float] = []
        self.tool: list[float] = []


def instrument(timings: Timings) -> None:
    """Time the preload step and every tool call (class-level wrappers, benchmark only)."""
    ablock = preload_module.Preloader.ablock
    arun = tools_module._Tools.arun

    async def timed_block(self: Any, *args: Any, **kwargs: Any) -> str:
        started = time.perf_counter()
        try:
            return await ablock(self, *args, **kwargs)
        finally:
            timings.preload.append(time.perf_counter() - started)

    async def timed_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await arun(self, *args, **kwargs)
        finally:
            timings.tool.append(time.perf_counter() - started)

    preload_module.Preloader.ablock = timed_block  # type: ignore[method-assign]
    tools_module._Tools.arun = timed_run  # type: ignore[method-assign]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def make_service(backend: str, folder: Path) -> tuple[MemoryService, Any]:
    """The store for `--backend` (a scheme), opened with `langmem_trpc.open`; postgres
    runs on an embedded server of its own (returned, to stop)."""
    server, options = None, {}
    if backend.startswith("postgres"):
        from langmem_trpc.testing.postgres import PostgresTestServer

        server = PostgresTestServer().start()
        url, options = server.create_database("load"), {"pool_size": 20}
    else:
        url = f"{backend}://{folder / f'load.{backend}'}"
    return langmem_trpc.open(url, embeddings=HashingEmbeddings(), **options), server


def _reply(messages: list[Any]) -> AIMessage:
    """First call: search memories; after the tool result: answer."""
    if messages and messages[-1].type == "tool":
        return AIMessage("Done.")
    return AIMessage("", tool_calls=[tool_call("memory_search", {"query": "turn preferences"})])


async def run_agents(args: argparse.Namespace) -> dict[str, Any]:
    timings = Timings()
    instrument(timings)
    folder = Path(tempfile.mkdtemp(prefix="langmem-load-"))
    service, server = make_service(args.backend, folder)
    users = [UserKey("load", f"user-{i:04d}") for i in range(args.users)]
    rng = random.Random(11)
    for user in rng.sample(users, len(users) // 2):  # half the users start with memories
        for k in range(3):
            service.add(user, f"Earlier preference {k} of {user.user_id}")
    returning = set(rng.sample(range(args.users), int(args.users * args.second_turn)))
    extractor = FakeExtractor()
    worker = AutoMemoryWorker(
        service, extractor, workers=args.workers, queue_size=args.queue_size, job_timeout=30
    ).start()
    model = ScriptedChatModel(replies=[], default=_reply)
    agent = create_agent(
        model,
        tools=create_memory_tools(service),
        middleware=[MemoryPreloadMiddleware(service, preload=10)],
        checkpointer=MemoryCheckpointer(InMemorySaver(), worker),
    )
    depths: list[int] = []
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            depths.append(worker.stats().queue_depth)
            await asyncio.sleep(0.05)

    gate = asyncio.Semaphore(args.concurrency)
    expected: dict[UserKey, list[str]] = defaultdict(list)
    errors: list[str] = []

    async def converse(i: int, user: UserKey) -> None:
        turns = 2 if i in returning else 1
        for turn in range(1, turns + 1):
            text = f"{user.user_id} says turn {turn}"
            expected[user].append(text)
            config = {
                "configurable": {
                    "thread_id": f"t-{i}",
                    "app_name": user.app_name,
                    "user_id": user.user_id,
                }
            }
            async with gate:
                try:
                    await agent.ainvoke({"messages": [HumanMessage(text)]}, config)
                except Exception as exc:  # counted, never expected
                    errors.append(repr(exc))

    sampler = asyncio.create_task(sample())
    started = time.perf_counter()
    await asyncio.gather(*(converse(i, u) for i, u in enumerate(users)))
    runs_seconds = time.perf_counter() - started
    drained = await worker.astop(timeout=300)
    total_seconds = time.perf_counter() - started
    done.set()
    await sampler
    stats = worker.stats()

    lost = duplicates = 0
    for user, texts in expected.items():
        live = [e.text for e in await service.aread(user)]
        lost += sum(1 for t in texts if t not in live)
        duplicates += len(live) - len(set(live))
    runs = sum(len(t) for t in expected.values())
    result = {
        "backend": args.backend,
        "users": args.users,
        "concurrency": args.concurrency,
        "runs": runs,
        "run_errors": len(errors),
        "runs_per_s": runs / runs_seconds,
        "seconds_runs": runs_seconds,
        "seconds_until_drained": total_seconds,
        "drained": drained,
        "preload_ms": (
            pct(timings.preload, 0.5),
            pct(timings.preload, 0.95),
            pct(timings.preload, 0.99),
        ),
        "tool_ms": (pct(timings.tool, 0.5), pct(timings.tool, 0.95), pct(timings.tool, 0.99)),
        "preload_calls": len(timings.preload),
        "tool_calls": len(timings.tool),
        "queue_depth_max": max(depths or [0]),
        "queue_depth_mean": statistics.fmean(depths) if depths else 0.0,
        "jobs_completed": stats.jobs_run,
        "jobs_nothing_new": stats.jobs_nothing_new,
        "jobs_sync_fallback": stats.jobs_sync + stats.jobs_overflow,
        "jobs_failed": stats.jobs_failed,
        "jobs_lost": lost,
        "duplicates": duplicates,
        "ordering_violations": extractor.violations,
    }
    await service.aclose()
    if server is not None:
        server.stop()
    return result


# -- processes ---------------------------------------------------------------------------


def _hammer(path: str, index: int, seconds: float, out: Any) -> None:
    from langmem_trpc.errors import LangmemTrpcError

    ops = errors = locked = 0
    service = langmem_trpc.open(path)
    rng = random.Random(index)
    deadline = time.monotonic() + seconds
    ids: list[tuple[UserKey, str]] = []
    while time.monotonic() < deadline:
        user = UserKey("procs", f"user-{rng.randrange(50)}")
        try:
            choice = rng.random()
            if choice < 0.5 or not ids:
                entry = service.add(user, f"process {index} fact {ops} {rng.random()}")
                ids.append((user, entry.id))
            elif choice < 0.7:
                owner, mid = rng.choice(ids)
                service.update(owner, mid, f"process {index} updated {ops} {rng.random()}")
            elif choice < 0.8:
                owner, mid = rng.choice(ids)
                service.delete(owner, mid)
            else:
                service.search(user, "process fact")
        except LangmemTrpcError as exc:
            if "MemoryNotFound" not in type(exc).__name__:
                errors += 1
                locked += "locked" in str(exc) or "busy" in str(exc)
        ops += 1
    service.close()
    out.put((ops, errors, locked))


def run_processes(args: argparse.Namespace) -> dict[str, Any]:
    import sqlite3

    path = str(Path(tempfile.mkdtemp(prefix="langmem-procs-")) / "shared.db")
    langmem_trpc.open(path).close()  # create the schema once
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_hammer, args=(path, i, args.seconds, out)) for i in range(args.procs)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=args.seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    with sqlite3.connect(path) as conn:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        rows = conn.execute("SELECT count(*) FROM memories").fetchone()[0]
    return {
        "procs": args.procs,
        "seconds": args.seconds,
        "operations": sum(r[0] for r in results),
        "errors": sum(r[1] for r in results),
        "database_locked_errors": sum(r[2] for r in results),
        "integrity_check": integrity,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="mode", required=True)
    agents = sub.add_parser("agents")
    agents.add_argument("--backend", default="sqlite", help="a scheme: sqlite, postgres, ...")
    agents.add_argument("--users", type=int, default=1000)
    agents.add_argument("--concurrency", type=int, default=200)
    agents.add_argument("--second-turn", type=float, default=0.2)
    agents.add_argument("--workers", type=int, default=8)
    agents.add_argument("--queue-size", type=int, default=64)
    procs = sub.add_parser("processes")
    procs.add_argument("--procs", type=int, default=4)
    procs.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    if args.mode == "agents":
        result = asyncio.run(run_agents(args))
    else:
        result = run_processes(args)
    for key, value in result.items():
        if isinstance(value, float):
            value = f"{value:.2f}"
        elif isinstance(value, tuple):
            value = " / ".join(f"{v:.1f}" for v in value)
        print(f"{key:>24}: {value}")


if __name__ == "__main__":
    main()
