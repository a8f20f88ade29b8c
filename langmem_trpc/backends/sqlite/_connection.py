"""Connections to one SQLite file: one per thread, WAL, bounded retries.

Readers never block each other or the writer (WAL). Writers in this process
queue on a lock; writers in other processes are waited for by SQLite's
`busy_timeout`, and a transaction that still meets "database is locked" is
rolled back and retried with backoff, so callers never see that error.
`close()` waits for the transactions in flight (closing a connection under a
running query crashes the process) and refuses new ones.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, TypeVar
from urllib.parse import quote

from ...errors import BackendError, ConfigurationError
from ...service.language import ENGLISH, Language
from ._keyword import register_functions, scope_prefix_v1
from ._sql import CREATE_MIGRATIONS_TABLE, MIGRATIONS, stored_fingerprint

logger = logging.getLogger(__name__)

T = TypeVar("T")

_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED (and their extended codes & 0xff)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES
    message = str(exc).lower()
    return "locked" in message or "busy" in message


def probe(path: str | Path) -> Literal["missing", "foreign", "langmem"]:
    """What the file at `path` holds, looked at read-only.

    "missing": no such file; "foreign": a file that is not a SQLite database
    or holds no langmem-trpc schema; "langmem": ours. The file is opened with
    a `mode=ro` URI, so nothing is created, migrated or switched to WAL.
    """
    target = Path(path).expanduser()
    if not target.is_file():
        return "missing"
    try:
        conn = sqlite3.connect(f"file:{quote(str(target.resolve()))}?mode=ro", uri=True, timeout=5)
        try:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'langmem_migrations'"
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorcode", None) == 26 or "not a database" in str(exc):
            return "foreign"  # SQLITE_NOTADB
        raise BackendError(f"cannot inspect SQLite database: {exc}") from exc
    return "langmem" if found else "foreign"


class _Held:
    """A connection owned by one thread; closed when that thread ends (its locals go).

    Only the process that opened it closes it: closing an inherited SQLite
    connection in a forked child can checkpoint or delete the parent's WAL.
    """

    __slots__ = ("__weakref__", "conn", "pid")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.pid = os.getpid()

    def close(self) -> None:
        if self.pid == os.getpid():
            try:
                self.conn.close()
            except sqlite3.Error:  # pragma: no cover - closing is best effort
                logger.debug("error closing a SQLite connection", exc_info=True)

    def __del__(self) -> None:
        self.close()


class Database:
    """Opens, configures and migrates one SQLite database; runs transactions on it.

    The arguments are `SQLiteMemoryService`'s; `retries` is how many times a whole
    transaction is retried once the busy timeout ran out. ":memory:" is one connection
    shared behind a lock (each connection to ":memory:" would see its own empty database).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_ms: int = 5_000,
        retries: int = 8,
        synchronous: str = "NORMAL",
        language: Language = ENGLISH,
    ) -> None:
        self.language = language
        self.path = str(path)
        self.memory = self.path == ":memory:"
        if not self.memory:
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.path = str(Path(self.path).expanduser())
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise BackendError(f"unknown synchronous mode {synchronous!r}")
        self._busy_timeout_ms = busy_timeout_ms
        self._retries = retries
        self._synchronous = synchronous.upper()
        self._local = threading.local()
        self._held: weakref.WeakSet[_Held] = weakref.WeakSet()
        self._held_lock = threading.Lock()
        self.write_lock = threading.RLock()
        """Serialises this process's writers (and every use of a ":memory:" connection)."""
        self._pid = os.getpid()
        self._closed = False
        self._shared: _Held | None = None
        self._flight = threading.Condition()
        self._active = 0
        """Transactions running now, in any thread; `close()` waits for them."""
        self._depth = threading.local()
        """This thread's share of `_active` (a `close()` inside a transaction)."""
        self._flight_pid = os.getpid()
        try:
            self._setup()
        except BaseException:  # refused (another language, newer schema): no connection leaks
            self.close()
            raise

    # -- connections ----------------------------------------------------------

    def _open(self) -> _Held:
        try:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=0
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute("PRAGMA temp_store = MEMORY")
            register_functions(conn, self.language)
            conn.create_function("lm_scope_v1", 2, scope_prefix_v1, deterministic=True)
            conn.create_function("lm_fingerprint", 6, stored_fingerprint, deterministic=True)
        except sqlite3.Error as exc:
            raise BackendError(f"cannot open SQLite database: {exc}") from exc
        held = _Held(conn)
        with self._held_lock:
            self._held.add(held)
        return held

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use)."""
        if self._closed:
            raise BackendError("the SQLite memory service is closed")
        if os.getpid() != self._pid:  # forked: open our own, never use the parent's
            self._pid = os.getpid()
            self._local = threading.local()
            self._shared = None
            with self._held_lock:
                self._held = weakref.WeakSet()
        if self.memory:
            if self._shared is None:
                self._shared = self._open()
            return self._shared.conn
        held: _Held | None = getattr(self._local, "held", None)
        if held is None:
            held = self._open()
            self._local.held = held
        return held.conn

    def close(self) -> None:
        """Refuse new transactions, wait for those in flight, then close every
        connection this object opened, in any thread."""
        self._after_fork()
        own = getattr(self._depth, "n", 0)
        with self._flight:
            self._closed = True
            self._flight.wait_for(lambda: self._active <= own)
        with self.write_lock:
            with self._held_lock:
                held = list(self._held)
            for item in held:
                item.close()

    def _after_fork(self) -> None:
        """A forked child inherits counts of threads it does not have: start from zero."""
        if self._flight_pid != os.getpid():
            self._flight_pid = os.getpid()
            self._flight = threading.Condition()
            self._active = 0
            self._depth = threading.local()

    @contextmanager
    def _in_flight(self) -> Iterator[None]:
        """Count one transaction for `close()`; refused once the database is closed."""
        self._after_fork()
        with self._flight:
            if self._closed:
                raise BackendError("the SQLite memory service is closed")
            self._active += 1
        self._depth.n = getattr(self._depth, "n", 0) + 1
        try:
            yield
        finally:
            self._depth.n -= 1
            with self._flight:
                self._active -= 1
                self._flight.notify_all()

    # -- transactions ---------------------------------------------------------

    def write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` in one `BEGIN IMMEDIATE` transaction; commit, or roll back and raise."""
        with self.write_lock:
            return self._run(work, "BEGIN IMMEDIATE")

    def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` in one read transaction: every query sees the same snapshot."""
        if self.memory:
            with self.write_lock:
                return self._run(work, "BEGIN")
        return self._run(work, "BEGIN")

    def read_detached(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`read` on a connection of its own, opened and closed here.

        For background threads: `close()` closes every shared connection and
        must never close one under a running query (that can crash sqlite3).
        A ":memory:" database has one connection, used behind the lock.
        """
        if self.memory:
            return self.read(work)
        if self._closed:
            raise BackendError("the SQLite memory service is closed")
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=0)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            conn.execute("BEGIN")
            return work(conn)
        finally:
            conn.close()

    def _run(self, work: Callable[[sqlite3.Connection], T], begin: str) -> T:
        with self._in_flight():
            return self._run_open(work, begin)

    def _run_open(self, work: Callable[[sqlite3.Connection], T], begin: str) -> T:
        conn = self.connection()

        def transaction() -> T:
            conn.execute(begin)
            try:
                result = work(conn)
                conn.execute("COMMIT")
                return result
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

        return self._with_retry(transaction, "operation")

    # -- schema ---------------------------------------------------------------

    def _setup(self) -> None:
        conn = self.connection()
        if not self.memory:
            self._with_retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone(), "setup")
        self.write(self._migrate)

    def migrate(self) -> int:
        """Apply the migrations the file lacks (opening it did already); how many ran."""
        return self.write(self._migrate)

    def _with_retry(self, action: Callable[[], T], what: str) -> T:
        """Run `action`, retried with backoff while the database is busy or locked."""
        delay = 0.005
        for attempt in range(self._retries + 1):
            try:
                return action()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or attempt == self._retries:
                    raise BackendError(f"SQLite {what} failed: {exc}") from exc
                logger.debug("database busy (attempt %d), retrying", attempt + 1)
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.5)
            except sqlite3.Error as exc:
                raise BackendError(f"SQLite {what} failed: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _migrate(self, conn: sqlite3.Connection) -> int:
        """Apply the migrations this file lacks, then check the recorded language
        (a new file records this one); returns how many migrations ran."""
        conn.execute(CREATE_MIGRATIONS_TABLE)
        (done,) = conn.execute(
            "SELECT coalesce(max(version), 0) FROM langmem_migrations"
        ).fetchone()
        if done > len(MIGRATIONS):
            raise BackendError(
                f"database schema version {done} is newer than this package knows "
                f"({len(MIGRATIONS)}); upgrade langmem-trpc"
            )
        for version in range(done + 1, len(MIGRATIONS) + 1):
            for statement in MIGRATIONS[version - 1]:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO langmem_migrations (version, applied_at) VALUES (?, ?)",
                (version, time.time_ns() // 1000),
            )
            logger.info("applied SQLite schema migration %d", version)
        if done == 0:  # a new file: its documents will be in this service's language
            conn.execute(
                "UPDATE langmem_settings SET value = ? WHERE key = 'language'",
                (self.language.name,),
            )
        (stored,) = conn.execute(
            "SELECT value FROM langmem_settings WHERE key = 'language'"
        ).fetchone()
        if stored != self.language.name:
            raise ConfigurationError(
                f"language: the database {self.path!r} was written with language {stored!r},"
                f" not {self.language.name!r}; open it with language={stored!r}"
            )
        return len(MIGRATIONS) - int(done)
