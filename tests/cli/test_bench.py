"""`langmem-trpc bench locomo`: finding its data, or saying how to pass it."""

from __future__ import annotations

import importlib

from click.testing import CliRunner

from langmem_trpc.cli import cli

bench_module = importlib.import_module(
    "langmem_trpc.cli.bench"
)  # the package's `bench` is the group


def test_without_data_it_says_how_to_pass_data(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_module, "SHARED_DATA", tmp_path / "nowhere" / "locomo10.json")
    monkeypatch.delenv("LANGMEM_TRPC_LOCOMO", raising=False)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["bench", "locomo", "--retrieval"])
    assert result.exit_code == 1
    assert "no LoCoMo data found" in result.output and "pass --data" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_default_data_is_found_from_the_environment_or_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_module, "SHARED_DATA", tmp_path / "nowhere" / "locomo10.json")
    monkeypatch.delenv("LANGMEM_TRPC_LOCOMO", raising=False)
    here = tmp_path / "project"
    (here / "shared" / "data").mkdir(parents=True)
    (here / "shared" / "data" / "locomo10.json").write_text("[]")
    monkeypatch.chdir(here)
    assert bench_module.default_data() == here / "shared" / "data" / "locomo10.json"
    monkeypatch.setenv("LANGMEM_TRPC_LOCOMO", str(tmp_path / "mine.json"))
    assert bench_module.default_data() == tmp_path / "mine.json"


def test_the_bench_opens_its_stores_through_the_registry(tmp_path):
    import click
    import pytest

    from langmem_trpc import InMemoryMemoryService, SQLiteMemoryService
    from langmem_trpc.cli.bench import _service_factory

    make = _service_factory("auto", tmp_path)
    first, second = make(None), make(None)
    assert isinstance(first, SQLiteMemoryService) and first.limits.capacity is None
    assert first.path != second.path and (tmp_path / "store-0.sqlite").exists()
    first.close()
    second.close()
    assert isinstance(_service_factory("memory", tmp_path)(None), InMemoryMemoryService)
    with pytest.raises(click.BadParameter, match="'nosuch'; registered: .*memory"):
        _service_factory("nosuch", tmp_path)


def test_each_extraction_model_gets_its_own_cache_folder():
    # `--extract-model` / `--model` pass names: two models must not share cached extractions.
    assert bench_module._slug("gpt-4o-mini") == "gpt-4o-mini"
    assert bench_module._slug("org/model:latest") == "org_model_latest"
    assert bench_module._slug(None) == "model"
