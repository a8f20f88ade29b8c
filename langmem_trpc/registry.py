"""`langmem_trpc.open(url)`: one call opens any backend, found through entry points.

A URL's scheme names the backend (`memory://`, `sqlite:///abs/path`, `postgresql://...`);
a plain path means SQLite, a libpq `key=value` string PostgreSQL. Every backend, the
built-in ones too, registers a factory `open_backend(url, *, embeddings=None, **options)`
under its scheme in the entry-point group `GROUP`; the factory's contract (the URL it
receives, `create`, `build_service`) is in docs/backends.md, "The factory and the entry point".
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import threading
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .errors import ConfigurationError
from .service.protocol import MemoryService

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = [
    "GROUP",
    "BackendFactory",
    "BackendRegistry",
    "aopen",
    "build_service",
    "default_registry",
    "open",
    "scheme_of",
    "split_url",
]

GROUP = "langmem_trpc.backends"
"""The entry-point group backends register their factory in, named by URL scheme."""

S = TypeVar("S", bound=MemoryService)


class BackendFactory(Protocol):
    """What an entry point of `GROUP` loads: opens the store `url` names."""

    def __call__(
        self, url: str, *, embeddings: Embeddings | None = None, **options: Any
    ) -> MemoryService: ...


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_LIBPQ_KEYS = (
    "host|hostaddr|port|dbname|user|password|passfile|service|options|application_name|"
    "connect_timeout|client_encoding|sslmode|sslrootcert|sslcert|sslkey|sslpassword|"
    "target_session_attrs|require_auth|channel_binding|gssencmode|keepalives"
)
_LIBPQ_PAIR = re.compile(rf"^\s*({_LIBPQ_KEYS})\s*=")


def scheme_of(target: str) -> str:
    """The backend scheme `target` names: its `scheme://` (lower-cased), "postgresql"
    for a libpq `key=value` string, else "sqlite" (a filesystem path).

    Any common libpq keyword counts, `password=` included, so a string that
    starts with its password is never taken for a SQLite file name.
    """
    if match := _SCHEME.match(target):
        return match.group(1).lower()
    if _LIBPQ_PAIR.match(target):
        return "postgresql"
    return "sqlite"


def split_url(url: str, scheme: str) -> str:
    """The part of `url` after `scheme://` (a factory's helper; checks the scheme)."""
    prefix = f"{scheme}://"
    if not url[: len(prefix)].lower() == prefix:
        raise ConfigurationError(f"url: expected a {prefix} URL, got {url!r}")
    return url[len(prefix) :]


def build_service(cls: Callable[..., S], backend: str, *args: Any, **options: Any) -> S:
    """`cls(*args, **options)`, an option `cls` does not take a `ConfigurationError`
    naming it and the ones it takes (so a typo is not a bare TypeError)."""
    params = list(inspect.signature(cls).parameters.values())[len(args) :]
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        keyword = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        known = [p.name for p in params if p.kind in keyword]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ConfigurationError(
                f"options: the {backend} backend does not take {', '.join(unknown)} "
                f"(it takes: {', '.join(known)})"
            )
    return cls(*args, **options)


class BackendRegistry:
    """Scheme -> backend factory, from the `GROUP` entry points.

    Args:
        extra: entry points to consider besides the installed ones (a plugin
            under test, or one not installed as a distribution).
        installed: also read the installed distributions' entry points
            (on the first lookup; the result is kept by this instance).

    Example:
        ```python
        registry = BackendRegistry()
        registry.schemes()  # ['memory', 'postgres', 'postgresql', 'sqlite', ...]
        with registry.open("sqlite:///var/lib/app/memories.db") as svc:
            ...
        ```
    """

    def __init__(self, extra: Iterable[EntryPoint] = (), *, installed: bool = True) -> None:
        self._extra = list(extra)
        self._installed = installed
        self._found: dict[str, EntryPoint] | None = None
        self._loaded: dict[str, BackendFactory] = {}
        self._lock = threading.RLock()  # a plugin importing the registry while loading

    def _entry_points(self) -> dict[str, EntryPoint]:
        with self._lock:
            if self._found is None:
                found: dict[str, EntryPoint] = {}
                listed = list(entry_points(group=GROUP)) if self._installed else []
                for point in [*listed, *self._extra]:
                    name = point.name.lower()
                    if name in found and found[name].value != point.value:
                        raise ConfigurationError(
                            f"backend scheme {name!r} is registered twice: "
                            f"{found[name].value} and {point.value}"
                        )
                    found[name] = point
                self._found = found
            return self._found

    def schemes(self) -> list[str]:
        """Every registered scheme, sorted."""
        return sorted(self._entry_points())

    def factory(self, scheme: str) -> BackendFactory:
        """The factory registered under `scheme` (loaded once per registry)."""
        name = scheme.lower()
        points = self._entry_points()
        if name not in points:
            raise ConfigurationError(
                f"url: unknown backend scheme {name!r}; registered: {', '.join(sorted(points))}"
            )
        with self._lock:
            if name not in self._loaded:
                try:
                    loaded = points[name].load()
                except ImportError as exc:
                    raise ConfigurationError(
                        f"backend {name!r} ({points[name].value}) cannot be loaded: {exc}"
                    ) from exc
                if not callable(loaded):
                    raise ConfigurationError(
                        f"backend {name!r} ({points[name].value}) is not a factory"
                    )
                self._loaded[name] = loaded
            return self._loaded[name]

    def build(
        self,
        url: str | os.PathLike[str],
        *,
        embeddings: Embeddings | None = None,
        create: bool = True,
        **options: Any,
    ) -> MemoryService:
        """The factory's service for `url`, without running `setup()`."""
        if isinstance(url, os.PathLike):
            url = os.fspath(url)  # a pathlib.Path: a SQLite file
        if not isinstance(url, str) or not url.strip():
            raise ConfigurationError("url: must be a non-empty string or path")
        scheme = scheme_of(url)
        target = url if _SCHEME.match(url) or scheme != "sqlite" else f"sqlite://{url}"
        factory = self.factory(scheme)
        if not create and "create" in inspect.signature(factory).parameters:
            options["create"] = False  # a factory that declares `create` can honour it
        service = factory(target, embeddings=embeddings, **options)
        if not isinstance(service, MemoryService):
            raise ConfigurationError(
                f"backend {scheme!r} returned {type(service).__name__}, not a MemoryService"
            )
        return service

    def open(
        self,
        url: str | os.PathLike[str],
        *,
        embeddings: Embeddings | None = None,
        create: bool = True,
        **options: Any,
    ) -> MemoryService:
        """Open the store `url` names; see `langmem_trpc.open`."""
        service = self.build(url, embeddings=embeddings, create=create, **options)
        if create:
            try:
                service.setup()
            except BaseException:
                service.close()
                raise
        return service

    async def aopen(
        self,
        url: str | os.PathLike[str],
        *,
        embeddings: Embeddings | None = None,
        create: bool = True,
        **options: Any,
    ) -> MemoryService:
        """Async twin of `open`: the factory runs in a worker thread, then `asetup()`."""
        service = await asyncio.to_thread(
            lambda: self.build(url, embeddings=embeddings, create=create, **options)
        )
        if create:
            try:
                await service.asetup()
            except BaseException:
                await service.aclose()
                raise
        return service


default_registry = BackendRegistry()
"""The registry `open()` and `aopen()` use: the installed entry points. Tests may
replace it (e.g. `monkeypatch.setattr(registry, "default_registry", ...)`)."""


def open(
    url: str | os.PathLike[str],
    *,
    embeddings: Embeddings | None = None,
    create: bool = True,
    **options: Any,
) -> MemoryService:
    """Open the memory store `url` names, ready to use; close it with `close()` or `with`.

    Args:
        url: `memory://`, `sqlite:///abs/path.db`, `sqlite://relative.db`, a plain
            path (SQLite), `postgresql://...` / `postgres://...`, a libpq
            `key=value` string (PostgreSQL), a `pathlib.Path` (SQLite), or the
            scheme of a backend plugin.
        embeddings: any LangChain `Embeddings`; without one, search is keyword-only.
        create: True (default) creates or migrates the store as needed (the
            service's `setup()` runs). False opens an existing store as it is:
            nothing is created or migrated, and a SQLite file that does not
            exist or is not a langmem-trpc database raises `ConfigurationError`.
        **options: the backend's constructor options (`limits`, `language`,
            `pool_size`, ...); one it does not take raises `ConfigurationError`.

    Raises:
        ConfigurationError: unknown scheme (naming the registered ones), an
            option the backend does not take, or a backend that cannot be loaded.

    Example:
        ```python
        with langmem_trpc.open("sqlite:///var/lib/app/memories.db") as svc:
            svc.add(UserKey("app", "alice"), "Prefers dark mode")
        ```
    """
    return default_registry.open(url, embeddings=embeddings, create=create, **options)


async def aopen(
    url: str | os.PathLike[str],
    *,
    embeddings: Embeddings | None = None,
    create: bool = True,
    **options: Any,
) -> MemoryService:
    """Async twin of `open()`: nothing blocks the event loop."""
    return await default_registry.aopen(url, embeddings=embeddings, create=create, **options)
