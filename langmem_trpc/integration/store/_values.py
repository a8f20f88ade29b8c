"""How `MemoryStore` maps store items to memories and back.

A value is normalised once, on `put`, as LangGraph's database stores keep it
(a JSON round trip, datetimes and UUIDs as strings; NaN, NUL and lone
surrogates refused), so every backend returns the same thing. It is kept whole
in the memory's metadata; the memory text is its first text field (else its
JSON), capped. A key lives under a memory id derived from (scope, key); a key
that spells a UUID in any spelling is read as that UUID.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from langgraph.store.base import Item, get_text_at_path

from ...errors import InvalidInputError, InvalidMemoryError
from ...service.rules import Limits, build_memory, is_blank
from ...types import Entry, Kind
from ..retriever import event_fields

_KINDS = (Kind.FACT.value, Kind.EPISODE.value)
"""The `kind` values that fill the memory's kind, spelled exactly ("Fact" stays in the value only)."""

META = "langgraph_store"
"""The metadata key under which a store-written memory keeps scope, key and value."""


# -- values -------------------------------------------------------------------------------------


def _default(value: object) -> Any:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"a {type(value).__name__} is not JSON-serializable")


def _float(text: str) -> float | int:
    """A JSON float as every backend returns it: one of 1e16 or more (no fraction, and
    spelled with an exponent) is the integer its text spells, as PostgreSQL's JSONB
    gives it back."""
    number = float(text)
    if abs(number) >= 1e16 and number not in (float("inf"), float("-inf")):
        return int(Decimal(text))
    return number


def _check_strings(value: Any, path: str) -> int:
    """Refuse what no backend can keep; returns how many dict keys the value holds."""
    keys = 0
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidMemoryError("value", f"{path} holds a NUL character")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidMemoryError("value", f"{path} holds a lone surrogate") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key, path)
            keys += 1 + _check_strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            keys += _check_strings(item, f"{path}[{index}]")
    return keys


@dataclass(frozen=True, slots=True)
class ValueBounds:
    """How big a store value may be: its JSON in UTF-8 bytes, and its dict keys at
    every depth (`MemoryStore(max_value_bytes=..., max_value_keys=...)`)."""

    max_bytes: int = 1_000_000  # a memory's text is capped at 8,000 characters
    max_keys: int = 10_000


def normalize_value(
    value: Mapping[str, Any], bounds: ValueBounds = ValueBounds()
) -> dict[str, Any]:
    """The value as every backend stores it (a JSON round trip), or InvalidMemoryError."""
    if not isinstance(value, Mapping):
        raise InvalidMemoryError("value", f"must be a dict, got {type(value).__name__}")
    try:
        text = json.dumps(dict(value), default=_default, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidMemoryError("value", f"is not JSON-serializable: {exc}") from None
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > bounds.max_bytes:
        raise InvalidMemoryError(
            "value",
            f"is {size:,} bytes of JSON; the limit is {bounds.max_bytes:,} (max_value_bytes)",
        )
    loaded: dict[str, Any] = json.loads(text, parse_float=_float)
    keys = _check_strings(loaded, "value")
    if keys > bounds.max_keys:
        raise InvalidMemoryError(
            "value", f"holds {keys:,} keys; the limit is {bounds.max_keys:,} (max_value_keys)"
        )
    return loaded


def check_label(field: str, value: str) -> str:
    """A key or scope label must be storable by every backend."""
    if "\x00" in value:
        raise InvalidInputError(field, "must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(field, "holds a lone surrogate") from None
    return value


def memory_text(
    value: Mapping[str, Any],
    fields: Sequence[str],
    max_length: int,
    paths: Sequence[str] | None = None,
) -> str:
    """The searchable text, capped: with `paths` (a put's `index=[...]`, LangGraph's
    path syntax) the texts at those paths, and nothing else even when they match
    nothing; else the first text field (also nested), else the value's JSON."""
    if paths:
        texts = (t for path in paths for t in get_text_at_path(value, path))
        text = "\n".join(t for t in texts if not is_blank(t))
    else:
        found = _text_field(value, fields)
        text = found if found is not None else json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = text.strip()[:max_length].strip()
    return "{}" if is_blank(text) else text  # the service refuses a text that shows nothing


def _text_field(value: Mapping[str, Any], fields: Sequence[str]) -> str | None:
    for name in fields:
        field = value.get(name)
        if isinstance(field, str) and not is_blank(field):
            return field
        if isinstance(field, Mapping):
            for inner in fields:
                nested = field.get(inner)
                if isinstance(nested, str) and not is_blank(nested):
                    return nested
    return None


def memory_fields(value: Mapping[str, Any], limits: Limits) -> dict[str, Any]:
    """Memory fields a value carries; one the service would refuse (65 topics, a bad
    date) is left out of the index, the value keeps it."""
    out: dict[str, Any] = {}
    for name in ("kind", "topics", "participants", "location", "event_time"):
        field = value.get(name)
        if field is None or (name == "kind" and field not in _KINDS):
            continue
        try:
            memory = build_memory("x", limits=limits, **{name: field})
        except InvalidInputError:
            continue
        out[name] = getattr(memory, name)
    return out


# -- keys -------------------------------------------------------------------------------------


def _as_uuid(key: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(key) if 32 <= len(key) <= 45 else None
    except ValueError:  # not hex, or not 32 digits
        return None


def canonical_key(key: str) -> str:
    """A UUID in any spelling becomes its dashed lower-case form; other keys stay as given."""
    parsed = _as_uuid(key)
    return key if parsed is None else str(parsed)


def memory_id(scope: Sequence[str], key: str) -> str:
    """The stable memory id of a (scope, key) inside one user's memories."""
    return _kv_id(scope, canonical_key(key))


def _kv_id(scope: Sequence[str], key: str) -> str:
    payload = json.dumps([list(scope), key], ensure_ascii=False)
    return "kv-" + hashlib.sha256(payload.encode()).hexdigest()[:32]


def id_candidates(scope: Sequence[str], key: str) -> list[str]:
    """Memory ids a (scope, key) may be stored under, most likely first: the store's
    (also an older release's, from the raw spelling), then at the top level a memory
    written elsewhere whose id the key names, literally or as a UUID in any spelling."""
    out = [memory_id(scope, key), _kv_id(scope, key)]
    parsed = _as_uuid(key)
    if not scope and parsed is not None:  # service ids are UUIDs
        out.extend([key, parsed.hex])
    return list(dict.fromkeys(out))


def store_meta(entry: Entry) -> Mapping[str, Any] | None:
    stored = entry.memory.metadata.get(META)
    return stored if isinstance(stored, Mapping) else None


def addresses(entry: Entry, scope: Sequence[str], key: str) -> bool:
    """Whether (scope, key) names this memory."""
    stored = store_meta(entry)
    if stored is None:
        return not scope and canonical_key(key) in {entry.id, canonical_key(entry.id)}
    same_key = canonical_key(str(stored.get("key"))) == canonical_key(key)
    return same_key and list(stored.get("scope") or ()) == list(scope)


def to_item(entry: Entry) -> Item:
    """The store view of a memory (store-written or not)."""
    stored = store_meta(entry)
    if stored is not None:
        value, key = deepcopy(dict(stored["value"])), str(stored["key"])
    else:
        memory = entry.memory
        value = {
            "memory": memory.text,
            "content": memory.text,  # the field langmem's managers read
            "kind": memory.kind.value,
            "topics": list(memory.topics),
            **event_fields(memory),
        }
        key = entry.id
    return Item(
        value=value,
        key=key,
        namespace=namespace_of(entry),
        created_at=entry.created_at,
        updated_at=entry.updated_at,
    )


def namespace_of(entry: Entry) -> tuple[str, ...]:
    """The item's namespace without building the item."""
    stored = store_meta(entry)
    scope = tuple(stored.get("scope") or ()) if stored is not None else ()
    return (entry.app_name, entry.user_id, *scope)


def indexed(entry: Entry) -> bool:
    """False for an item put with `index=False` (kept out of query search)."""
    stored = store_meta(entry)
    return stored is None or stored.get("index", True) is not False
