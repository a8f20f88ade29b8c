"""The existing memories an extraction job shows the model: found for every turn of the delta.

One query made of the whole delta finds nothing on a keyword-only service (the
embedded default): keyword scores measure how much of the query a memory
covers, so a multi-turn query dilutes every match below the threshold. So
`existing_queries` makes one query per turn (long turns per sentence) and
`load_existing` merges their hits, on every backend (docs/how-it-works.md).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from langchain_core.messages import BaseMessage

from ..errors import LangmemTrpcError
from ..service.protocol import MemoryService
from ..types import Entry, SearchOptions, UserKey
from .delta import message_text

__all__ = [
    "EXISTING_FALLBACK_LIMIT",
    "MAX_EXISTING",
    "MAX_QUERIES",
    "PER_QUERY",
    "PIECE_WORDS",
    "existing_queries",
    "existing_query",
    "load_existing",
    "merge_ranked",
]

logger = logging.getLogger(__name__)

EXISTING_FALLBACK_LIMIT = 10
"""Recent memories read when the existing-memory search fails."""
MAX_POLICY_QUERY_BYTES = 7 * 1024
"""Longest single query (a longer turn is cut in the middle)."""
OMISSION_MARKER = "\n...\n"
PIECE_WORDS = 24
"""A turn longer than this is searched sentence by sentence (pieces of at most this many words)."""
MIN_PIECE_WORDS = 4
"""A shorter sentence is searched together with the next one."""
KEYWORD_MIN_SCORE = 0.2
"""Score floor of this search on a keyword-only service (default 0.3: a turn mentioning a stored
fact among other words scores about that, and the model should see it; hybrid keeps its own)."""
PER_QUERY = 5
"""Results kept per query."""
MAX_QUERIES = 64
"""Searches per batch at most; every turn keeps its first piece before any gets a second."""
MAX_EXISTING = 20
"""Existing memories shown to the model at most."""

_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|\n+")


def _cap(text: str, limit: int = MAX_POLICY_QUERY_BYTES) -> str:
    raw = text.encode()
    if len(raw) <= limit:
        return text
    head = (limit - len(OMISSION_MARKER)) // 2
    tail = limit - len(OMISSION_MARKER) - head
    start = raw[:head].decode(errors="ignore")
    end = raw[len(raw) - tail :].decode(errors="ignore")
    return (start + OMISSION_MARKER + end).strip()


def _pieces(text: str) -> list[str]:
    """`text` whole when short, else one piece per sentence (at most PIECE_WORDS words each);
    a sentence under `MIN_PIECE_WORDS` words joins the next ("Yes. We moved to Go 1.24.")."""
    if len(text.split()) <= PIECE_WORDS:
        return [text]
    pieces: list[str] = []
    pending: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        pending.extend(sentence.split())
        if len(pending) < MIN_PIECE_WORDS:
            continue
        pieces.extend(
            " ".join(pending[i : i + PIECE_WORDS]) for i in range(0, len(pending), PIECE_WORDS)
        )
        pending = []
    if pending:
        pieces.append(" ".join(pending))
    return pieces


def _spread(per_turn: list[list[str]], limit: int) -> list[str]:
    """At most `limit` queries: every turn's first piece, then second pieces, and so on."""
    by_rank = sorted((r, t) for t, pieces in enumerate(per_turn) for r in range(len(pieces)))
    chosen = {(t, r) for r, t in by_rank[:limit]}
    return [
        p for t, pieces in enumerate(per_turn) for r, p in enumerate(pieces) if (t, r) in chosen
    ]


def existing_queries(messages: Sequence[BaseMessage], policy: str) -> list[str]:
    """One query per turn (long turns per sentence): user turns for merge_similar, else every
    turn; at most `MAX_QUERIES`, spread by `_spread`."""
    kinds = ("human",) if policy == "merge_similar" else ("human", "ai")
    seen: set[str] = set()
    per_turn: list[list[str]] = []
    for message in messages:
        text = message_text(message).strip() if message.type in kinds else ""
        pieces = [p for p in _pieces(_cap(text)) if p.strip() and p not in seen] if text else []
        seen.update(pieces)
        if pieces:
            per_turn.append(pieces)
    return _spread(per_turn, MAX_QUERIES)


existing_query = existing_queries
"""The queries `load_existing` runs for a batch (the job's name for `existing_queries`)."""


def merge_ranked(results: Sequence[Sequence[Entry]], limit: int = MAX_EXISTING) -> list[Entry]:
    """Round-robin by rank over the result lists, each id once, at most `limit`."""
    merged: list[Entry] = []
    seen: set[str] = set()
    depth = max((len(r) for r in results), default=0)
    for rank in range(depth):
        for hits in results:
            if rank < len(hits) and hits[rank].id not in seen:
                seen.add(hits[rank].id)
                merged.append(hits[rank])
                if len(merged) >= limit:
                    return merged
    return merged


def load_existing(
    service: MemoryService, user: UserKey, queries: str | Sequence[str]
) -> list[Entry]:
    """The memories to show the model for a batch whose search queries are `queries`.

    A user with at most `MAX_EXISTING` memories gets them all (one read: a keyword
    score over a tiny corpus says little), else one search per query, `merge_ranked`.
    A failed search falls back to the 10 most recent; failed search and read fail the job.
    """
    wanted = [q for q in ([queries] if isinstance(queries, str) else queries) if q.strip()]
    if not wanted:
        return []
    recent: list[Entry] | None = None
    read_error: Exception | None = None
    try:
        recent = service.read(user, MAX_EXISTING + 1)
    except Exception as exc:  # the searches may still work
        read_error = exc
    if recent is not None and len(recent) <= MAX_EXISTING:
        return recent
    floor = None if getattr(service, "supports_vectors", False) else KEYWORD_MIN_SCORE
    options = SearchOptions(max_results=PER_QUERY, similarity_threshold=floor)
    try:
        return merge_ranked([service.search(user, q, options) for q in wanted])
    except Exception as search_error:
        if recent is not None:
            logger.warning(
                "auto_memory: existing-memory search failed, using recent: %s", search_error
            )
            return recent[:EXISTING_FALLBACK_LIMIT]
        raise LangmemTrpcError(
            f"search existing memories failed: {search_error}; fallback read failed: {read_error}"
        ) from search_error
