"""The LanceDB `ClaimExecutor`: cursors, claims and dead letters as thread rows.

Each thread (its cursor, claim, failed attempts and dead letters) is one row of
`records` (`THREAD`, JSON in `body`). The rows are read into the kit's
`ClaimTable` at open; each step runs on that table under the service's lock and
a step that changed a thread writes the thread's row as one table version before
it returns (the table stays the truth: a refused write reloads every thread from
it). Claim expiry is this process's clock, which is honest because the directory
lock keeps every other service out (LanceDB declares no `CROSS_PROCESS`).
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from ...service import claim_steps as cs
from ...service.claims import Claim, ClaimTable
from ...types import DeadLetter, ExtractionCursor, UserKey
from ._records import THREAD, record

if TYPE_CHECKING:
    from ._host import LanceDBHost

_BYTES = ("message_keys", "retired_keys")
"""The cursor's bytes fields, stored as base64 in the JSON body."""


class Threads:
    """The service's threads (see the module docstring); a `ClaimExecutor`."""

    def __init__(self, service: LanceDBHost) -> None:
        self._service = service
        self.table = self.load()

    def load(self) -> ClaimTable:
        """Every thread's cursor, claim and dead letters from the table, afresh (also
        kept as `table`)."""
        table = self.table = ClaimTable(self._service._lock)
        for row in self._service._scan(f"rec = '{THREAD}'", ["app", "user", "body"]).to_pylist():
            body = json.loads(row["body"])
            key = (UserKey(row["app"], row["user"]), body["thread_id"])
            if body["cursor"] is not None:
                raw = {n: base64.b64decode(body["cursor"][n]) for n in _BYTES}
                table.cursors[key] = ExtractionCursor.model_validate(body["cursor"] | raw)
            if body["claim"] is not None:
                table.claims[key] = Claim(**body["claim"])
            table.letters |= {d["id"]: DeadLetter.model_validate(d) for d in body["letters"]}
        return table

    def _store(self, user: UserKey, thread_id: str) -> None:
        """Write the thread's row (one table version)."""
        try:
            self._service._write([self._row(user, thread_id)])
        except BaseException:
            self.load()
            raise

    def _row(self, user: UserKey, thread_id: str) -> dict[str, Any]:
        table, key = self.table, (user, thread_id)
        mine = [d for d in table.letters.values() if (d.user, d.thread_id) == key]
        cursor, claim = table.cursors.get(key), table.claims.get(key)
        body: dict[str, Any] = {"thread_id": thread_id, "cursor": None}
        body["letters"] = [d.model_dump(mode="json") for d in mine]
        if cursor is not None:
            raw = {n: base64.b64encode(getattr(cursor, n)).decode() for n in _BYTES}
            body["cursor"] = cursor.model_dump(mode="json", exclude=set(_BYTES)) | raw
        body["claim"] = None if claim is None else asdict(claim)
        return record(THREAD, user, thread_id, json.dumps(body))

    # -- the steps (`ClaimExecutor`) ----------------------------------------------

    def lock_thread(self, step: cs.LockThread) -> bool:
        taken = self.table.lock_thread(step)
        if taken:
            self._store(step.user, step.thread_id)
        return taken

    def unlock_thread(self, step: cs.UnlockThread) -> None:
        held = self.table.claims.get((step.user, step.thread_id))
        if held is not None and held.owner == step.owner:  # else nothing changes
            self.table.unlock_thread(step)
            self._store(step.user, step.thread_id)

    def read_thread(self, step: cs.ReadThread) -> cs.ThreadState:
        return self.table.read_thread(step)

    def write_thread(self, step: cs.WriteThread) -> bool:
        written = self.table.write_thread(step)
        if written:
            self._store(step.user, step.thread_id)
        return written

    def count_failure(self, step: cs.CountFailure) -> int:
        attempts = self.table.count_failure(step)
        self._store(step.user, step.thread_id)
        return attempts

    def list_letters(self, step: cs.ListLetters) -> list[DeadLetter]:
        return self.table.list_letters(step)

    def retry_letter(self, step: cs.RetryLetter) -> DeadLetter | None:
        letter = self.table.retry_letter(step)
        if letter is not None:
            self._store(letter.user, letter.thread_id)
        return letter
