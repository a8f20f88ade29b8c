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


def _code_block(markdown: str, heading: str, language: str) -> str:
    """The first fenced `language` block after `heading`."""
    after = markdown[markdown.index(heading) :]
    start = after.index(f"```{language}\n") + len(language) + 4
    return after[start : after.index("```", start)]


def test_readme_service_example_returns_what_it_claims(tmp_path, monkeypatch):
    """The README's service snippet runs as written, keyword-only (no embedder):
    "go version" finds the Go memory and "hike" finds "Hiked Mont Blanc"."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(_code_block((ROOT / "README.md").read_text(), "## The service", "python"), namespace)
    hits = namespace["hits"]
    hikes = namespace["hikes"]
    assert [h.text for h in hits] == ["Production runs Go 1.24"]  # type: ignore[attr-defined]
    assert [h.text for h in hikes] == ["Hiked Mont Blanc"]  # type: ignore[attr-defined]
    trips = namespace["trips"]
    assert [h.text for h in trips] == ["Hiked Mont Blanc"]  # type: ignore[attr-defined]
    namespace["svc"].close()  # type: ignore[attr-defined]


def test_readme_cli_search_example_finds_the_memory(tmp_path):
    """`memories add "Prefers dark mode"` then `memories search "preferences"` prints it."""
    import shlex

    from click.testing import CliRunner

    block = _code_block((ROOT / "README.md").read_text(), "## Command line", "bash")
    runner = CliRunner()
    db = str(tmp_path / "m.db")
    outputs = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words[:2] in (["langmem-trpc", "memories"],) and words[2] in ("add", "search"):
            args = [db if w == "m.db" else w for w in words[1:]]
            result = runner.invoke(cli, args, catch_exceptions=False)
            assert result.exit_code == 0, result.output
            outputs.append(result.output)
    assert len(outputs) == 2 and "Prefers dark mode" in outputs[1]
