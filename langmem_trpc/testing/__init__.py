"""Fakes and the backend conformance suite, public so users can reuse them."""

from ._chat_model import ScriptedChatModel, tool_call
from ._embeddings import HashingEmbeddings

__all__ = ["HashingEmbeddings", "ScriptedChatModel", "tool_call"]
