"""`MemoryCheckpointer`: the post-run hook, as a wrapper around any checkpointer.

LangGraph has no "run finished" event, but every run ends with a checkpoint write
(`run_finished`). Composition, not subclassing: `InMemorySaver.aput` calls `put`,
so an overriding subclass would fire twice per async run.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
)

from ._ingest import IngestWorker, Job, ahand_off, hand_off, job
from .identity import MissingIdentityWarning, resolve_identity

__all__ = ["MemoryCheckpointer", "run_finished"]

logger = logging.getLogger(__name__)

_EXTENDED = ("delete_for_runs", "copy_thread", "prune")


def _join_pending(channel: str, value: object) -> bool:
    """A `join:<a+b>:<node>` barrier that has seen every source triggers its node next."""
    if not isinstance(value, (set, frozenset)) or not value:
        return False
    sources = channel[len("join:") :].rsplit(":", 1)[0]
    return {str(v) for v in value} >= set(sources.split("+"))


def run_finished(
    config: Mapping[str, Any], checkpoint: Checkpoint, metadata: CheckpointMetadata
) -> bool:
    """True for the checkpoint that ends a completed run of the root graph: written by
    the loop with no node scheduled next and no pending tasks. Relies on LangGraph 1.2
    channel names, pinned by the integration tests (langgraph_surface.md §2.4)."""
    configurable = config.get("configurable") or {}
    if configurable.get("checkpoint_ns", "") != "":
        return False
    if metadata.get("source") != "loop":
        return False
    for channel, value in checkpoint.get("channel_values", {}).items():
        name = str(channel)
        if name.startswith("branch:to:") or (
            name.startswith("join:") and _join_pending(name, value)
        ):
            return False
    return "__pregel_tasks" not in (checkpoint.get("updated_channels") or ())


class MemoryCheckpointer(BaseCheckpointSaver[Any]):
    """Wrap `inner`; after each completed run, enqueue the thread for extraction.

    Identity comes from `resolve_identity` on the run's config; without one, or
    without a thread id, the hook does nothing. It never raises: a failing
    worker is logged and the run goes on.

    Args:
        worker: an `AutoMemoryWorker`, or a `PostgresJobQueue` for extraction in
            `langmem-trpc worker` processes.
        app_name: default app name when the run names none.
    """

    def __new__(
        cls, inner: BaseCheckpointSaver[Any], *args: Any, **kwargs: Any
    ) -> MemoryCheckpointer:
        # Expose an extended capability only when the inner saver has it (detected by override).
        names = _supported(inner)
        return super().__new__(_variant(names) if names and cls is MemoryCheckpointer else cls)

    def __init__(
        self,
        inner: BaseCheckpointSaver[Any],
        worker: IngestWorker,
        *,
        app_name: str | None = None,
        messages_key: str = "messages",
    ) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.worker = worker
        self.app_name = app_name
        self.messages_key = messages_key
        self._no_identity = MissingIdentityWarning(
            "MemoryCheckpointer", "nothing is extracted from it"
        )

    def __getnewargs_ex__(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.inner,), {}

    # -- the hook ------------------------------------------------------------

    def _job(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> Job | None:
        try:
            if not run_finished(config, checkpoint, metadata):
                return None
            user = resolve_identity(config=config, default_app_name=self.app_name)
            if user is None:
                self._no_identity.warn(None, config, self.app_name)
            return job(
                user,
                (config.get("configurable") or {}).get("thread_id"),
                checkpoint.get("channel_values", {}).get(self.messages_key),
            )
        except Exception:
            logger.warning("memory hook could not inspect a checkpoint", exc_info=True)
            return None

    # -- writes ----------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        saved = self.inner.put(config, checkpoint, metadata, new_versions)
        hand_off(self.worker, self._job(config, checkpoint, metadata))
        return saved

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        saved = await self.inner.aput(config, checkpoint, metadata, new_versions)
        await ahand_off(self.worker, self._job(config, checkpoint, metadata))
        return saved

    @property
    def config_specs(self) -> list[Any]:
        return list(self.inner.config_specs)

    def with_allowlist(
        self, extra_allowlist: Collection[tuple[str, ...]]
    ) -> BaseCheckpointSaver[Any]:
        inner = self.inner.with_allowlist(extra_allowlist)
        if inner is self.inner:
            return self
        return MemoryCheckpointer(
            inner, self.worker, app_name=self.app_name, messages_key=self.messages_key
        )


# -- plain forwarding ------------------------------------------------------------------


def _forward(name: str) -> Any:
    """A method that calls the inner saver's `name` with the same arguments."""
    if name == "alist":

        async def items(self: MemoryCheckpointer, *args: Any, **kwargs: Any) -> Any:
            async for item in self.inner.alist(*args, **kwargs):
                yield item

        return items
    if name.startswith("a"):

        async def call(self: MemoryCheckpointer, *args: Any, **kwargs: Any) -> Any:
            return await getattr(self.inner, name)(*args, **kwargs)

        return call
    return lambda self, *args, **kwargs: getattr(self.inner, name)(*args, **kwargs)


_PAIRS = ("put_writes", "get_tuple", "list", "delete_thread", "get_delta_channel_history")
for _name in (*_PAIRS, *("a" + n for n in _PAIRS), "get_next_version"):
    setattr(MemoryCheckpointer, _name, _forward(_name))


def _supported(inner: BaseCheckpointSaver[Any]) -> frozenset[str]:
    kind = type(inner)
    return frozenset(
        name
        for name in _EXTENDED
        if getattr(kind, "a" + name, None) is not getattr(BaseCheckpointSaver, "a" + name)
        or getattr(kind, name, None) is not getattr(BaseCheckpointSaver, name)
    )


@functools.cache
def _variant(names: frozenset[str]) -> type[MemoryCheckpointer]:
    """The subclass that also forwards these extended capabilities (one class per set)."""
    base = MemoryCheckpointer
    namespace: dict[str, Any] = {"__module__": base.__module__, "__qualname__": base.__qualname__}
    namespace.update({n: _forward(n) for name in sorted(names) for n in (name, "a" + name)})
    return type(base.__name__, (base,), namespace)
