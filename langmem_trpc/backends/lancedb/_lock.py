"""The directory lock: one `LanceDBMemoryService` per LanceDB directory, across processes.

The service's cache, claims and write order are its own (no `CROSS_PROCESS`), so a
second service writing the same directory (another process, or the same one) could
undo a purge with a stale cache or break a user's capacity. Each service therefore
holds an exclusive OS lock on `LOCK_FILE` in the directory from construction to
`close()` (`flock` on POSIX, `msvcrt.locking` on Windows); the OS drops it when the
process dies, so a crash leaves no stale lock. A remote URI (`s3://...`) has no file
to lock and is not guarded.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable
from pathlib import Path

from ...errors import ConfigurationError

LOCK_FILE = ".langmem-trpc.lock"

if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock(fd: int) -> None:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # per open file: a second open conflicts


class DirectoryLock:
    """An exclusive lock on `directory` (created when missing), held until `release()`
    or until this object is collected; `ConfigurationError` naming the directory when
    another service holds it."""

    def __init__(self, directory: str | Path) -> None:
        self.path: Path | None = None
        self._release: Callable[[], object] = lambda: None
        if "://" in str(directory):
            return
        self.path = Path(directory) / LOCK_FILE
        Path(directory).mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            _try_lock(fd)
        except OSError:
            os.close(fd)
            raise ConfigurationError(
                f"lancedb: the directory {directory} is in use by another "
                "LanceDBMemoryService (in this process or another; lock file "
                f"{self.path}). LanceDB's service is one process's: close the other one "
                "first, or use SQLite or PostgreSQL to share memories between processes"
            ) from None
        self._release = weakref.finalize(self, os.close, fd)

    def release(self) -> None:
        """Give the lock up (closing its file); idempotent."""
        self._release()
