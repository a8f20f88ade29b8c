"""Benchmarks: LoCoMo QA and offline retrieval evaluation (`langmem-trpc bench`)."""

from __future__ import annotations

__all__: list[str] = []
