"""Which embedder made a store's vectors: the record every durable backend keeps.

Vectors from two models live in two different spaces; comparing them gives no
error, only useless rankings. So a store records the embedder that wrote its
vectors (`EmbedderIdentity`) and refuses another one at open, pointing to the
re-embed (`langmem-trpc reembed`, `svc.reembed`) that moves it to a new model.

Two models are told apart by a probe: the embedding of `PROBE_TEXT`. The
dimension alone cannot tell two 384-dimension models apart, nor a name (the
same model can be reached through differently named wrappers). Hosted APIs
return slightly different floats for the same text from call to call (batching,
hardware), so probes match when their cosine similarity is at least
`PROBE_MIN_COSINE` (0.99): that noise is far smaller (cosine > 0.999 in
practice), while two different models, or one model at another `dimensions`
setting, put an unrelated text at a cosine near 0 (never above ~0.9).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = [
    "PROBE_MIN_COSINE",
    "PROBE_TEXT",
    "EmbedderIdentity",
    "aidentify",
    "check_identity",
    "embedder_name",
    "identify",
]

PROBE_TEXT = "langmem-trpc embedding probe: the quick brown fox jumps over the lazy dog."
"""The fixed text whose embedding tells two models apart."""

PROBE_MIN_COSINE = 0.99
"""Probes at least this similar are the same model (see the module docstring)."""

REEMBED_HINT = (
    "open it with the recorded embedder, or move the store to the new one with "
    "`langmem-trpc reembed --db URL --embeddings MODULE:ATTR` (or `svc.reembed(new_embeddings)`)"
)
"""The way forward on a backend that can re-embed (`service/reembed.py`)."""
NO_REEMBED_HINT = "open it with the recorded embedder (this backend cannot re-embed a store yet)"


@dataclass(frozen=True)
class EmbedderIdentity:
    """A store's embedder: `name` (for people), `dims` and `probe` (for the comparison).

    `generation` counts the re-embeds the store went through: a service remembers
    the one it opened and refuses to search or write once a re-embed moved past it.
    """

    name: str
    dims: int
    probe: tuple[float, ...]
    generation: int = 0

    def matches(self, other: EmbedderIdentity) -> bool:
        """The same model: same dimension and probes within `PROBE_MIN_COSINE`."""
        return self.dims == other.dims and cosine(self.probe, other.probe) >= PROBE_MIN_COSINE

    def describe(self) -> str:
        return f"{self.name!r} ({self.dims} dimensions)"

    def to_json(self) -> str:
        data = {"name": self.name, "dims": self.dims, "generation": self.generation}
        return json.dumps(data | {"probe": [round(x, 7) for x in self.probe]})

    @classmethod
    def from_json(cls, text: str) -> EmbedderIdentity:
        data: dict[str, Any] = json.loads(text)
        probe = tuple(float(x) for x in data["probe"])
        return cls(str(data["name"]), int(data["dims"]), probe, int(data.get("generation", 0)))

    def with_generation(self, generation: int) -> EmbedderIdentity:
        return EmbedderIdentity(self.name, self.dims, self.probe, generation)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b):
        return 0.0
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(x * x for x in b))
    if na == 0 or nb == 0:
        return 0.0
    return sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)


def embedder_name(embeddings: Embeddings) -> str:
    """The embedder's `model` / `model_name` attribute where it has one, else its class."""
    for attr in ("model", "model_name"):
        value = getattr(embeddings, attr, None)
        if isinstance(value, str) and value:
            return value
    cls = type(embeddings)
    return f"{cls.__module__}.{cls.__qualname__}"


def from_probe(embeddings: Embeddings, probe: Sequence[float]) -> EmbedderIdentity:
    return EmbedderIdentity(embedder_name(embeddings), len(probe), tuple(float(x) for x in probe))


def identify(embeddings: Embeddings) -> EmbedderIdentity:
    """The identity of `embeddings` (one `embed_query` of `PROBE_TEXT`)."""
    return from_probe(embeddings, embeddings.embed_query(PROBE_TEXT))


async def aidentify(embeddings: Embeddings) -> EmbedderIdentity:
    """Async twin of `identify`."""
    return from_probe(embeddings, await embeddings.aembed_query(PROBE_TEXT))


def check_identity(
    stored: EmbedderIdentity | None,
    current: EmbedderIdentity,
    where: str,
    hint: str = REEMBED_HINT,
) -> EmbedderIdentity:
    """The identity the store keeps: `stored`, or `current` for a store that records none
    yet. Raises `ConfigurationError` naming both when `current` is another model."""
    if stored is None:
        return current
    if not current.matches(stored):
        raise mismatch_error(stored, current, where, hint)
    return stored


def mismatch_error(
    stored: EmbedderIdentity, current: EmbedderIdentity, where: str, hint: str = REEMBED_HINT
) -> ConfigurationError:
    what = (
        f"makes {current.dims}-dimension vectors"
        if current.dims != stored.dims
        else "is another model of that dimension (its probe embedding differs)"
    )
    return ConfigurationError(
        f"embeddings: the store {where} holds {stored.dims}-dimension vectors of "
        f"{stored.name!r}, but the embedder {current.name!r} {what}; {hint}"
    )


def stale_error(where: str, opened: int, now: EmbedderIdentity) -> ConfigurationError:
    """A service whose store was re-embedded since it opened (generation moved on)."""
    return ConfigurationError(
        f"embeddings: the store {where} was re-embedded with {now.describe()} "
        f"(generation {now.generation}) after this service opened it (generation {opened}); "
        "reopen it with the new embedder"
    )
