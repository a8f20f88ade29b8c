"""Docs stay executable: the CLI reference is generated and every command has help."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import click

from langmem_trpc.cli import cli

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_current():
    expected = _generator().render()
    assert (ROOT / "docs" / "cli.md").read_text() == expected, "run: python scripts/gen_cli_docs.py"


def test_every_command_has_help_with_an_example():
    generator = _generator()
    for path in generator.walk(cli):
        command: click.Command = cli
        for name in path:
            assert isinstance(command, click.Group)
            command = command.commands[name]
        assert command.help, f"{' '.join(path)} has no help"
        if not isinstance(command, click.Group):
            assert "Example" in command.help, f"{' '.join(path)} has no example"
