"""SQLite thread claims as byte-range locks on a `<database>-claims` file.

A claim must not cost a SQLite write transaction: writers serialise on the one write
lock, and a third write per job cut the worker's throughput by 30%. So a service holds
its claims in memory (owner and expiry per thread, the rules of every backend) and
excludes other services with a lock on one byte of the claims file, at an offset hashed
from (app_name, user_id, thread_id). On Linux it is an open-file-description lock, which
excludes services even in one process; elsewhere a `lockf` lock, which belongs to the
process (docs/reliability.md). The kernel drops either when the process dies, so a
killed job's claim is free at once. ":memory:" claims stay in memory.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import time
from dataclasses import dataclass

from ...errors import BackendError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process claims
    fcntl = None  # type: ignore[assignment]

_OFFSETS = 1 << 62


@dataclass
class _Held:
    owner: str
    expires: float
    offset: int


def _offset(key: tuple[str, str, str]) -> int:
    raw = "\x00".join(key).encode()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big") % _OFFSETS


class FileClaims:
    """The claims one SQLite service holds, and the file locks behind them."""

    def __init__(self, db_path: str | None) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str, str], _Held] = {}
        self._offsets: dict[int, int] = {}
        self._fd: int | None = None
        self._path = db_path
        self._pid = os.getpid()
        if db_path is not None and fcntl is not None:
            try:
                self._fd = os.open(f"{db_path}-claims", os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise BackendError(f"cannot open the claims file: {exc}") from exc
        self._ofd = self._fd is not None and hasattr(fcntl, "F_OFD_SETLK")

    def take(self, key: tuple[str, str, str], owner: str, ttl: float) -> bool:
        now = time.monotonic()
        if os.getpid() != self._pid:
            self._after_fork()
        with self._lock:
            held = self._held.get(key)
            if held is None:
                offset = _offset(key)
                if not self._offsets.get(offset) and not self._lock_byte(offset, True):
                    return False  # another process (or service) holds it
                self._offsets[offset] = self._offsets.get(offset, 0) + 1
                self._held[key] = _Held(owner, now + ttl, offset)
            elif held.owner != owner and held.expires > now:
                return False
            else:
                held.owner, held.expires = owner, now + ttl
            return True

    def holds(self, key: tuple[str, str, str], owner: str) -> bool:
        """`owner` holds the claim (expired but not taken over counts)."""
        with self._lock:
            held = self._held.get(key)
            return held is not None and held.owner == owner

    def renew(self, key: tuple[str, str, str], owner: str, ttl: float) -> None:
        with self._lock:
            held = self._held.get(key)
            if held is not None and held.owner == owner:
                held.expires = time.monotonic() + ttl

    def release(self, key: tuple[str, str, str], owner: str) -> None:
        with self._lock:
            held = self._held.get(key)
            if held is None or held.owner != owner:
                return
            del self._held[key]
            left = self._offsets[held.offset] - 1
            if left:
                self._offsets[held.offset] = left
            else:
                del self._offsets[held.offset]
                self._lock_byte(held.offset, False)

    def purge(self, app_name: str, user_id: str) -> None:
        with self._lock:
            keys = [k for k in self._held if k[:2] == (app_name, user_id)]
        for key in keys:
            held = self._held.get(key)
            if held is not None:
                self.release(key, held.owner)

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
            self._held.clear()
            self._offsets.clear()
        if fd is not None:
            os.close(fd)  # drops every lock this service held

    def _after_fork(self) -> None:
        """A forked child shares the parent's lock file description: open its own."""
        with self._lock:
            self._pid = os.getpid()
            self._held.clear()
            self._offsets.clear()
            if self._fd is not None and self._path is not None:
                self._fd = os.open(f"{self._path}-claims", os.O_RDWR | os.O_CREAT, 0o644)

    def _lock_byte(self, offset: int, take: bool) -> bool:
        if self._fd is None:
            return True
        try:
            if self._ofd:
                kind = fcntl.F_WRLCK if take else fcntl.F_UNLCK
                data = struct.pack("hhqqi4x", kind, os.SEEK_SET, offset, 1, 0)
                fcntl.fcntl(self._fd, fcntl.F_OFD_SETLK, data)
            else:
                mode = (fcntl.LOCK_EX | fcntl.LOCK_NB) if take else fcntl.LOCK_UN
                fcntl.lockf(self._fd, mode, 1, offset, os.SEEK_SET)
        except OSError:
            return False
        return True
