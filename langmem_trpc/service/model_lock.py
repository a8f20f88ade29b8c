"""A shared/exclusive lock between a service's operations and its own re-embed cutover.

Every search and write holds it shared from the moment it picks the embedder
until its transaction ends; the cutover holds it exclusively while it commits
and switches the service to the new embedder. So no operation of the service
that re-embeds ever pairs a vector of one model with a store of the other, and
none fails for the switch either (other services refuse instead: they cannot
switch by themselves).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ModelLock"]


class ModelLock:
    """Many shared holders or one exclusive holder; a waiting exclusive one blocks new
    shared holders, so a cutover is not starved by a steady stream of searches."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                if not self._shared:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            try:
                while self._exclusive or self._shared:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()
