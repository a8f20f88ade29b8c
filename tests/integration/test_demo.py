"""`run_demo`: the README's main job, offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from langmem_trpc.cli.demo import run_demo


def test_demo_offline_shows_go_124_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    lines: list[str] = []
    run_demo(tmp_path / "demo.db", out=lines.append)
    text = "\n".join(lines)
    assert lines[0].startswith("Model: scripted model (offline")
    block = text[text.index("What thread 2's model saw") :]
    (memory_line,) = [line for line in block.splitlines() if line.startswith("- [")]
    assert '"Production runs Go 1.24"' in memory_line  # current, with its past, bounded:
    assert 'before="Production runs Go 1.23"' in memory_line
    remembered = text[text.index("What is remembered") : text.index("What thread 2's model saw")]
    assert remembered.count("- [") == 1  # one current memory, two versions
    assert remembered.count("    version [") == 2
    assert "add    + 'Production runs Go 1.23'" in remembered
    current = remembered.split("- [", 1)[1].split("]", 1)[0]
    assert "supersede" in remembered and f"(by {current[:12]})" in remembered
    lines.clear()
    run_demo(tmp_path / "demo.db", out=lines.append)  # rerunnable on the same database
    assert "\n".join(lines).count("- [") == 1 + 1  # one memory line + one preloaded line
