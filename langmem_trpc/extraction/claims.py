"""A job's claim on its thread, held in the backend, and the dead letters it writes.

A job with work claims its thread (`MemoryService.claim_thread`) before it
calls the model and recomputes its delta from the cursor read under the
claim, so two processes never send the same messages to the extractor: the
second waits (polling, within its deadline), then finds them covered. Every
cursor write (`save_progress`) renews the claim; the claim of a job that died
expires after its TTL and the next job extracts the delta again.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage, messages_to_dict

from ..errors import LangmemTrpcError
from ..service.protocol import MemoryService
from ..service.rules import utcnow
from ..types import DeadLetter, ExtractionCursor, ThreadClaim, UserKey
from .delta import message_keys

__all__ = ["ClaimLostError", "HeldClaim", "ThreadBusyError", "batch_key", "dead_letter_for"]

logger = logging.getLogger(__name__)

POLL_START = 0.01
POLL_MAX = 0.25


class ThreadBusyError(LangmemTrpcError):
    """Another job (another process) held the thread's claim for as long as this job could wait."""


class ClaimLostError(LangmemTrpcError):
    """The claim expired and another job took the thread over; this job wrote no cursor."""


def batch_key(batch: Sequence[BaseMessage]) -> str:
    """Identity of a batch for counting failed attempts: a hash of its message keys."""
    return hashlib.blake2b(message_keys(batch), digest_size=16).hexdigest()


def dead_letter_for(
    user: UserKey, thread_id: str, batch: Sequence[BaseMessage], error: str, attempts: int
) -> DeadLetter:
    now = utcnow()
    return DeadLetter(
        id=uuid.uuid4().hex,
        app_name=user.app_name,
        user_id=user.user_id,
        thread_id=thread_id,
        error=error[:2000],
        attempts=attempts,
        message_ids=[m.id for m in batch if m.id],
        messages=messages_to_dict(list(batch)),
        created_at=now,
        updated_at=now,
    )


@dataclass
class HeldClaim:
    """One job's claim: every write under it, and its release."""

    service: MemoryService
    user: UserKey
    thread_id: str
    owner: str
    ttl: float
    claim: ThreadClaim
    released: bool = False

    @classmethod
    def take(
        cls, service: MemoryService, user: UserKey, thread_id: str, ttl: float, wait: float | None
    ) -> HeldClaim:
        """Claim the thread, polling while another owner holds it, for at most `wait` s."""
        owner = uuid.uuid4().hex
        until = time.monotonic() + (ttl if wait is None else wait)
        delay = POLL_START
        while True:
            claim = service.claim_thread(user, thread_id, owner, ttl)
            if claim is not None:
                return cls(service, user, thread_id, owner, ttl, claim)
            left = until - time.monotonic()
            if left <= 0:
                raise ThreadBusyError(
                    f"thread {thread_id!r} is claimed by another job; its cursor did not move"
                )
            time.sleep(min(delay, left))
            delay = min(delay * 2, POLL_MAX)

    def save(
        self,
        *,
        cursor: ExtractionCursor | None = None,
        dead_letter: DeadLetter | None = None,
        resolved: Sequence[str] = (),
        final: bool = False,
    ) -> None:
        """Write under the claim; renew it, or release it when `final`."""
        saved = self.service.save_progress(
            self.user,
            self.thread_id,
            self.owner,
            cursor=cursor,
            ttl=None if final else self.ttl,
            dead_letter=dead_letter,
            resolved=resolved,
        )
        if not saved:
            self.released = True
            raise ClaimLostError(
                f"the claim on thread {self.thread_id!r} expired and was taken over"
            )
        self.released = final

    def fail(self, batch: str, error: str) -> int:
        """Count a failed attempt on `batch`; how many there have been in a row."""
        return self.service.record_failure(self.user, self.thread_id, self.owner, batch, error)

    def release(self) -> None:
        """Give the claim back; if the backend is unreachable, it expires after its TTL."""
        if not self.released:
            self.released = True
            try:
                self.service.release_thread(self.user, self.thread_id, self.owner)
            except Exception as exc:
                logger.warning(
                    "auto_memory: could not release the claim on thread %r (it expires in %s s): %s",
                    self.thread_id,
                    self.ttl,
                    exc,
                )
