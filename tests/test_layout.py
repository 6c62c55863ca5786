"""The test tree's layout: shared code lives in helper modules, never in a test module or conftest.py."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

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
    """zsynth and workers stay free of import cycles, TYPE_CHECKING imports included (tests/import_cycles.py)."""
    from .import_cycles import cycles

    modules, graph = _project()
    assert len(modules) > 100  # the walk found the tree
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    from .import_cycles import cycles

    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


# Route modules that still import another route module; each pair goes when its fix lands.
KNOWN_ROUTE_IMPORTS: set[tuple[str, str]] = set()
#: Service packages: they raise domain exceptions and never import the HTTP layer that renders them.
SERVICE_PACKAGES = (
    "zsynth.core.voices",
    "zsynth.core.text.dictionaries",
    "zsynth.services.voices",
    "zsynth.services.voice_service",
    "zsynth.services.dictionaries",
)
HTTP_LAYER = ("zsynth.speech.routes", "zsynth.avatar.routes", "zsynth.kit.errors", "zsynth.kit.endpoints")


def declares_routes(source: str) -> bool:
    """``source`` has a module-level ``routes = Endpoints()``: it declares routes."""
    for node in ast.parse(source).body:
        target, value = (
            (node.targets[0], node.value)
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            else (node.target, node.value)
            if isinstance(node, ast.AnnAssign)
            else (None, None)
        )
        if (
            isinstance(target, ast.Name)
            and target.id == "routes"
            and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "Endpoints"
        ):
            return True
    return False


def lateral_route_imports(
    graph: dict[str, set[str]], route_modules: set[str], packages: set[str]
) -> set[tuple[str, str]]:
    """(importer, imported) for every route module importing another route module.

    A package's ``__init__`` (a name in ``packages``) may import the route modules below it: it is the registry that
    lists their tables (``zsynth/avatar/routes/__init__.py`` declares routes too).
    """
    return {
        (module, target)
        for module in route_modules
        for target in graph[module] & route_modules
        if not (module in packages and target.startswith(module + "."))
    }


@functools.cache  # parsing every module takes seconds on a busy box; three tests read the same graph (and only read it)
def _project() -> tuple[dict[str, Path], dict[str, set[str]]]:
    from .import_cycles import DEFAULT_PACKAGES, ROOT, edges, module_name

    modules = {module_name(p): p for package in DEFAULT_PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}
    return modules, edges(modules, False)


def test_no_route_module_imports_another():
    """Code two route modules share lives in a non-route module (bodies, apidoc, *_models, a service)."""
    modules, graph = _project()
    route_modules = {name for name, path in modules.items() if declares_routes(path.read_text())}
    assert {
        "zsynth.speech.routes.voices",
        "zsynth.speech.routes.tts",
        "zsynth.speech.ws",
        "zsynth.avatar.routes.connect",
    } <= route_modules
    assert "zsynth.speech.schemas.voices" not in route_modules
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    found = lateral_route_imports(graph, route_modules, packages)
    assert found - KNOWN_ROUTE_IMPORTS == set(), "move what they share into a non-route module"


def test_the_route_import_check_sees_a_lateral_import():
    graph = {"app.routes": {"app.routes.a"}, "app.routes.a": {"app.routes.b"}, "app.routes.b": set()}
    route_modules = {"app.routes", "app.routes.a", "app.routes.b"}
    assert lateral_route_imports(graph, route_modules, {"app.routes"}) == {("app.routes.a", "app.routes.b")}
    assert declares_routes("routes = Endpoints()")
    assert declares_routes("routes: Final = Endpoints()")
    assert not declares_routes("def f():\n    routes = Endpoints()")
    assert not declares_routes("routes = TABLES")


def test_service_packages_do_not_import_the_http_layer():
    """The voice library, the dictionary store and the services over them raise domain exceptions; the routes render
    them (ApiError)."""
    modules, graph = _project()
    found = {
        (module, target)
        for module in modules
        if any(module == p or module.startswith(p + ".") for p in SERVICE_PACKAGES)
        for target in graph[module]
        if any(target == h or target.startswith(h + ".") for h in HTTP_LAYER)
    }
    assert {"zsynth.services.voice_library", "zsynth.services.voice_service", "zsynth.services.dictionaries"} <= set(
        modules
    )
    assert found == set()
