"""`langmem_trpc.history` is a top layer: only the CLI and the facade may import it."""

from __future__ import annotations

import ast
from pathlib import Path

import langmem_trpc

PACKAGE = Path(langmem_trpc.__file__).parent
ALLOWED = {"history", "cli"}


def test_no_lower_layer_imports_the_backfill() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ALLOWED or rel == Path("__init__.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and "history" in node.module.split(".")
            ):
                offenders.append(f"{rel}: from {'.' * node.level}{node.module}")
    assert offenders == []
