"""Fakes and the backend conformance suite, public so users can reuse them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._chat_model import ScriptedChatModel, tool_call
from ._embeddings import HashingEmbeddings

if TYPE_CHECKING:
    from ._reembed_conformance import ReembedConformance

__all__ = ["HashingEmbeddings", "ReembedConformance", "ScriptedChatModel", "tool_call"]


def __getattr__(name: str) -> Any:
    """`ReembedConformance` imports pytest (a test extra): only when a test asks for it,
    so the fakes stay importable without it (`langmem-trpc demo`)."""
    if name == "ReembedConformance":
        from ._reembed_conformance import ReembedConformance

        return ReembedConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
