"""`langmem-trpc bench locomo`: finding its data, or saying how to pass it."""

from __future__ import annotations

import importlib

from click.testing import CliRunner

import benchmarks.locomo.command as bench_module
from langmem_trpc.cli import cli


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

    from benchmarks.locomo.command import _service_factory
    from langmem_trpc import InMemoryMemoryService, SQLiteMemoryService

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


def test_a_missing_bench_extra_stops_before_any_work_in_one_line(tmp_path, monkeypatch):
    """The README's command in an install without `[bench]`: one line naming what to
    install, before the data is even looked for (it used to run 38 s, then print a
    30-line traceback ending in `No module named 'bm25s'`)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bm25s" else real(name, *a)
    )
    monkeypatch.setattr(bench_module, "load_locomo", _must_not_load)
    result = CliRunner().invoke(
        cli, ["bench", "locomo", "--retrieval", "--data", str(tmp_path / "l.json")]
    )
    assert result.exit_code == 1
    assert "bm25s" in result.output and "pip install 'langmem-trpc[bench]'" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    chosen = ["bench", "locomo", "--retrieval", "--arms", "turns-keyword", "--data", "x.json"]
    assert "bm25s" not in CliRunner().invoke(cli, chosen).output  # not needed: not asked for


def test_without_data_it_says_where_locomo_comes_from(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_module, "SHARED_DATA", tmp_path / "nowhere" / "locomo10.json")
    monkeypatch.delenv("LANGMEM_TRPC_LOCOMO", raising=False)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["bench", "locomo", "--retrieval", "--arms", "turns-keyword"])
    assert "github.com/snap-research/locomo" in result.output
    assert "raw.githubusercontent.com/snap-research/locomo/main/data/locomo10.json" in result.output


def _must_not_load(path):
    raise AssertionError("the data was loaded before the extras were checked")


def test_a_mistyped_data_path_says_where_locomo_comes_from(tmp_path):
    missing = str(tmp_path / "locomo10.json")
    result = CliRunner().invoke(cli, ["bench", "locomo", "--retrieval", "--data", missing])
    assert result.exit_code == 1
    assert f"LoCoMo data file not found: {missing}" in result.output
    assert "github.com/snap-research/locomo" in result.output and "CC BY-NC 4.0" in result.output


def test_an_install_without_the_checkout_says_where_the_harness_lives(tmp_path, monkeypatch):
    """A wheel holds only `langmem_trpc`: the harness is in the repository's benchmarks/;
    the options (and --help) still come from the package."""
    cli_bench = importlib.import_module("langmem_trpc.cli.bench")
    monkeypatch.setattr(cli_bench, "CHECKOUT", tmp_path / "site-packages")
    result = CliRunner().invoke(cli, ["bench", "locomo", "--retrieval", "--data", "x.json"])
    assert result.exit_code == 1
    assert "benchmarks/locomo/" in result.output and "pip install -e ." in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert "--reembed-from" in CliRunner().invoke(cli, ["bench", "locomo", "--help"]).output


def test_the_harness_comes_from_the_checkout_of_the_package():
    cli_bench = importlib.import_module("langmem_trpc.cli.bench")
    assert cli_bench.load_harness() is bench_module
    assert (cli_bench.CHECKOUT / "benchmarks" / "locomo" / "command.py").is_file()


def test_a_benchmarks_folder_of_another_checkout_is_not_taken_for_this_one(tmp_path):
    """`benchmarks` already imported from elsewhere (here: this checkout, seen from a
    package at `tmp_path`): one line naming both folders, not a silent mix."""
    import click
    import pytest

    cli_bench = importlib.import_module("langmem_trpc.cli.bench")
    (tmp_path / "benchmarks" / "locomo").mkdir(parents=True)
    (tmp_path / "benchmarks" / "locomo" / "command.py").write_text("")
    with pytest.raises(click.ClickException, match="not from this checkout"):
        cli_bench.load_harness(tmp_path)
