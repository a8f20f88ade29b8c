"""The contract's shared machinery: the async twins (a thread for a blocking
backend), the claim-family methods defined once on `MemoryService`, and the
reference `ClaimTable`."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import pytest

from langmem_trpc import InMemoryMemoryService, UserKey
from langmem_trpc.service import steps
from langmem_trpc.service.claims import SaveProgress
from langmem_trpc.service.protocol import MemoryService, SyncMemoryService
from langmem_trpc.service.reads import ReadPlan
from langmem_trpc.service.steps import Plan
from langmem_trpc.types import Entry, ExtractionCursor, ThreadClaim

ALICE = UserKey("app", "alice")


class Overridden(InMemoryMemoryService):
    """Overrides `run_read`: an async read must run this override, in a worker thread."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def run_read(self, plan: ReadPlan) -> Any:
        self.threads.append(threading.get_ident())
        return super().run_read(plan)


def test_a_blocking_backends_async_read_runs_its_run_read_off_the_event_loop() -> None:
    svc = Overridden()
    entry = svc.add(ALICE, "Keeps bees")

    async def main() -> tuple[Entry | None, int]:
        return await svc.aget(ALICE, entry.id), threading.get_ident()

    got, loop_thread = asyncio.run(main())
    assert got == entry
    assert len(svc.threads) == 1 and svc.threads[0] != loop_thread


@pytest.mark.parametrize(
    ("owner", "name"),
    [
        (MemoryService, "get"),
        (MemoryService, "search"),
        (MemoryService, "expired"),
        (MemoryService, "save_progress"),
        (MemoryService, "dead_letters"),
        (MemoryService, "add"),
    ],
)
def test_async_twins_keep_the_sync_methods_name_signature_and_class(
    owner: type[MemoryService], name: str
) -> None:
    sync, twin = getattr(owner, name), getattr(owner, "a" + name)
    assert twin.__qualname__ == f"{owner.__name__}.a{name}"  # written there, not built
    assert not hasattr(twin, "__wrapped__")
    assert inspect.signature(twin) == inspect.signature(sync)
    assert inspect.iscoroutinefunction(twin) and twin.__doc__


def test_every_public_method_has_an_async_twin_with_its_signature() -> None:
    sync_only = {"close"}  # aclose
    names = [
        n
        for n, value in vars(MemoryService).items()
        if inspect.isfunction(value) and not inspect.iscoroutinefunction(value)
        if not n.startswith("_") and n not in sync_only
    ]
    assert {"add", "update", "versions", "restore_version", "save_progress"} <= set(names)
    for name in names:
        sync, twin = getattr(SyncMemoryService, name), getattr(SyncMemoryService, "a" + name)
        assert inspect.iscoroutinefunction(twin), name
        assert inspect.signature(twin) == inspect.signature(sync), name


def test_a_blocking_backend_implements_every_async_twin() -> None:
    abstract = getattr(SyncMemoryService, "__abstractmethods__", frozenset())
    assert not {n for n in abstract if n.startswith("a")}


async def _typed_calls(svc: MemoryService) -> tuple[bool, ThreadClaim | None]:
    """Typed callers of the built methods (mypy checks these annotations)."""
    claim = await svc.aclaim_thread(ALICE, "t1", "job", 30)
    saved = await svc.asave_progress(ALICE, "t1", "job", cursor=ExtractionCursor(thread_id="t1"))
    return saved, claim


def test_claim_methods_return_what_their_op_promises() -> None:
    saved, claim = asyncio.run(_typed_calls(InMemoryMemoryService()))
    assert saved is True and isinstance(claim, ThreadClaim) and claim.cursor is None


def test_each_call_validates_once_into_the_op_the_backend_runs() -> None:
    seen: list[object] = []

    class Recording(InMemoryMemoryService):
        def run_claim_op(self, op):  # type: ignore[no-untyped-def]
            seen.append(op)
            return super().run_claim_op(op)

    svc = Recording()
    assert svc.claim_thread(ALICE, "t1", "job", 30) is not None
    assert svc.save_progress(ALICE, "t1", "job", ttl=5, resolved=["dl-1"])
    assert seen[1] == SaveProgress(ALICE, "t1", "job", None, 5.0, None, ["dl-1"])
    assert type(seen[0]).name == "claim_thread"


def test_a_rolled_back_purge_puts_the_users_cursor_and_claim_back() -> None:
    svc = InMemoryMemoryService()
    svc.set_cursor(ALICE, ExtractionCursor(thread_id="t1", message_count=2))
    assert svc.claim_thread(ALICE, "t1", "job", 30) is not None

    def failing_purge() -> Plan[None]:
        yield steps.LockUser(ALICE)
        yield steps.Purge(ALICE, None)
        raise RuntimeError("the purge's transaction fails after its step")

    with pytest.raises(RuntimeError):
        svc.run_plan(failing_purge())
    cursor = svc.get_cursor(ALICE, "t1")
    assert cursor is not None and cursor.message_count == 2
    assert svc.claim_thread(ALICE, "t1", "other", 30) is None  # still the job's


def test_every_claim_op_is_in_the_closed_union():
    """`claims.closed` casts an op to `ClaimCall`: every op class a method can build is in it."""
    from typing import get_args

    from langmem_trpc.service import claims

    def below(cls: type) -> set[type]:
        return {cls} | {s for sub in cls.__subclasses__() for s in below(sub)}

    ops = {cls for cls in below(claims.ClaimOp) if "name" in vars(cls)}
    assert ops == set(get_args(claims.ClaimCall))


def test_aread_with_the_default_view_calls_an_override_written_before_validity() -> None:
    class OldRead(InMemoryMemoryService):
        def read(self, user: UserKey, limit: int | None = None) -> list[Entry]:  # type: ignore[override]
            return super().read(user, limit)

    svc = OldRead()
    svc.add(ALICE, "Keeps bees")
    assert [e.text for e in asyncio.run(svc.aread(ALICE, 5))] == ["Keeps bees"]
