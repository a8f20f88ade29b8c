"""PostgresMemoryService's reads (`MemoryService`'s, over its read executor), expiry and
add_many: a sync method and its `a*` twin each, written out; no server needed."""

from __future__ import annotations

import asyncio
import inspect
import typing

import pytest

pytest.importorskip("psycopg")

from langmem_trpc import PostgresMemoryService, UserKey
from langmem_trpc.errors import InvalidInputError

TWINNED = ("get", "read", "search", "history", "count", "users", "set_expiry", "expired")


@pytest.mark.parametrize("name", [*TWINNED, "add_many"])
def test_each_method_and_its_async_twin_take_the_builders_parameters(name):
    method = getattr(PostgresMemoryService, name)
    twin = getattr(PostgresMemoryService, "a" + name)
    assert (method.__name__, twin.__name__) == (name, "a" + name)
    assert not inspect.iscoroutinefunction(method)
    assert inspect.iscoroutinefunction(twin)
    assert inspect.signature(method) == inspect.signature(twin)


def test_add_many_keeps_its_postgres_options():
    parameters = inspect.signature(PostgresMemoryService.add_many).parameters
    assert list(parameters) == ["self", "user", "items", "source", "vectors", "defer_index"]
    assert parameters["defer_index"].default is False


def test_bad_input_is_refused_before_any_connection():
    # port 1 refuses connections: reaching I/O would raise BackendError, not this
    svc = PostgresMemoryService("postgresql://app@127.0.0.1:1/db", pool_timeout=0.5)
    alice = UserKey("app", "alice")
    with pytest.raises(InvalidInputError):
        svc.get(alice, "")
    with pytest.raises(InvalidInputError):
        asyncio.run(svc.ahistory(alice, " "))
    with pytest.raises(InvalidInputError):
        svc.add_many(alice, ["a"], vectors=[[0.1]])  # no embedder
    with pytest.raises(InvalidInputError):
        svc.get("alice", "m1")
    svc.close()


def test_the_read_executor_has_every_read_executor_method():
    """PostgreSQL's sans-I/O read executor keeps `ReadExecutor`'s method names (each a
    plan of statements), and its dispatch reaches one of them for every read step."""
    from langmem_trpc.backends.postgres._reads import SqlReads
    from langmem_trpc.service import reads

    wanted = {
        name
        for name, member in vars(reads.ReadExecutor).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }
    assert len(wanted) == len(reads.ReadStep.__args__)  # one method per step
    for name in wanted:
        method = getattr(SqlReads, name)
        assert inspect.isgeneratorfunction(method), name
        step_type = typing.get_type_hints(getattr(reads.ReadExecutor, name))["step"]
        assert typing.get_type_hints(method)["step"] is step_type, name
