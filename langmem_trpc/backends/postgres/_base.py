"""State and input validation shared by the sync and async halves of `PostgresMemoryService`.

The operations that are PostgreSQL's own validate here, before any I/O, into a
sans-I/O plan that the drivers (`sync.py`, `aio.py`) execute; the shared write
and read plans (validated by `MemoryService`) become statements here too
(`_write`, `_read_statements`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar
from weakref import WeakKeyDictionary, WeakSet

from ...errors import ConfigurationError
from ...service import reads, steps
from ...service.identity import EmbedderIdentity
from ...service.language import Language, resolve_language
from ...service.model_lock import ModelLock
from ...service.periods import TimeMentions
from ...service.rules import Limits, check_expiry, check_memory_id, check_read_limit, check_user
from ...types import UserKey
from . import _expiry, _identity, _plans, _reads, _sql
from ._cache import MAX_ENTRIES, EntryCache
from ._conninfo import checked_conninfo
from ._ops import Op, Plan, Sql

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from psycopg import AsyncConnection, Connection
    from psycopg.types import TypeInfo
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

logger = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_EF_SEARCH = 200
DEFAULT_EXACT_SEARCH_MAX = 2_000


class PostgresBase:
    """Configuration, pools and op builders; no I/O of its own."""

    def __init__(
        self,
        conninfo_or_pool: str | ConnectionPool[Any] | AsyncConnectionPool[Any],
        embeddings: Embeddings | None = None,
        *,
        limits: Limits | None = None,
        dims: int | None = None,
        pool_size: int = 10,
        pool_timeout: float = 5.0,
        ef_search: int = DEFAULT_EF_SEARCH,
        exact_search_max: int = DEFAULT_EXACT_SEARCH_MAX,
        entry_cache_size: int = MAX_ENTRIES,
        language: str | Language = "english",
    ) -> None:
        self.language = resolve_language(language)
        self._language_ok = False
        """Set once an operation found the database's recorded language to be this one."""
        self._sync_pool: ConnectionPool[Any] | None = None
        self._async_pool: AsyncConnectionPool[Any] | None = None
        self._owns_sync = self._owns_async = True
        self._conninfo: Any = self._take(conninfo_or_pool)
        """A string, or what the given pool was built from."""
        _check_settings(pool_size, pool_timeout, ef_search, exact_search_max, entry_cache_size)
        self._embeddings = embeddings
        self._identity: EmbedderIdentity | None = None
        """The recorded embedder `setup()` checked this one against."""
        self._model_lock = ModelLock()
        self._limits = limits or Limits()
        self._search_cache = _reads.SearchCache(
            dims=dims,
            entries=EntryCache(entry_cache_size),
            time_mentions=TimeMentions(self.language),
        )
        self._pool_size = pool_size
        self._pool_timeout = pool_timeout
        self._ef_search = ef_search
        self._exact_search_max = exact_search_max
        self._pool_lock = threading.Lock()
        self._prepared: WeakSet[Connection[Any] | AsyncConnection[Any]] = WeakSet()
        # pgvector's `vector` type per connection, fetched on the first bulk COPY
        self._vector_info: WeakKeyDictionary[
            Connection[Any] | AsyncConnection[Any], TypeInfo | None
        ] = WeakKeyDictionary()

    def _take(self, conninfo_or_pool: str | ConnectionPool[Any] | AsyncConnectionPool[Any]) -> Any:
        """The connection string to open pools with; a pool passed in is kept (not owned)."""
        from psycopg_pool import AsyncConnectionPool, ConnectionPool

        if isinstance(conninfo_or_pool, ConnectionPool):
            self._sync_pool, self._owns_sync = conninfo_or_pool, False
            return conninfo_or_pool.conninfo
        if isinstance(conninfo_or_pool, AsyncConnectionPool):
            self._async_pool, self._owns_async = conninfo_or_pool, False
            return conninfo_or_pool.conninfo
        if isinstance(conninfo_or_pool, str):
            return checked_conninfo(conninfo_or_pool)  # before any pool: no secret logged
        raise ConfigurationError(
            "PostgresMemoryService needs a connection string, a psycopg_pool.ConnectionPool "
            f"or an AsyncConnectionPool, not {type(conninfo_or_pool).__name__}"
        )

    def _pool_options(self, name: str) -> dict[str, Any]:
        """The arguments of a pool this service opens (sync or async), named `name`."""
        return dict(
            conninfo=self._conninfo,
            min_size=1,
            max_size=self._pool_size,
            timeout=self._pool_timeout,
            kwargs={"autocommit": True},
            open=False,
            name=name,
        )

    def session_settings(self, owned_pool: bool) -> str:
        """Per-connection settings: ANN recall and per-user filtering with pgvector 0.8, and
        on pools this service opened generic plans (planning the search costs ~1 ms, more
        than running it for a typical user; heavy users' ANN scans plan inside
        `langmem_ann_candidates`). A pool passed in keeps the application's."""
        settings = (
            f"SET hnsw.ef_search = {int(self._ef_search)}; SET hnsw.iterative_scan = relaxed_order"
        )
        if owned_pool:
            settings += "; SET plan_cache_mode = force_generic_plan"
        return settings

    # -- op builders (validation happens here, before any I/O) ---------------

    def _gated(self, op: Op) -> Plan[Any]:
        """The op's plan, behind `check_language` until one check has passed."""
        if self._language_ok or not op.checks_language:
            return op.plan
        return _plans.language_checked(op.plan, self.language, self._language_passed)

    def _language_passed(self) -> None:
        self._language_ok = True

    def _generation(self) -> int:
        """The recorded embedder generation this service's embedder belongs to."""
        return self._identity.generation if self._identity is not None else 0

    def _switch(self, embeddings: Embeddings, identity: EmbedderIdentity) -> None:
        """After a re-embed's cutover (under the exclusive model lock): the new embedder."""
        self._embeddings, self._identity = embeddings, identity
        self._search_cache.dims = identity.dims

    def _op_setup(self) -> Op:
        return Op(self._setup_plan(), write=True, checks_language=False)

    def _setup_plan(self) -> Plan[int | None]:
        current = None
        dims = self._search_cache.dims
        if self._embeddings is not None:  # the embedder is checked before any migration
            current = yield from _identity.probe(self._embeddings)
            dims = dims if dims is not None else current.dims
            yield Sql(_sql.SETUP_LOCK)
            yield from _identity.check_before_setup(current)
        dims = yield from _plans.setup(dims, self._embeddings is not None, self.language)
        if current is not None:
            self._identity = yield from _identity.record_after_setup(current)
        self._language_passed()  # setup checked (or recorded) the language itself
        return dims

    def _write(
        self,
        plan: steps.Plan[T],
        vectors: Sequence[Sequence[float]] | None = None,
        indexed: bool = True,
    ) -> Plan[T]:
        """A shared write plan (`service/plans.py`) as SQL (run in one transaction)."""
        options = _plans.WriteOptions(self._embeddings is not None, self.language, vectors, indexed)
        if self._identity is None or self._embeddings is None:
            return _plans.write(plan, options)
        return _identity.write_checked(_plans.write(plan, options), self._generation)

    # -- reads (`run_read` in `sync.py` / `aio.py`) and expiry (`service.py`) --

    @property
    def time_mentions(self) -> TimeMentions:
        """Which memory texts say a time (search ranking; see `MemoryService`)."""
        return self._search_cache.time_mentions

    def _read_statements(self, plan: reads.ReadPlan) -> Plan[Any]:
        """A shared read plan (`service.reads`) as SQL, run without a transaction; a
        search is checked against a re-embed's cutover (`_reads.run`)."""
        executor = _reads.SqlReads(
            self._embeddings is not None, self._exact_search_max, self._search_cache, self.language
        )
        checked = self._identity is not None and self._embeddings is not None
        return _reads.run(plan, executor, self._generation if checked else None)

    def _set_expiry(
        self, user: UserKey, memory_id: str, expires_at: datetime | str | None
    ) -> Plan[bool]:
        at = check_expiry(expires_at)
        return _expiry.set_expiry(check_user(user), check_memory_id(memory_id), at)

    def _expired(self, user: UserKey, limit: int | None = None) -> Plan[list[str]]:
        return _expiry.expired(check_user(user), check_read_limit(limit))


def _check_settings(
    pool_size: int, pool_timeout: float, ef_search: int, exact_search_max: int, entry_cache: int
) -> None:
    if (
        pool_size < 1
        or ef_search < 1
        or exact_search_max < 0
        or pool_timeout <= 0
        or entry_cache < 0
    ):
        raise ConfigurationError(
            "pool_size and ef_search must be >= 1, exact_search_max and entry_cache_size "
            ">= 0, pool_timeout > 0"
        )


def backend_error(exc: Exception) -> Exception:
    """Driver error -> our error tree, never echoing SQL text or connection strings."""
    from psycopg import errors

    if isinstance(exc, (errors.UndefinedTable, errors.UndefinedObject, errors.UndefinedFunction)):
        return ConfigurationError(
            "the langmem_trpc tables are missing or outdated: call setup() (or asetup()) once"
        )
    from psycopg_pool import PoolTimeout

    from ...errors import BackendError

    if isinstance(exc, PoolTimeout):
        return BackendError(
            "no PostgreSQL connection within the pool timeout (PoolTimeout): the server is "
            "unreachable, refused the login, or every connection is busy; the psycopg.pool "
            "WARNING log gives libpq's reason"
        )
    return BackendError(f"PostgreSQL operation failed ({type(exc).__name__})")
