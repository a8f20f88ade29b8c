"""An extractor for the SIGKILL test, loaded by `langmem-trpc backfill --extractor MODULE:ATTR`:
the verbatim one, slowed down, logging each batch's message ids to $BACKFILL_LOG."""

from __future__ import annotations

import os
import time
from typing import Any

from langmem_trpc import VerbatimExtractor


class SlowVerbatim(VerbatimExtractor):
    def extract(self, request: Any) -> list[Any]:
        time.sleep(float(os.environ.get("BACKFILL_DELAY", "0.2")))
        with open(os.environ["BACKFILL_LOG"], "a", encoding="utf-8") as log:
            log.write(" ".join(m.id or "" for m in request.messages) + "\n")
        return super().extract(request)
