"""No import circle between the files of the code packages, counting ``TYPE_CHECKING`` imports (a type is a
dependency: ``pyproject.toml``'s import-linter section says so) and imports inside functions.

import-linter checks the layers between packages; a circle inside one package passes it. The last one in
``middlewares/`` ran through the type-only import of ``RunSettings`` in the run context, which made the hook
contract depend on every middleware's config. This test reads the source with ``ast`` (no import runs) and
names each circle's files.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("vocabulary", "middlewares", "workflows", "activities", "workers")


def module_files(packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name → source file, for every ``.py`` file under ``packages``."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that the file imports anywhere (top level, ``TYPE_CHECKING``, functions)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from package import module`` depends on the module; ``from module import name`` on the module.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def circles(packages: Iterable[str]) -> list[list[str]]:
    """Every import circle (a strongly connected set of two or more files), each sorted, in sorted order."""
    modules = module_files(packages)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
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

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package: str) -> None:
    assert circles([package]) == []


def test_no_import_circle_through_the_workflow_code() -> None:
    """The deterministic packages together (a circle across them would also break the layers contract)."""
    assert circles(["vocabulary", "middlewares", "workflows"]) == []
