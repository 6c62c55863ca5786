"""The one benchmark command: every benchmark the docs quote runs through ``python -m harness.bench NAME``, each
listed with the pages that quote it, and scripts/ keeps only the operator's scripts."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.base import ROOT
from harness.bench import BENCHMARKS, find
from harness.bench.__main__ import main

pytestmark = pytest.mark.unit

COMMAND = re.compile(r"python3? -m harness\.bench (?:--report \S+ )?(?P<name>[a-z][\w-]*)")
#: What scripts/ may hold: the operator's scripts and what they run.
OPERATOR_SCRIPTS = {
    "__init__.py",
    "dev",
    "fetch-gpu-wheels",
    "gpu-run",
    "install",
    "install-gpu",
    "install-systemd",
    "mint-token",
    "mint_token.py",
    "test",
    "turbo-requirements.txt",
    "unpin_wheel.py",
}


def _pages() -> dict[str, str]:
    pages = [*sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "examples").glob("*")), ROOT / "README.md"]
    return {str(page.relative_to(ROOT)): page.read_text() for page in pages if page.is_file()}


def test_every_benchmark_gives_its_options_and_its_run():
    for entry in BENCHMARKS:
        module = importlib.import_module(entry.module)
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        parser.parse_args([])  # every option has a default: a bare run is a run
        assert callable(module.bench), entry.name
        assert module.__doc__, f"{entry.name}: the docstring is its --help"


def test_every_command_in_the_docs_names_a_benchmark():
    named = {match["name"] for text in _pages().values() for match in COMMAND.finditer(text)}
    assert named, "the docs quote no benchmark command"
    for name in named:
        find(name)  # KeyError: a page quotes a command that does not exist


def test_each_benchmark_lists_the_pages_that_quote_it():
    pages = _pages()
    for entry in BENCHMARKS:
        quoting = {
            page
            for page, text in pages.items()
            if page.startswith("docs/") and not page.startswith("docs/examples/")  # an example is on a page
            if any(match["name"] == entry.name for match in COMMAND.finditer(text))
        } - {"docs/benchmarks.md"}
        assert quoting == set(entry.docs), f"{entry.name}: quoted on {quoting}, listed under {entry.docs}"


def test_no_page_names_an_old_script():
    old = re.compile(r"scripts[/.](bench|soak|chaos_soak|loadgen|fuzz_hostile|first_piece_quality|gpu_capacity|probes)")
    for page, text in _pages().items():
        assert not old.search(text), page


def test_scripts_holds_only_the_operators_scripts():
    found = {path.name for path in (ROOT / "scripts").iterdir() if path.name != "__pycache__"}
    assert found <= OPERATOR_SCRIPTS, found - OPERATOR_SCRIPTS


def test_list_and_a_run_with_its_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["--list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listing] == [entry.name for entry in BENCHMARKS]
    assert all("[" in line for line in listing)
    report = tmp_path / "text.json"
    assert main(["--report", str(report), "text", "--runs", "10", "--rules", "2"]) == 0
    assert "alignment mapped back" in capsys.readouterr().out
    written = json.loads(report.read_text())
    assert written["benchmark"] == "text" and written["command"] == "python -m harness.bench text --runs 10 --rules 2"
    assert written["status"] == 0 and written["box"]["cores"] >= 1


def test_the_report_option_is_taken_after_the_name_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    report = tmp_path / "after.json"
    assert main(["text", "--runs", "5", "--rules", "2", "--report", str(report)]) == 0
    capsys.readouterr()
    written = json.loads(report.read_text())
    assert written["benchmark"] == "text" and written["status"] == 0


def test_an_unknown_benchmark_is_refused():
    done = subprocess.run(
        [sys.executable, "-m", "harness.bench", "no-such-bench"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "--list" in done.stderr
