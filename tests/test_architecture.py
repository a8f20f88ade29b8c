"""The package's shape: facade, sync/async parity, size limits, light imports."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import langmem_trpc
from langmem_trpc.service.protocol import MemoryService

PACKAGE = Path(langmem_trpc.__file__).parent


def test_all_is_sorted_and_every_name_resolves():
    assert langmem_trpc.__all__ == sorted(langmem_trpc.__all__)
    for name in langmem_trpc.__all__:
        assert getattr(langmem_trpc, name) is not None, name


def test_private_modules_declare_no_all():
    """A leading underscore already says private; `__all__` belongs to the package
    `__init__` and the public modules, which list what users may import."""
    declaring = []
    for path in sorted(PACKAGE.rglob("_*.py")):
        if path.name in {"__init__.py", "__main__.py"}:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                    declaring.append(str(path.relative_to(PACKAGE)))
    assert declaring == []


def test_every_sync_method_has_an_async_twin_with_the_same_parameters():
    for name, method in inspect.getmembers(MemoryService, inspect.isfunction):
        if name.startswith(("_", "a")) or name in {"close"}:
            continue
        twin = getattr(MemoryService, "a" + name)
        assert inspect.iscoroutinefunction(twin), name
        assert list(inspect.signature(method).parameters) == list(
            inspect.signature(twin).parameters
        ), name


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def test_modules_and_functions_stay_small():
    too_long = []
    for path in PACKAGE.rglob("*.py"):
        source = path.read_text()
        lines = source.count("\n")
        if lines > 800:
            too_long.append(f"{path.relative_to(PACKAGE)}: {lines} lines")
        for func in _functions(ast.parse(source)):
            length = (func.end_lineno or func.lineno) - func.lineno + 1
            if length > 80:
                too_long.append(f"{path.relative_to(PACKAGE)}:{func.name}: {length} lines")
    assert too_long == []


def test_core_import_does_not_load_drivers_or_cli():
    code = (
        "import sys, langmem_trpc; from langmem_trpc import UserKey, InMemoryMemoryService; "
        "print(','.join(m for m in ('psycopg', 'click', 'langgraph') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == ""
