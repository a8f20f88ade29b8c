"""The validity view (`service/validity.py`) on SQLite: conditions for statements and
masks for the in-memory vector and keyword structures, so a search drops versions
outside its view where it picks candidates (a long chain never fills the pool).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...service.validity import View
from ._sql import to_us

OPEN = np.iinfo(np.int64).max
"""`valid_to` of an open row in the arrays: later than every time."""


def conditions(view: View, now_us: int, prefix: str = "") -> tuple[str, list[Any]]:
    """SQL conditions (each after AND) keeping the rows of `view` at `now_us`."""
    p = prefix
    if view.include_superseded:
        return "", []
    if view.as_of is not None:
        at = to_us(view.as_of)
        return f" AND {p}valid_from <= ? AND ({p}valid_to IS NULL OR {p}valid_to > ?)", [at, at]
    return f" AND {p}superseded_by IS NULL AND ({p}valid_to IS NULL OR {p}valid_to > ?)", [now_us]


def filters_rows(view: View, state: Sequence[Any]) -> bool:
    """Whether `view` can leave out any of a user's live rows: `state` is the user's
    `SELECT_STATE` row (n_superseded, n_ending at 5 and 6)."""
    if view.include_superseded:
        return False
    return view.as_of is not None or bool(state[5]) or bool(state[6])


@dataclass(frozen=True)
class Validity:
    """The validity columns of a cached structure's rows, aligned with its `rids`."""

    valid_from: np.ndarray
    """int64 microseconds."""
    valid_to: np.ndarray
    """int64 microseconds; `OPEN` when the row has none."""
    superseded: np.ndarray
    """bool: a newer version replaced the row."""
    all_current: bool
    """No row is superseded or has an end: the CURRENT view keeps every row."""

    @classmethod
    def of(cls, rows: Sequence[tuple[int, int | None, Any]]) -> Validity:
        """From (valid_from, valid_to or None, superseded) per row."""
        n = len(rows)
        valid_to = np.fromiter((OPEN if r[1] is None else r[1] for r in rows), np.int64, n)
        superseded = np.fromiter((bool(r[2]) for r in rows), dtype=bool, count=n)
        return cls(
            np.fromiter((r[0] for r in rows), dtype=np.int64, count=n),
            valid_to,
            superseded,
            not superseded.any() and bool((valid_to == OPEN).all()),
        )

    @classmethod
    def concat(cls, parts: Sequence[Validity]) -> Validity:
        return cls(
            np.concatenate([p.valid_from for p in parts]),
            np.concatenate([p.valid_to for p in parts]),
            np.concatenate([p.superseded for p in parts]),
            all(p.all_current for p in parts),
        )

    @property
    def nbytes(self) -> int:
        return int(self.valid_from.nbytes + self.valid_to.nbytes + self.superseded.nbytes)

    def mask(self, view: View, now_us: int, rows: np.ndarray | None = None) -> np.ndarray | None:
        """Which rows (all, or those at positions `rows`) `view` keeps at `now_us`;
        None when it keeps every row."""
        if view.include_superseded or (view.as_of is None and self.all_current):
            return None
        pick = slice(None) if rows is None else rows
        valid_to = self.valid_to[pick]
        if view.as_of is not None:
            at = to_us(view.as_of)
            mask: np.ndarray = (self.valid_from[pick] <= at) & (valid_to > at)
            return mask
        mask = ~self.superseded[pick] & (valid_to > now_us)
        return mask
