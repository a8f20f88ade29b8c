"""The service contract and the public backend kit: `steps` (the write steps and
`StepExecutor`), `plans` (the write plans), `reads` (the read steps, plans and
`ReadExecutor`), `claim_steps` and `claims` (cursors, claims, dead letters),
`search` (plan and rank), `first_tier` (a hybrid search's masked query and
period fetch), `bm25`, `documents` and `text` (keyword scoring and the
tokeniser), `rules` (validation, fingerprints, limits), `validity`,
`language`, `periods`, `rows` (a row held in process). The reference backend
is `backends.memory`."""

from .protocol import MemoryService, SyncMemoryService
from .rules import Limits

__all__ = ["Limits", "MemoryService", "SyncMemoryService"]
