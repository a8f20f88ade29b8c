"""The one error tree of langmem_trpc.

```
LangmemTrpcError
├── InvalidInputError (ValueError)        bad argument; `.field` names it, nothing was written
│   ├── InvalidUserKeyError               empty / malformed app_name or user_id
│   ├── InvalidMemoryError                empty or oversized text, unknown kind, bad topics ...
│   ├── InvalidTimeError                  naive, unparseable or out-of-range (past 9999 / before 1 in UTC) datetime
│   └── QueuePayloadTooLargeError         a queued job's cap cannot hold even its placeholders
├── MemoryNotFoundError (KeyError)        no live memory with that id for this user
├── MemoryConflictError                   an update would duplicate another live memory (or lost every retry)
├── NamespaceAccessError (PermissionError) a store namespace of another user than the run's
├── CapacityExceededError                 per-user capacity reached with policy "error"
├── BackendError                          the storage driver failed (wraps the driver error)
├── ExtractionError                       the extractor (LLM) failed or returned nothing usable
├── ExtractorBusyError                    timed-out extractor calls still hold the user's (or the worker's) limit
├── ConfigurationError                    bad settings, missing optional dependency
└── WorkerError                           misuse of the background worker lifecycle
```

Every subclass of a builtin keeps working with code that catches the builtin
(`except ValueError`, `except KeyError`).
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "CapacityExceededError",
    "ConfigurationError",
    "ExtractionError",
    "ExtractorBusyError",
    "InvalidInputError",
    "InvalidMemoryError",
    "InvalidTimeError",
    "InvalidUserKeyError",
    "LangmemTrpcError",
    "MemoryConflictError",
    "MemoryNotFoundError",
    "NamespaceAccessError",
    "QueuePayloadTooLargeError",
    "WorkerError",
    "error_text",
]


class LangmemTrpcError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidInputError(LangmemTrpcError, ValueError):
    """An argument was rejected before anything was written.

    `field` names the offending argument so callers (and the CLI) can say which.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class InvalidUserKeyError(InvalidInputError):
    """`app_name` or `user_id` is empty, too long or contains a NUL byte."""


class InvalidMemoryError(InvalidInputError):
    """Memory content is empty, oversized, or a field has the wrong shape."""


class InvalidTimeError(InvalidInputError):
    """A time is naive (no timezone), cannot be parsed, or falls outside years 1-9999
    once in UTC (`_time.to_utc`)."""


class QueuePayloadTooLargeError(InvalidInputError):
    """A job's byte cap cannot hold even its ids and two placeholder messages.

    A delta over `max_payload_bytes` is split into consecutive jobs and a message too
    big for any job is queued as a placeholder (`queue/_payload.placeholder`), so an
    enqueue never raises this: only `JobPayload.split` given a cap below the queue's
    minimum does. `.size` and `.cap` are in bytes.
    """

    def __init__(self, size: int, cap: int, messages: int) -> None:
        self.size = size
        self.cap = cap
        super().__init__(
            "messages",
            f"job payload of {messages} message(s) is {size} bytes, over the queue's "
            f"max_payload_bytes of {cap}",
        )


class MemoryNotFoundError(LangmemTrpcError, KeyError):
    """No live memory with this id belongs to this (app_name, user_id).

    Another user's id is indistinguishable from a missing one, on purpose.
    """

    def __init__(self, memory_id: str) -> None:
        self.memory_id = memory_id
        super().__init__(memory_id)

    def __str__(self) -> str:
        return f"memory {self.memory_id!r} not found"


class MemoryConflictError(LangmemTrpcError):
    """An update would give a memory the same content as another live memory.

    `existing_id` is the memory that already holds that content; nothing was written.
    With `concurrent=True` the memory kept changing under the update and the
    backend gave up (`existing_id` is then the memory itself). The built-in
    backends never do: they re-apply the update under the user's write lock.
    """

    def __init__(self, memory_id: str, existing_id: str, *, concurrent: bool = False) -> None:
        self.memory_id = memory_id
        self.existing_id = existing_id
        self.concurrent = concurrent
        if concurrent:
            message = f"memory {memory_id!r} kept changing during the update; retry it"
        else:
            message = f"memory {memory_id!r} would duplicate memory {existing_id!r}"
        super().__init__(message)


class NamespaceAccessError(LangmemTrpcError, PermissionError):
    """A `MemoryStore` operation names another user than the one it acts for.

    Raised inside a run with an authenticated user (`langgraph_auth_user_id`)
    or on a `MemoryStore.for_user` view; `namespace` is the refused namespace,
    nothing was read or written.
    """

    def __init__(self, namespace: tuple[str, ...], allowed: str) -> None:
        self.namespace = namespace
        self.allowed = allowed
        super().__init__(
            f"namespace {namespace!r}: this store acts for {allowed} and refuses other users"
        )


class CapacityExceededError(LangmemTrpcError):
    """The user already holds `capacity` memories and the policy is "error"."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        super().__init__(f"memory capacity of {capacity} reached for this user")


class BackendError(LangmemTrpcError):
    """The storage backend failed; the driver error is chained as `__cause__`.

    The message never contains connection strings or SQL text, so it is safe to
    show to a model or a user.
    """


class ExtractionError(LangmemTrpcError):
    """The extractor could not produce operations (model error, timeout)."""


class ExtractorBusyError(LangmemTrpcError):
    """A job was not attempted: its user's `max_calls_per_user` extractor slots
    stayed busy for the job's timeout (it fails at once when one of those calls
    timed out and still runs), or timed-out calls hold the worker's threads
    (docs/operating.md, "Hung and slow model calls"). The cursor stays; the
    next run retries the delta.
    """


class ConfigurationError(LangmemTrpcError):
    """Settings are inconsistent or an optional dependency is missing."""


class WorkerError(LangmemTrpcError):
    """The background worker was used in a state that does not allow it."""


_WITHOUT_MESSAGE = {
    NotImplementedError: "raised without a message: something called is not implemented, "
    "e.g. bind_tools on a chat model that cannot call tools",
    TimeoutError: "raised without a message: a call timed out",
}


def error_text(exc: BaseException) -> str:
    """`Type: message` for logs and records; an exception raised without a message (an empty
    `NotImplementedError()`) still says what it is and what that usually means."""
    text = str(exc).strip()
    if text:
        return f"{type(exc).__name__}: {text}"
    hint = next((h for kind, h in _WITHOUT_MESSAGE.items() if isinstance(exc, kind)), None)
    return f"{type(exc).__name__} ({hint or 'raised without a message'})"
