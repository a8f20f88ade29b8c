"""`StoreInfo`: what `langmem-trpc info` reports about a store (`store_info()`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .identity import EmbedderIdentity

__all__ = ["StoreInfo"]


@dataclass(frozen=True)
class StoreInfo:
    """A store's backend, schema version, recorded embedder and counts.

    `reembed_target` and `reembed_done` describe a re-embed in progress (the model
    it moves to, and how many memories already hold a new vector); None otherwise.
    """

    backend: str
    schema_version: str
    embedder: EmbedderIdentity | None
    users: int
    live: int
    deleted: int
    reembed_target: EmbedderIdentity | None = None
    reembed_done: int | None = None

    def as_dict(self) -> dict[str, Any]:
        def identity(found: EmbedderIdentity | None) -> dict[str, Any] | None:
            if found is None:
                return None
            return {"name": found.name, "dims": found.dims, "generation": found.generation}

        return {
            "backend": self.backend,
            "schema_version": self.schema_version,
            "embedder": identity(self.embedder),
            "users": self.users,
            "memories": {"live": self.live, "deleted": self.deleted},
            "reembed": None
            if self.reembed_target is None
            else {"target": identity(self.reembed_target), "done": self.reembed_done},
        }
