"""`MemoryCheckpointer`: the post-run hook, as a wrapper around any checkpointer.

LangGraph has no "run finished" event, but every run ends with a checkpoint write
(`run_finished`). Composition, not subclassing: `InMemorySaver.aput` calls `put`,
so an overriding subclass would fire twice per async run.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
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
        variant = _VARIANTS.get(_supported(inner)) if cls is MemoryCheckpointer else None
        return super().__new__(variant or cls)

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
    def config_specs(self) -> builtins.list[Any]:
        return builtins.list(self.inner.config_specs)

    def with_allowlist(
        self, extra_allowlist: Collection[tuple[str, ...]]
    ) -> BaseCheckpointSaver[Any]:
        inner = self.inner.with_allowlist(extra_allowlist)
        if inner is self.inner:
            return self
        return MemoryCheckpointer(
            inner, self.worker, app_name=self.app_name, messages_key=self.messages_key
        )

    # -- plain forwarding to the inner saver -----------------------------------------

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.inner.put_writes(config, writes, task_id, task_path)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self.inner.aput_writes(config, writes, task_id, task_path)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.inner.get_tuple(config)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.inner.aget_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self.inner.list(config, filter=filter, before=before, limit=limit)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async for item in self.inner.alist(config, filter=filter, before=before, limit=limit):
            yield item

    def delete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.inner.adelete_thread(thread_id)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self.inner.aget_delta_channel_history(config=config, channels=channels)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)


# -- the extended capabilities, present only when the inner saver has them ------------
#
# LangGraph (and its conformance suite) detects `delete_for_runs`, `copy_thread` and
# `prune` by whether the saver's class overrides `BaseCheckpointSaver`'s method, so a
# wrapper must not define one its inner saver lacks. Each capability is a mixin of
# plain forwarding methods; `MemoryCheckpointer(inner, ...)` returns the class below
# that carries exactly the inner saver's set.


class _DeleteForRuns(BaseCheckpointSaver[Any]):
    inner: BaseCheckpointSaver[Any]

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.inner.delete_for_runs(run_ids)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.inner.adelete_for_runs(run_ids)


class _CopyThread(BaseCheckpointSaver[Any]):
    inner: BaseCheckpointSaver[Any]

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.inner.copy_thread(source_thread_id, target_thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.inner.acopy_thread(source_thread_id, target_thread_id)


class _Prune(BaseCheckpointSaver[Any]):
    inner: BaseCheckpointSaver[Any]

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.inner.prune(thread_ids, strategy=strategy)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.inner.aprune(thread_ids, strategy=strategy)


class _WithDeleteForRuns(_DeleteForRuns, MemoryCheckpointer):
    pass


class _WithCopyThread(_CopyThread, MemoryCheckpointer):
    pass


class _WithPrune(_Prune, MemoryCheckpointer):
    pass


class _WithDeleteForRunsCopyThread(_DeleteForRuns, _CopyThread, MemoryCheckpointer):
    pass


class _WithDeleteForRunsPrune(_DeleteForRuns, _Prune, MemoryCheckpointer):
    pass


class _WithCopyThreadPrune(_CopyThread, _Prune, MemoryCheckpointer):
    pass


class _WithAll(_DeleteForRuns, _CopyThread, _Prune, MemoryCheckpointer):
    pass


_VARIANTS: dict[frozenset[str], type[MemoryCheckpointer]] = {
    frozenset({"delete_for_runs"}): _WithDeleteForRuns,
    frozenset({"copy_thread"}): _WithCopyThread,
    frozenset({"prune"}): _WithPrune,
    frozenset({"delete_for_runs", "copy_thread"}): _WithDeleteForRunsCopyThread,
    frozenset({"delete_for_runs", "prune"}): _WithDeleteForRunsPrune,
    frozenset({"copy_thread", "prune"}): _WithCopyThreadPrune,
    frozenset({"delete_for_runs", "copy_thread", "prune"}): _WithAll,
}


def _supported(inner: BaseCheckpointSaver[Any]) -> frozenset[str]:
    """The extended capabilities `inner`'s class overrides (sync or async)."""
    kind = type(inner)
    return frozenset(
        name
        for name in _EXTENDED
        if getattr(kind, "a" + name, None) is not getattr(BaseCheckpointSaver, "a" + name)
        or getattr(kind, name, None) is not getattr(BaseCheckpointSaver, name)
    )
