"""The test tree's layout: shared code lives in helper modules, never in a test module or conftest.py."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _is_forbidden(module: str) -> bool:
    """``module`` (a name inside the tests package) is a test module or conftest.py."""
    return module == "conftest" or module.startswith("test_")


def forbidden_imports(source: str) -> list[str]:
    """Imports in ``source`` of a test module or conftest, relative (``.test_x``) or absolute (``tests.test_x``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0:
                if module != "tests" and not module.startswith("tests."):
                    continue
                module = module.removeprefix("tests").removeprefix(".")
            targets = [f"{module}.{alias.name}" if module else alias.name for alias in node.names]
            if _is_forbidden(module.split(".")[0]) or (not module and any(_is_forbidden(t) for t in targets)):
                found.append(f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import ...")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "tests" and len(parts) > 1 and _is_forbidden(parts[1]):
                    found.append(f"line {node.lineno}: import {alias.name}")
    return found


def test_no_module_imports_a_test_module_or_conftest():
    offenders = {
        path.name: hits for path in sorted(TESTS.glob("*.py")) if (hits := forbidden_imports(path.read_text()))
    }
    assert not offenders, f"import these from a helper module instead: {offenders}"


def test_the_check_sees_every_form_of_such_an_import():
    for source in (
        "from .conftest import make_settings",
        "from .test_openapi import Checker",
        "from . import test_openapi",
        "from tests.test_voices_s3 import create_bucket",
        "import tests.conftest",
        "from tests import test_ws_livekit",
        "def f():\n    from .conftest import make_settings",
    ):
        assert forbidden_imports(source), source
    for source in ("from .helpers import make_settings", "from . import helpers", "import tests.helpers", "import os"):
        assert not forbidden_imports(source), source


def test_the_packages_import_without_cycles():
    """zsynth and workers stay free of import cycles, TYPE_CHECKING imports included (scripts/import_cycles.py)."""
    from scripts.import_cycles import DEFAULT_PACKAGES, ROOT, cycles, edges, module_name

    modules = {module_name(p): p for package in DEFAULT_PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}
    assert len(modules) > 100  # the walk found the tree
    assert cycles(edges(modules, False)) == []


def test_the_cycle_finder_finds_a_cycle():
    from scripts.import_cycles import cycles

    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
