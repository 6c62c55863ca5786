"""List the import cycles among zsynth's own modules (``zsynth/`` and ``workers/``), at runtime and under TYPE_CHECKING.

    .venv/bin/python -m tests.import_cycles [--runtime-only] [PACKAGE_DIR ...]

It reads the sources (nothing is imported), draws an edge A -> B for every ``import B`` / ``from B import x`` in A
(a ``from pkg import name`` where ``pkg.name`` is a module counts as an edge to that module), and prints each
strongly connected component of more than one module, that is each set of modules that import each other through
some path, with one cycle through it. An import inside ``if TYPE_CHECKING:`` is an edge too unless
``--runtime-only`` is given; an import inside a function is an edge (it still runs). Exit status 1 when there is a
cycle, so it can gate a build.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PACKAGES = ("zsynth", "workers")


def module_name(path: Path) -> str:
    """``zsynth/speech/routes/tts.py`` -> ``zsynth.speech.routes.tts``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, runtime_only: bool) -> Iterable[ast.Import | ast.ImportFrom]:
    """Every import statement, leaving out the ``if TYPE_CHECKING:`` bodies when asked to."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and runtime_only and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def edges(modules: dict[str, Path], runtime_only: bool) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path)), runtime_only):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            for target in targets:
                # The longest project module that the dotted name starts with
                # (``zsynth.services.keys.X`` -> ``zsynth.services.keys``).
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop(0)
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, for the report."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & members):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    return component


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("packages", nargs="*", default=DEFAULT_PACKAGES)
    parser.add_argument("--runtime-only", action="store_true", help="leave out imports under TYPE_CHECKING")
    args = parser.parse_args()
    modules = {module_name(path): path for package in args.packages for path in sorted((ROOT / package).rglob("*.py"))}
    graph = edges(modules, args.runtime_only)
    found = cycles(graph)
    where = "at runtime" if args.runtime_only else "at runtime or under TYPE_CHECKING"
    print(f"{len(modules)} modules, {sum(map(len, graph.values()))} imports, {len(found)} import cycle(s) {where}")
    for component in found:
        print(f"- {len(component)} modules: {', '.join(component)}")
        print(f"  e.g. {' -> '.join(one_cycle(graph, component))}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
