"""The statements of a sans-I/O plan: what a PostgreSQL plan yields and what runs it.

A plan is a generator: it yields `Sql` (run it, send back the rows), `Copy` (stream
rows in, send back nothing) or `Embed` (embed these texts, send back the vectors)
and returns the result; an `Op` is a plan plus whether it writes. Every plan module
(`_plans`, `_reads`, `_bulk`, `_claims`, ...) builds on these, and the drivers (`sync.py`,
`aio.py`) execute them; this module imports none of them, so they never import
each other for the vocabulary.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Sql:
    """Run one statement; the driver sends back its rows (dicts), or [] without a result set."""

    sql: str
    params: dict[str, Any] | Sequence[Any] | None = None


@dataclass(frozen=True)
class Embed:
    """Embed texts with the service's embedder; the driver sends back the vectors."""

    texts: list[str]
    query: bool = False


@dataclass(frozen=True)
class Copy:
    """Stream rows into a table with binary COPY; `types` are the columns' PostgreSQL types."""

    sql: str
    types: Sequence[str]
    rows: Sequence[Sequence[Any]]


Step = Sql | Embed | Copy
Plan = Generator[Step, Any, T]


@dataclass(frozen=True)
class Op:
    """A plan plus whether it writes (writes run in one transaction)."""

    plan: Plan[Any]
    write: bool
    checks_language: bool = True
    """False for setup, which checks (and on a new database records) the language itself."""
