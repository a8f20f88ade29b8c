"""How the PostgreSQL executor stores a multi-row `Insert` (`backends/postgres/_bulk.py`):
the plan's steps in, the statements out, no server needed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from langmem_trpc.backends.postgres import _bulk, _plans
from langmem_trpc.backends.postgres._ops import Copy
from langmem_trpc.service import steps
from langmem_trpc.service.language import ENGLISH
from langmem_trpc.types import Entry, HistoryEvent, Memory, Operation, Source, UserKey

ALICE = UserKey("app", "alice")
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _rows(n: int) -> tuple[steps.NewRow, ...]:
    return tuple(
        steps.NewRow(
            Entry(
                id=f"m{i}", app_name="app", user_id="alice", memory=Memory(text=f"fact {i}"),
                created_at=T0 + timedelta(seconds=i), updated_at=T0 + timedelta(seconds=i),
            ),
            f"{i:064x}", False, None,
        )
        for i in range(n)
    )  # fmt: skip


def _adds(rows: tuple[steps.NewRow, ...], source: Source | None) -> steps.RecordHistory:
    events = tuple(
        HistoryEvent(
            memory_id=r.entry.id, operation=Operation.ADD, text_before=None,
            text_after=r.entry.text, at=r.entry.created_at, source=source,
        )
        for r in rows
    )  # fmt: skip
    return steps.RecordHistory(ALICE, events)


def _statements(*plan_steps: steps.Step) -> list[str]:
    """The SQL `write` runs for a plan that yields `plan_steps` (COPY shown as "COPY")."""

    def plan() -> steps.Plan[None]:
        for step in plan_steps:
            _ = yield step  # a step's reply

    run = _plans.write(plan(), _plans.WriteOptions(embed=False, language=ENGLISH))
    out, reply = [], None
    try:
        while True:
            step = run.send(reply)
            out.append("COPY" if isinstance(step, Copy) else step.sql)
            reply = []
    except StopIteration:
        return out


def test_the_rows_add_events_are_written_by_the_insert_statement():
    rows = _rows(3)
    source = Source(thread_id="t1")
    sql = _statements(steps.Insert(ALICE, rows), _adds(rows, source))
    assert sql == [_bulk.CREATE_STAGE, "COPY", _bulk.BULK_INSERT_ADDED]
    params = _bulk.insert_sql(steps.Insert(ALICE, rows), True, _adds(rows, source)).params
    assert params["op"] == "add" and params["source"].obj["thread_id"] == "t1"


def test_other_history_gets_its_own_statement_after_the_insert():
    rows = _rows(3)
    other = _adds(rows, None)
    other = steps.RecordHistory(ALICE, other.events[:2])  # not one event per row
    renamed = _adds(rows, None)
    renamed = steps.RecordHistory(
        ALICE,
        (renamed.events[0].model_copy(update={"text_after": "changed"}),) + renamed.events[1:],
    )
    mixed = _adds(rows, None)
    mixed = steps.RecordHistory(
        ALICE,
        (mixed.events[0].model_copy(update={"source": Source(thread_id="x")}),) + mixed.events[1:],
    )
    for history in (other, renamed, mixed):
        sql = _statements(steps.Insert(ALICE, rows), history)
        assert sql == [_bulk.CREATE_STAGE, "COPY", _bulk.BULK_INSERT, _plans._sql.INSERT_HISTORY]


def test_an_insert_the_plan_ends_on_or_follows_with_another_step_still_runs():
    rows = _rows(2)
    assert _statements(steps.Insert(ALICE, rows)) == [_bulk.CREATE_STAGE, "COPY", _bulk.BULK_INSERT]
    sql = _statements(steps.Insert(ALICE, rows), steps.CountLive(ALICE))
    assert sql == [_bulk.CREATE_STAGE, "COPY", _bulk.BULK_INSERT, _plans._sql.LIVE_COUNT]


def test_staged_vectors_are_pgvectors_binary_form():
    """One numpy conversion for a batch of one dimension, pgvector's own per row otherwise:
    the same bytes either way."""
    import numpy as np
    from pgvector import Vector

    def with_vectors(vectors):
        return tuple(
            steps.NewRow(r.entry, r.fingerprint, r.keyed, v)
            for r, v in zip(_rows(len(vectors)), vectors, strict=True)
        )

    rng = np.random.default_rng(0)
    same = [rng.standard_normal(8).astype(np.float32) for _ in range(3)]
    lists = [[float(x) for x in v] for v in same]
    for vectors in (same, lists, [same[0], None, same[2]], [same[0], same[1][:4]]):
        got = _bulk._vectors(with_vectors(vectors))
        want = [None if v is None else Vector(np.asarray(v, dtype=np.float32)) for v in vectors]
        assert [None if g is None else g.to_binary() for g in got] == [
            None if w is None else w.to_binary() for w in want
        ]


def test_the_postgres_modules_import_each_other_without_a_cycle():
    """Runtime imports between the backend's modules, function-level ones included (not
    those under `if TYPE_CHECKING:`), form no cycle: `_bulk` and `_plans` once imported
    each other; both now take the statement vocabulary from `_ops`."""
    import ast
    from pathlib import Path

    import langmem_trpc.backends.postgres as package

    folder = Path(package.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in folder.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                node.body = []
        graph[path.stem] = {
            (node.module or alias.name).split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1
            for alias in node.names
        }

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, set()) - seen:
            if nxt == goal or reaches(nxt, goal, seen | {nxt}):
                return True
        return False

    assert [m for m in graph if reaches(m, m, set())] == []
