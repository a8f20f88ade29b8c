"""Count model calls and tokens wherever they happen (`metered()`).

`LLMExtractor` calls its model inside the job runner, out of the benchmark's
reach: a LangChain callback installed through a context variable counts
every chat model call made in that context, with no change to the library.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.tracers.context import register_configure_hook

__all__ = ["UsageMeter", "metered", "usage_of"]


def usage_of(message: Any) -> dict[str, int]:
    """Prompt, completion and cached tokens a provider reported on one message (0 when not)."""
    meta = getattr(message, "usage_metadata", None) or {}
    details = meta.get("input_token_details") or {}
    return {
        "prompt": int(meta.get("input_tokens", 0)),
        "completion": int(meta.get("output_tokens", 0)),
        "cached": int(details.get("cache_read", 0) or 0),
    }


class UsageMeter(BaseCallbackHandler):
    """Sums calls and reported tokens of every chat model call it sees."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._totals = {"calls": 0, "prompt": 0, "completion": 0, "cached": 0}

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        for generations in response.generations:
            for generation in generations:
                if not isinstance(generation, ChatGeneration):
                    continue
                usage = usage_of(generation.message)
                with self._lock:
                    self._totals["calls"] += 1
                    for key, value in usage.items():
                        self._totals[key] += value

    def snapshot(self) -> dict[str, int]:
        """Calls, prompt, completion and cached tokens counted so far."""
        with self._lock:
            return dict(self._totals)


_METER: ContextVar[UsageMeter | None] = ContextVar("langmem_trpc_bench_meter", default=None)
register_configure_hook(_METER, inheritable=True)


@contextmanager
def metered() -> Iterator[UsageMeter]:
    """A fresh meter that sees every chat model call made inside the block (this context)."""
    meter = UsageMeter()
    token = _METER.set(meter)
    try:
        yield meter
    finally:
        _METER.reset(token)
