"""Data that crosses the package boundary: pydantic models, no I/O.

Identity rule (docs/configuration.md points here): `app_name` and `user_id`
are compared exactly as given. Nothing is trimmed, case-folded or
Unicode-normalised, so "alice", "Alice", "alice " and "alice\\u200b" are four
different users. They must be non-empty, not only whitespace, at most
`MAX_ID_LENGTH` characters, free of NUL bytes and valid Unicode (no lone
surrogates). Every backend stores such ids exactly; where a pair becomes one
string (SQLite's keyword-index prefix, PostgreSQL's per-user lock key) it is
length-prefixed, so a separator inside an id cannot join two users.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ._time import ensure_utc, parse_time_or_raise
from .errors import (
    InvalidInputError,
    InvalidMemoryError,
    InvalidTimeError,
    InvalidUserKeyError,
    LangmemTrpcError,
)

__all__ = [
    "MAX_ID_LENGTH",
    "MEMORY_ID_PATTERN",
    "DeadLetter",
    "DeadLetterStatus",
    "Entry",
    "ExtractionCursor",
    "FUSION_STEPS_OFF",
    "HistoryEvent",
    "Kind",
    "Memory",
    "FusionMethod",
    "FusionSettings",
    "Operation",
    "OptionsModel",
    "SearchOptions",
    "Source",
    "ThreadClaim",
    "UserKey",
]

MAX_ID_LENGTH = 512

MEMORY_ID_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@/+=-]{0,511}")
"""What a caller-chosen memory id (`add(memory_id=...)`) must match in full: ASCII letters,
digits and `_ . : @ / + = -`, at most 512 characters. It covers the ids the package makes
(hex UUIDs, the store's "kv-" hashes) and keeps quotes, brackets, spaces and look-alike
letters out of prompts, where an id is shown bare (render.py)."""


class Kind(str, Enum):
    """What a memory is: a stable fact, or an event that happened at a time."""

    FACT = "fact"
    EPISODE = "episode"


class Operation(str, Enum):
    """What a history event records."""

    ADD = "add"
    UPDATE = "update"
    DELETE = "delete"
    CLEAR = "clear"
    RESTORE = "restore"
    """A soft-deleted memory brought back as it was (`MemoryService.undelete`), or a
    superseded version reopened (`MemoryService.restore_version`)."""
    SUPERSEDE = "supersede"
    """A version closed by a newer one (`Entry.superseded_by`), or a newer one closed
    when an older version was restored."""


def text_problem(value: str) -> str | None:
    """Why no backend can store `value` (a NUL byte, a lone surrogate), or None."""
    if "\x00" in value:
        return "must not contain NUL bytes"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (lone surrogate)"
    return None


def check_text_value(field: str, value: str) -> str:
    """Refuse, naming `field`, a string that some backend cannot store exactly.

    PostgreSQL cannot hold NUL in text or jsonb and no backend can encode a
    lone surrogate as UTF-8, so every backend refuses both, up front.
    """
    problem = text_problem(value)
    if problem is not None:
        raise InvalidMemoryError(field, problem)
    return value


def _check_id(error: type[InvalidInputError], field: str, value: object) -> str:
    """A string of at most `MAX_ID_LENGTH` characters that every backend can store."""
    if not isinstance(value, str):
        raise error(field, f"must be a string, got {type(value).__name__}")
    if len(value) > MAX_ID_LENGTH:
        raise error(field, f"must be at most {MAX_ID_LENGTH} characters")
    problem = text_problem(value)
    if problem is not None:
        raise error(field, problem)
    return value


def check_identifier(field: str, value: object) -> str:
    """Validate an app or user id without altering it (see module docstring)."""
    if isinstance(value, str) and not value.strip():
        raise InvalidUserKeyError(field, "must not be empty")
    return _check_id(InvalidUserKeyError, field, value)


def check_optional_id(field: str, value: object) -> str | None:
    """A thread or message id: None, or an id `_check_id` accepts."""
    return None if value is None else _check_id(InvalidMemoryError, field, value)


class UserKey(BaseModel):
    """The isolation scope of every memory operation: one user of one app."""

    model_config = ConfigDict(frozen=True)

    app_name: str
    user_id: str

    def __init__(self, app_name: str, user_id: str) -> None:
        check_identifier("app_name", app_name)
        check_identifier("user_id", user_id)
        super().__init__(app_name=app_name, user_id=user_id)

    @field_validator("app_name", "user_id")
    @classmethod
    def _check(cls, value: str, info: Any) -> str:
        return check_identifier(info.field_name, value)

    def __str__(self) -> str:
        return f"{self.app_name}/{self.user_id}"


def canonical_topics(values: list[str]) -> list[str]:
    """Trim, drop empties, de-duplicate case-insensitively (first spelling wins); order is kept."""
    seen: dict[str, str] = {}
    for raw in values:
        topic = raw.strip()
        if topic and topic.casefold() not in seen:
            seen[topic.casefold()] = topic
    return list(seen.values())


def canonical_participants(values: list[str]) -> list[str]:
    """`canonical_topics`, sorted."""
    return sorted(canonical_topics(values), key=lambda n: (n.casefold(), n))


class Memory(BaseModel):
    """The content of one memory. Construct through the service to get field-named errors."""

    model_config = ConfigDict(frozen=True)

    text: str
    topics: list[str] = Field(default_factory=list)
    kind: Kind = Kind.FACT
    event_time: datetime | None = None
    """When an episode happened (UTC). Facts may carry one too."""
    participants: list[str] = Field(default_factory=list)
    location: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Opaque JSON carried along (the BaseStore adapter keeps the full value here)."""

    @field_validator("event_time", mode="before")
    @classmethod
    def _event_time(cls, value: object) -> datetime | None:
        return parse_time_or_raise(value, "event_time")

    @field_validator("topics", "participants")
    @classmethod
    def _names(cls, value: list[str], info: Any) -> list[str]:
        canonical = canonical_topics if info.field_name == "topics" else canonical_participants
        return canonical(value)

    @field_validator("location")
    @classmethod
    def _location(cls, value: str | None) -> str | None:
        return None if value is None else value.strip() or None


class Entry(BaseModel):
    """A stored memory with its identity and bookkeeping.

    `score` is an absolute relevance in [0, 1], comparable across queries: the cosine
    for the vector leg, the keyword relevance (BM25F, `service.bm25.relevance`) for the
    keyword leg, the higher of the two for a hybrid hit. `rrf_score` is a hybrid hit's
    Reciprocal Rank Fusion sum of the two legs (the vector leg's part weighted by
    `FusionSettings.vector_weight`; None otherwise); the hybrid order
    (`SearchOptions.fusion_method`, then the `FusionSettings` steps) can differ from it.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    app_name: str
    user_id: str
    memory: Memory
    created_at: datetime
    updated_at: datetime
    score: float | None = None
    rrf_score: float | None = None
    expires_at: datetime | None = None
    """When the memory expires (UTC; `set_expiry`, used by MemoryStore's TTL). From
    then on get, read and search hide it until a sweep soft-deletes it."""
    valid_from: datetime = None  # type: ignore[assignment]  # filled by `_default_validity`
    """Business time: when the memory became true (UTC). Defaults to the event time,
    else `created_at`; the write path sets it from the source message's time."""
    valid_to: datetime | None = None
    """Business time: when it stopped being true (UTC; None = still true). Set by a
    supersede (the new version's `valid_from`) or by what was said (`valid_until`)."""
    superseded_by: str | None = None
    """The id of the memory that replaced this version, or None (see `service.validity`)."""

    @model_validator(mode="before")
    @classmethod
    def _default_validity(cls, data: Any) -> Any:
        """A missing `valid_from` is the event time, else the creation time, so every
        entry (an old export's included) has a business-time start."""
        if isinstance(data, dict) and data.get("valid_from") is None:
            memory = data.get("memory")
            event_time = memory.event_time if isinstance(memory, Memory) else None
            if isinstance(memory, dict):  # read as `Memory` reads it: zone-less is UTC
                event_time = parse_time_or_raise(memory.get("event_time"), "event_time")
            data = {**data, "valid_from": event_time or data.get("created_at")}
        return data

    @field_validator("created_at", "updated_at", "expires_at", "valid_from", "valid_to")
    @classmethod
    def _times(cls, value: datetime | None, info: Any) -> datetime | None:
        """Aware and within years 1-9999 in UTC, or an `InvalidTimeError` naming the
        field: an import's out-of-range `expires_at` once broke every later read."""
        return None if value is None else ensure_utc(value, info.field_name)

    @property
    def superseded(self) -> bool:
        """True when a newer version replaced this one (`superseded_by` is set)."""
        return self.superseded_by is not None

    @property
    def user(self) -> UserKey:
        return UserKey(self.app_name, self.user_id)

    @property
    def text(self) -> str:
        return self.memory.text

    @property
    def kind(self) -> Kind:
        return self.memory.kind


FusionMethod = Literal["rrf", "scores"]


_FIELD_ERRORS = (InvalidInputError, InvalidMemoryError, InvalidTimeError)


def input_error(exc: ValidationError) -> LangmemTrpcError:
    """The first pydantic error as ours: the library error a validator raised (an
    `InvalidTimeError` from a date field), else an `InvalidInputError` naming the field."""
    error = exc.errors()[0]
    inner = (error.get("ctx") or {}).get("error")
    field = ".".join(str(part) for part in error["loc"]) or "options"
    if isinstance(inner, InvalidInputError) and type(inner) in _FIELD_ERRORS:
        if error["loc"] and inner.field != str(error["loc"][-1]):  # a nested model's field
            return type(inner)(f"{field}.{inner.field}", inner.problem)
    if isinstance(inner, LangmemTrpcError):
        return inner
    if error["type"] == "extra_forbidden":
        return InvalidInputError(field, f"is not an option of {exc.title}")
    return InvalidInputError(field, error["msg"])


class OptionsModel(BaseModel):
    """Base of the options models: frozen, unknown fields refused, and every bad
    field an `InvalidInputError` (or the `InvalidTimeError` of a date) naming it.

    `SearchOptions(as_of=...)` once returned current results without a word; a
    misspelt option now fails loudly. `model_validate` is pydantic's own and
    still raises its `ValidationError`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise input_error(exc) from None


class FusionSettings(OptionsModel):
    """Knobs of the ranking steps, per search (measured on LoCoMo, docs/bench-locomo.md).

    The hybrid steps rescale the fused score of `SearchOptions.fusion_method`.
    Each knob below is off at 0 (`question_word_weight` at 1.0; `FUSION_STEPS_OFF`);
    every default helped on LoCoMo's development half; the opt-in ones (decompose,
    feedback, session-first, neighbours and their capped / reply-only forms, implied
    time, diversity, period fetch) are off for the reasons given with each
    (docs/bench-locomo.md):

    - `question_word_weight` (keyword leg, every mode): query tokens that are the
      language's question words, auxiliaries or pronouns ("what", "did", "you") weigh
      this much in BM25 instead of 1.0.
    - `context_weight` ("context"): a hit shares in the best fused score of the other
      candidates with the same event time (one conversation session or moment):
      (own + w x other) / (1 + w).
    - `participant_boost` ("participants"): when the query names a participant of some
      candidate ("What did Caroline paint?"), the hits without that participant are
      scaled by 1 / (1 + boost).
    - `time_boost` ("time"): when the query names a calendar period ("in May 2023",
      "on 3 June, 2023", "in 2022") and some candidate's event time falls in it, the
      others are scaled by 1 / (1 + boost): a soft preference, not a filter.
    - `when_boost` ("when"): a question that asks when ("When did ...", "What year ...",
      "how long ago") prefers hits that say a time (a date, month, weekday, "last
      week"): when some candidate does, the others are scaled by 1 / (1 + boost).
      Month names and cue words are the language's.
    - `decompose_weight` ("decompose"): sub-queries (clauses, else content words) score
      the fetched candidates by keyword relevance and vote like one more keyword leg,
      with this total weight. Off by default: it tokenises every fetched candidate once
      per search, about 3 ms on top of a 2 ms SQLite hybrid search at 10,000 memories.
    - `feedback_weight` ("feedback"): pseudo-relevance feedback on the keyword leg: the
      top terms of the best keyword hits score the fetched candidates and vote like one
      more keyword leg, with this weight. Off by default (docs/bench-locomo.md, round 10).
    - `session_weight` ("session-first"): each hit shares in its session's score (the
      mean of the three best fused candidates with its event time): (own + w x session)
      / (1 + w). Off by default.
    - `neighbour_weight` ("neighbours"): each hit gains w x the fused score of the
      candidate just after it (creation order, same event time: the reply in a session).
      Off by default: it passed round 10's dev rule on turns (test 0.773 -> 0.779), but it
      lifts a memory written just before a near-identical match above that match (an
      exact lookup among "Trip 0/1/2 to Kyoto" returns the wrong trip first) and the
      observations arm, the closest to extracted memories, fell 0.009 on test.
    - `neighbour_capped` (with `neighbour_weight`): a hit never rises to or above the
      candidate whose score it borrows (it stays just below it). Off by default: it
      loses on every LoCoMo arm (round 11).
    - `neighbour_replies_only` (with `neighbour_weight`): the candidate after a hit counts
      only when both name participants and the sets differ (a reply is the other
      party's); memories written in a row by the same people gain nothing. Off by
      default: it gains on raw turns but lowers the structured and observation arms.
    - `implied_time_boost` ("implied time"): when the query names a calendar period,
      the hits whose event time is in it or whose text tells of a time counted back
      from the event time ("last month", "two weeks ago": `periods.implied_spans`)
      that meets it are preferred: the others are scaled by 1 / (1 + boost). Off by
      default: it never lowers a LoCoMo arm but gains only 0.002 (few questions name
      a period the event times do not already match).
    - `session_diversity` ("diversity"): among the candidates of one event time (a
      session), the j-th best (j = 0, 1, ...) is scaled by 1 / (1 + w x j), after every
      other step: a top list covering more sessions (MMR's redundancy discount, the
      session as the aspect). Off by default: it helps multi-hop questions and costs
      single-hop ones more.
    - `mask_names` (a first-tier step, on): a hybrid search whose query names a
      participant of its first tier's candidates embeds the query with the name (and
      its possessive) replaced by the language's person word ("What did they paint?")
      and fetches that tier's vector leg again with it: the keyword leg and the
      "participants" step match the name, while in the vector it pulls the memories
      that greet the person by name above what is asked. Such a query costs one more
      query embedding and one more vector fetch of the first tier (round 12).
    - `period_fetch` (a first-tier step): a hybrid search whose query names a dated
      period ("in May 2023") also fetches the first tier within it and merges those
      candidates in, so the "time" step can prefer them. Off by default: alone it
      passed round 12's dev rule, but on top of `mask_names` it adds 0.002.

    `vector_weight`: the vector leg's weight against the keyword leg's 1.0 (it scales the
    leg's half of the "scores" mean; under RRF the leg adds w / (rrf_k + rank)); 0.75 was
    chosen on LoCoMo's development half, 1.0 with "rrf" is the reference's plain RRF.
    `vector_floor` / `keyword_floor`: the minimum absolute score for a leg to vote when
    no explicit threshold is set; `keyword_floor` is also a keyword-only search's default
    threshold. `min_pool`: candidates fetched per leg in a search's first tier, whatever
    max_results is (a deeper tier, 4x, is fetched only when the first ranks fewer than
    max_results, so a page is a slice of one order); a larger pool costs database
    latency for little recall (docs/bench-sqlite.md).
    """

    participant_boost: float = Field(default=1.0, ge=0.0)
    context_weight: float = Field(default=0.7, ge=0.0)
    vector_floor: float = Field(default=0.1, ge=0.0, le=1.0)
    keyword_floor: float = Field(default=0.1, ge=0.0, le=1.0)
    min_pool: int = Field(default=100, ge=1, le=10_000)
    question_word_weight: float = Field(default=0.1, ge=0.0, le=1.0)
    time_boost: float = Field(default=1.0, ge=0.0)
    when_boost: float = Field(default=0.5, ge=0.0)
    decompose_weight: float = Field(default=0.0, ge=0.0)
    vector_weight: float = Field(default=0.75, ge=0.0)
    feedback_weight: float = Field(default=0.0, ge=0.0)
    session_weight: float = Field(default=0.0, ge=0.0)
    neighbour_weight: float = Field(default=0.0, ge=0.0)
    neighbour_capped: bool = False
    neighbour_replies_only: bool = False
    implied_time_boost: float = Field(default=0.0, ge=0.0)
    session_diversity: float = Field(default=0.0, ge=0.0)
    mask_names: bool = True
    period_fetch: bool = False


FUSION_STEPS_OFF: dict[str, float] = {
    "question_word_weight": 1.0,
    "context_weight": 0.0,
    "participant_boost": 0.0,
    "time_boost": 0.0,
    "when_boost": 0.0,
    "decompose_weight": 0.0,
    "feedback_weight": 0.0,
    "session_weight": 0.0,
    "neighbour_weight": 0.0,
    "implied_time_boost": 0.0,
    "session_diversity": 0.0,
    "mask_names": False,
}
"""Each named `FusionSettings` step at the value that switches it off (plain fusion)."""


class SearchOptions(OptionsModel):
    """How to search. The positional query of `search()` overrides `query` here.

    Times are aware datetimes or date strings (zone-less means UTC); a naive datetime,
    an unparseable string or an instant outside years 1-9999 is an `InvalidTimeError`.
    """

    query: str = ""
    kind: Kind | None = None
    time_after: datetime | None = None
    """Keep entries whose event_time is at or after this; entries without event_time pass."""
    time_before: datetime | None = None
    """Keep entries whose event_time is at or before this; entries without event_time pass."""
    max_results: int = Field(default=10, ge=1, le=1000)
    similarity_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    """Minimum absolute score; None means the defaults: cosine 0.3 for a vector-only
    search, keyword relevance `fusion.keyword_floor` (0.1) for a keyword-only one,
    and in hybrid fusion `fusion.vector_floor` / `fusion.keyword_floor` per leg."""
    order_by_event_time: bool = False
    """Use event_time ascending as a tie-break after relevance."""
    kind_fallback: bool = False
    """With `kind` set and fewer than 3 hits, merge an unfiltered search (requested kind first)."""
    deduplicate: bool = False
    """Drop near-duplicates (word-set Jaccard >= 0.80), keeping the higher-scored one."""
    hybrid: bool = True
    """Fuse the vector and keyword legs by `fusion_method` (needs an embedder; keyword-only
    otherwise): on LoCoMo the fused ranking finds far more evidence than either leg alone
    (docs/bench-locomo.md). An explicit `similarity_threshold` filters both legs."""
    fusion_method: FusionMethod = "scores"
    """How hybrid hits are ordered before the `FusionSettings` steps: "scores" (the
    default, chosen on LoCoMo's development half), the mean of the two legs' absolute
    scores (0 for a leg without the hit; the vector half scaled by
    `FusionSettings.vector_weight`); "rrf", the sum of w / (rrf_k + rank) over the two
    legs (k 60 and equal weights is the reference system's). `Entry.rrf_score` is the
    plain RRF sum either way; `rrf_k` only orders hits under "rrf"."""
    rrf_k: int = Field(default=60, ge=1)
    fusion: FusionSettings = FusionSettings()
    """Hybrid ranking knobs for this call; the defaults are what docs/bench-locomo.md measured."""
    as_of: datetime | None = None
    """Return what was true at this time: `valid_from <= as_of < valid_to` (an open
    `valid_to` never ends), superseded versions included. None: current memories only."""
    include_superseded: bool = False
    """Return every version (superseded and lapsed ones too), each with its validity."""

    @field_validator("time_after", "time_before", "as_of", mode="before")
    @classmethod
    def _times(cls, value: object, info: Any) -> datetime | None:
        return parse_time_or_raise(value, info.field_name)

    @field_validator("include_superseded", mode="before")
    @classmethod
    def _strict_flag(cls, value: object) -> bool:
        # as read(include_superseded=...) does: pydantic's lax bool would take "no" as False
        if not isinstance(value, bool):
            raise InvalidInputError("include_superseded", "must be True or False")
        return value

    @model_validator(mode="after")
    def _one_view(self) -> SearchOptions:
        if self.as_of is not None and self.include_superseded:
            raise InvalidInputError(
                "include_superseded",
                "cannot be combined with as_of (as_of already chooses versions)",
            )
        return self


class Source(BaseModel):
    """Where a write came from, recorded in history (thread and message ids).

    Constructing one validates every id (`check_source`): a NUL byte or a lone
    surrogate is an `InvalidMemoryError` naming the field, on every backend.
    """

    model_config = ConfigDict(frozen=True)

    thread_id: str | None = None
    message_ids: list[str] = Field(default_factory=list)
    actor: str | None = None
    """Who wrote: "worker", "tool", "cli", "store" or a caller-chosen label."""
    decision: str | None = None
    """Why this write happened, when an update policy decided it: a short label, the
    decision word then optional `key=value` figures, e.g. "add",
    "update tier=update score=0.72 jaccard=0.45" (reconcile rewrote an add into an
    update of the memory whose probe score or token Jaccard crossed the update
    tier). See `extraction/reconcile.py` for every label. Validated like an id."""

    def __init__(self, **data: Any) -> None:
        _check_source_fields(data)
        super().__init__(**data)

    def with_decision(self, decision: str | None) -> Source:
        """A validated copy of this source recording `decision`."""
        return Source(**{**self.model_dump(), "decision": decision})


def _check_source_fields(data: Mapping[str, Any]) -> None:
    check_optional_id("source.thread_id", data.get("thread_id"))
    check_optional_id("source.actor", data.get("actor"))
    check_optional_id("source.decision", data.get("decision"))
    ids = data.get("message_ids")
    if ids is None:
        return
    if isinstance(ids, str) or not isinstance(ids, Sequence):
        raise InvalidMemoryError("source.message_ids", "must be a list of strings")
    for value in ids:
        check_optional_id("source.message_ids", value)


def check_source(source: object) -> Source | None:
    """A write's `source`: None or a `Source` whose ids every backend can store.

    Backends call this on every write, so a `Source` made with `model_copy` or
    `model_construct` (which skip `__init__`) is held to the same rules.
    """
    if source is None:
        return None
    if not isinstance(source, Source):
        raise InvalidMemoryError("source", f"expected a Source, got {type(source).__name__}")
    _check_source_fields(source.__dict__)
    return source


class HistoryEvent(BaseModel):
    """One change to one memory; `history()` returns them oldest first."""

    model_config = ConfigDict(frozen=True)

    memory_id: str
    operation: Operation
    text_before: str | None
    text_after: str | None
    at: datetime
    source: Source | None = None

    @field_validator("at")
    @classmethod
    def _at(cls, value: datetime) -> datetime:
        return ensure_utc(value, "at")


class ExtractionCursor(BaseModel):
    """How far the write path has read one thread, persisted in the backend.

    `message_keys` is the covered sequence itself: 8 bytes per message (a
    hash of its id, or of its type and text when it has none), in thread
    order. With it a job tells an extension of that sequence (read what
    follows), an older prefix of it (nothing new) and a rewritten history
    (summarised, trimmed, messages removed) apart; see
    `extraction/delta.py`. The id, digest and count of the last message are
    kept for cursors written before the keys existed.
    """

    model_config = ConfigDict(frozen=True)

    thread_id: str
    last_message_id: str | None = None
    last_message_digest: str | None = None
    message_count: int = 0
    """How many messages of the thread the cursor covers (up to its last covered one),
    also for a cursor a `PostgresJobQueue` job wrote from a window of the thread (the
    job's payload carries the window's offset)."""
    last_extracted_at: datetime | None = None
    updated_at: datetime | None = None
    message_keys: bytes = b""
    """The covered messages' keys, 8 bytes each, in order (empty: a cursor from before them)."""
    retired_keys: bytes = b""
    """Keys of messages covered before a rewrite (summary, trim, removal) dropped them
    from the thread, the newest 4096: a job queued before the rewrite finds them covered."""
    pending_retries: int = 0
    """Dead letters of this thread queued for retry (set by the backend, never by a job)."""


class DeadLetterStatus(str, Enum):
    DEAD = "dead"
    """Failed its bounded attempts; the cursor moved past it."""
    RETRY = "retry"
    """Queued by `retry_dead_letter`: the thread's next job extracts it first."""
    DONE = "done"
    """A retry succeeded; kept as a record."""


class DeadLetter(BaseModel):
    """A batch of messages the write path gave up on, recorded durably.

    `messages` holds the batch as LangChain message dicts
    (`messages_to_dict`), so a retry does not depend on the thread still
    holding them (histories get trimmed).
    """

    model_config = ConfigDict(frozen=True)

    id: str
    app_name: str
    user_id: str
    thread_id: str
    status: DeadLetterStatus = DeadLetterStatus.DEAD
    error: str
    attempts: int
    message_ids: list[str] = Field(default_factory=list)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime

    @property
    def user(self) -> UserKey:
        return UserKey(self.app_name, self.user_id)

    @field_validator("created_at", "updated_at")
    @classmethod
    def _times(cls, value: datetime) -> datetime:
        return ensure_utc(value, "time")


class ThreadClaim(BaseModel):
    """What `claim_thread` read in the transaction that took the claim."""

    model_config = ConfigDict(frozen=True)

    cursor: ExtractionCursor | None = None
    attempts: int = 0
    """Failed attempts recorded on `failed_batch` (0: none)."""
    failed_batch: str | None = None
    """Key of the batch the attempts were counted on."""
    retries: list[DeadLetter] = Field(default_factory=list)
    """This thread's dead letters queued for retry, oldest first."""
