"""Which versions of a memory a read returns: the validity rules of the backend kit.

Every memory carries business time, when it was true in the world, apart from
system time (`created_at`, `updated_at`, `history()`), when the store learnt it:

* `Entry.valid_from`: when it became true (the event time, else the time of the
  message it came from, else its creation);
* `Entry.valid_to`: when it stopped being true (None: still true). A supersede
  sets it to the new version's `valid_from`; what was said ("until Friday",
  the extractor's `valid_until`) sets it ahead of time;
* `Entry.superseded_by`: the id of the version that replaced it.

A read chooses versions with a `View`:

* `CURRENT` (the default): rows no newer version replaced (`superseded_by IS
  NULL`) whose validity has not lapsed (`valid_to IS NULL OR valid_to > now`).
  `valid_from` is not checked: a plan in the future ("moving to Berlin in
  March") is current knowledge.
* `as_of=t`: what was true at `t`, superseded versions included:
  `valid_from <= t AND (valid_to IS NULL OR valid_to > t)`.
* `include_superseded=True`: every version, current or not.

Soft-deleted rows are never returned by any view, and the TTL (`expires_at`)
hides a row under every view. A backend applies the view where it filters live
rows (inside its statements where it has them, so a long chain of old versions
never crowds a search's candidate pool); `View.visible` is the same rule in
Python, for backends that filter in memory and for the conformance suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .. import _time
from ..errors import InvalidInputError
from ..types import Entry, SearchOptions

__all__ = ["CURRENT", "View", "check_view", "view_of"]


@dataclass(frozen=True, slots=True)
class View:
    """Which versions a read returns (see the module docstring)."""

    as_of: datetime | None = None
    include_superseded: bool = False

    @property
    def current(self) -> bool:
        """The default view: current memories only."""
        return self.as_of is None and not self.include_superseded

    def visible(self, entry: Entry, now: datetime) -> bool:
        """Whether `entry` (a live, unexpired row) belongs to this view at `now`."""
        if self.include_superseded:
            return True
        if self.as_of is not None:
            start_ok = entry.valid_from <= self.as_of
            return start_ok and (entry.valid_to is None or entry.valid_to > self.as_of)
        return entry.superseded_by is None and (entry.valid_to is None or entry.valid_to > now)


CURRENT = View()


def check_view(as_of: object = None, include_superseded: object = False) -> View:
    """`read()`'s keyword arguments as a `View`: `as_of` an aware datetime or a date
    string (zone-less means UTC), `include_superseded` a bool, not both."""
    when = _time.parse_time_or_raise(as_of, "as_of")
    if not isinstance(include_superseded, bool):
        raise InvalidInputError("include_superseded", "must be True or False")
    if when is not None and include_superseded:
        raise InvalidInputError(
            "include_superseded", "cannot be combined with as_of (as_of already chooses versions)"
        )
    return View(when, include_superseded)


def view_of(options: SearchOptions) -> View:
    """The view a search asks for."""
    return View(options.as_of, options.include_superseded)
