"""OpenAI-compatible chat models from the environment, for the demo, examples and benchmarks.

`OPENAI_API_KEY` selects OpenAI itself (or the server `OPENAI_BASE_URL`
names); `OPENAI_BASE_URL` alone selects a local OpenAI-compatible server
(vLLM, llama.cpp, Ollama, LM Studio ...), which needs no key: the client is
then given the placeholder key `PLACEHOLDER_API_KEY`, since the OpenAI
client refuses to start without one ("Missing credentials").
"""

from __future__ import annotations

import os
from typing import Any

from langchain_core.language_models import BaseChatModel

from .errors import ConfigurationError

__all__ = ["PLACEHOLDER_API_KEY", "chat_model_from_env", "model_configured"]

PLACEHOLDER_API_KEY = "not-needed"
"""Sent as the API key when only OPENAI_BASE_URL is set."""


def model_configured() -> bool:
    """True when OPENAI_API_KEY or OPENAI_BASE_URL is set (non-empty)."""
    return bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))


def chat_model_from_env(
    model: str | None = None, *, default_model: str = "gpt-4o-mini", **kwargs: Any
) -> BaseChatModel | None:
    """A `ChatOpenAI` for the configured server, or None when neither variable is set.

    Args:
        model: model name; default `$OPENAI_MODEL`, else `default_model`.
        **kwargs: passed to `ChatOpenAI` (temperature defaults to 0).

    Raises:
        ConfigurationError: a server is configured but langchain-openai is not installed.
    """
    if not model_configured():
        return None
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as exc:
        raise ConfigurationError(
            "a chat model is configured (OPENAI_API_KEY / OPENAI_BASE_URL) but langchain-openai "
            "is missing: pip install 'langmem-trpc[openai]'"
        ) from exc
    kwargs.setdefault("temperature", 0)
    return ChatOpenAI(
        model=model or os.environ.get("OPENAI_MODEL") or default_model,
        api_key=os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_API_KEY,  # type: ignore[arg-type]
        base_url=os.environ.get("OPENAI_BASE_URL") or None,
        **kwargs,
    )
