"""`langmem_trpc.open(url)` and the `langmem_trpc.backends` entry points (`registry.py`)."""

from __future__ import annotations

import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import psycopg
import pytest

import langmem_trpc
from langmem_trpc import (
    Capability,
    ConfigurationError,
    InMemoryMemoryService,
    Limits,
    PostgresMemoryService,
    SQLiteMemoryService,
    UserKey,
)
from langmem_trpc import registry as registry_module
from langmem_trpc.registry import GROUP, BackendRegistry, scheme_of
from langmem_trpc.testing import HashingEmbeddings

ALICE = UserKey("app", "alice")
BUILT_IN = ["memory", "postgres", "postgresql", "sqlite"]


# -- schemes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "scheme"),
    [
        ("postgresql://u@localhost/db", "postgresql"),
        ("postgres://localhost", "postgres"),
        ("PostgreSQL://localhost", "postgresql"),
        ("host=/tmp dbname=memories", "postgresql"),
        ("dbname=memories", "postgresql"),
        ("password=secret host=db", "postgresql"),
        ("sslmode=require host=db", "postgresql"),
        ("memories.db", "sqlite"),
        ("/data/host=1/memories.db", "sqlite"),
        ("sqlite:///abs/memories.db", "sqlite"),
        ("memory://", "memory"),
        ("lancedb:///data/dir", "lancedb"),
    ],
)
def test_the_scheme_of_a_target(target: str, scheme: str) -> None:
    assert scheme_of(target) == scheme


def test_the_built_in_backends_are_entry_points() -> None:
    assert set(BUILT_IN) <= set(BackendRegistry().schemes())
    assert BackendRegistry(installed=False).schemes() == []


def test_memory_url_opens_a_fresh_in_memory_service() -> None:
    with langmem_trpc.open("memory://", embeddings=HashingEmbeddings()) as svc:
        assert isinstance(svc, InMemoryMemoryService)
        assert svc.capabilities == {Capability.VECTORS}
        svc.add(ALICE, "Likes tea")
    assert langmem_trpc.open("memory://").count(ALICE) == 0  # each open is its own store


def test_memory_url_with_a_location_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match="memory://"):
        langmem_trpc.open("memory://somewhere")


@pytest.mark.parametrize("form", ["absolute", "relative", "plain", "plain-relative", "pathlib"])
def test_sqlite_urls_and_plain_paths_open_the_same_file(
    form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    file = tmp_path / "sub" / "m.db"
    url = {
        "absolute": f"sqlite://{file}",  # sqlite:///abs/path
        "relative": "sqlite://sub/m.db",
        "plain": str(file),
        "plain-relative": "sub/m.db",
        "pathlib": file,
    }[form]
    with SQLiteMemoryService(file) as first:
        first.add(ALICE, "Stored in the file")
    with langmem_trpc.open(url, limits=Limits(capacity=5)) as svc:
        assert isinstance(svc, SQLiteMemoryService)
        assert Path(svc.path).resolve() == file.resolve()
        assert svc.limits.capacity == 5
        assert [e.text for e in svc.read(ALICE)] == ["Stored in the file"]
        assert svc.capabilities == {Capability.DURABLE, Capability.CROSS_PROCESS}


def test_sqlite_memory_database_is_not_durable() -> None:
    with langmem_trpc.open("sqlite://:memory:") as svc:
        assert svc.capabilities == frozenset()


def test_create_false_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "m.db"
    with pytest.raises(ConfigurationError, match="no memory database at"):
        langmem_trpc.open(str(missing), create=False)
    assert not missing.parent.exists()
    foreign = tmp_path / "theirs.db"
    import sqlite3

    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    with pytest.raises(ConfigurationError, match="not a langmem-trpc database"):
        langmem_trpc.open(f"sqlite://{foreign}", create=False)


@pytest.mark.postgres
@pytest.mark.parametrize("form", ["postgresql", "postgres", "libpq"])
def test_postgres_urls_and_libpq_strings(form: str, pg_url: str) -> None:
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    target = {
        "postgresql": pg_url,
        "postgres": pg_url.replace("postgresql://", "postgres://", 1),
        "libpq": " ".join(f"{k}={v}" for k, v in info.items()),
    }[form]
    assert scheme_of(target) in ("postgresql", "postgres")
    with langmem_trpc.open(target, embeddings=HashingEmbeddings(), pool_size=2) as svc:
        assert isinstance(svc, PostgresMemoryService)
        assert Capability.VECTORS in svc.capabilities
        svc.add(ALICE, "Stored in PostgreSQL")  # setup() ran: the schema exists
        assert svc.count(ALICE) == 1


@pytest.mark.postgres
def test_postgres_create_false_runs_no_setup(pg_url: str) -> None:
    with langmem_trpc.open(pg_url, create=False) as svc:
        assert isinstance(svc, PostgresMemoryService)
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'langmem%'")
        assert tables.fetchone() == (0,)


async def test_aopen_opens_and_sets_up_off_the_loop(tmp_path: Path) -> None:
    svc = await langmem_trpc.aopen(str(tmp_path / "a.db"))
    try:
        await svc.aadd(ALICE, "Opened asynchronously")
        assert await svc.acount(ALICE) == 1
    finally:
        await svc.aclose()


# -- errors ----------------------------------------------------------------------


def test_an_unknown_scheme_names_it_and_the_registered_ones() -> None:
    with pytest.raises(ConfigurationError) as caught:
        langmem_trpc.open("qdrant://localhost:6333")
    message = str(caught.value)
    assert "'qdrant'" in message
    for scheme in BUILT_IN:
        assert scheme in message


def test_an_option_the_backend_does_not_take_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not take pool_size"):
        langmem_trpc.open(str(tmp_path / "m.db"), pool_size=3)
    assert not (tmp_path / "m.db").exists()
    with pytest.raises(ConfigurationError, match="limts"):
        langmem_trpc.open("memory://", limts=Limits())


def test_an_empty_url_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match="url"):
        langmem_trpc.open("  ")


def test_a_scheme_registered_twice_differently_is_an_error() -> None:
    points = [
        EntryPoint("dup", "one.module:open_backend", GROUP),
        EntryPoint("dup", "other.module:open_backend", GROUP),
    ]
    with pytest.raises(ConfigurationError, match="registered twice"):
        BackendRegistry(points, installed=False).schemes()


def test_a_backend_that_cannot_be_imported_is_a_configuration_error() -> None:
    registry = BackendRegistry(
        [EntryPoint("ghost", "no_such_module_anywhere:open_backend", GROUP)], installed=False
    )
    with pytest.raises(ConfigurationError, match="ghost.*cannot be loaded"):
        registry.open("ghost://x")


# -- third-party backends ----------------------------------------------------------

PLUGIN = """
from langmem_trpc.registry import split_url
from langmem_trpc.backends.memory import InMemoryMemoryService


class PluginService(InMemoryMemoryService):
    setups = 0

    def setup(self):
        type(self).setups += 1


def open_backend(url, *, embeddings=None, **options):
    service = PluginService(embeddings, **options)
    service.location = split_url(url, "toybackend")
    return service


def open_nothing(url, *, embeddings=None, **options):
    return "not a service"
"""


@pytest.fixture
def plugin_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed third-party distribution: a module and its dist-info, nothing else."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "toy_langmem_backend.py").write_text(PLUGIN)
    info = site / "toy_langmem_backend-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: toy-langmem-backend\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(
        textwrap.dedent(f"""\
            [{GROUP}]
            toybackend = toy_langmem_backend:open_backend
            """)
    )
    monkeypatch.syspath_prepend(str(site))
    yield site
    sys.modules.pop("toy_langmem_backend", None)


def test_a_plugin_distribution_is_opened_by_open(
    plugin_distribution: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_module, "default_registry", BackendRegistry())
    svc = langmem_trpc.open("toybackend://shelf/one", limits=Limits(capacity=3))
    assert type(svc).__name__ == "PluginService"
    assert svc.location == "shelf/one"  # type: ignore[attr-defined]
    assert svc.limits.capacity == 3
    assert type(svc).setups == 1  # type: ignore[attr-defined]  # open() ran setup()
    assert "toybackend" in registry_module.default_registry.schemes()


def test_an_injected_entry_point_is_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "injected_backend.py").write_text(PLUGIN.replace("toybackend", "injected"))
    point = EntryPoint("injected", "injected_backend:open_backend", GROUP)
    registry = BackendRegistry([point])
    try:
        svc = registry.open("injected://here", embeddings=HashingEmbeddings())
        assert svc.location == "here"  # type: ignore[attr-defined]
        assert svc.supports_vectors
        assert set(BUILT_IN) < set(registry.schemes())
    finally:
        sys.modules.pop("injected_backend", None)


def test_a_factory_that_returns_no_service_is_refused(plugin_distribution: Path) -> None:
    point = EntryPoint("odd", "toy_langmem_backend:open_nothing", GROUP)
    registry = BackendRegistry([point], installed=False)
    with pytest.raises(ConfigurationError, match="returned str, not a MemoryService"):
        registry.open("odd://x")


def test_the_default_registry_can_be_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "default_registry", BackendRegistry(installed=False))
    with pytest.raises(ConfigurationError, match="registered: $"):
        langmem_trpc.open("memory://")
