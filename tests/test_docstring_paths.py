"""Module docstrings name files by their repo-relative paths (``workflows/run/tools.py``); each such path must exist,
so a move that forgets a docstring fails here instead of misleading the next reader. And each middleware's
docstring names its parts in the other layers (a ``Parts:`` paragraph), so a feature can be followed from its hook.

Only paths under this repository's own top-level directories are checked: DeerFlow's (``bytedance/deer-flow:
backend/...``, ``sandbox/tools.py``) and third parties' (``temporalio/worker/...``) are quoted, not ours.
Read with ``ast``: nothing is imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("vocabulary", "middlewares", "workflows", "activities", "workers")
OWN_ROOTS = frozenset({*PACKAGES, "tests", "bench", "scripts", "docs", "k8s"})
PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]+\.py)(?![\w/])")


def module_docstrings() -> dict[str, str]:
    """Repo-relative file → its module docstring, for every ``.py`` file of the code packages that has one."""
    docs: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), clean=False)
            if doc:
                docs[path.relative_to(REPO).as_posix()] = doc
    return docs


def own_paths(doc: str) -> list[str]:
    """The paths ``doc`` names that would be in this repository."""
    return [p for p in PATH.findall(doc) if p.split("/", 1)[0] in OWN_ROOTS]


def middleware_modules() -> list[str]:
    """The modules under ``middlewares/`` that define a middleware (a class deriving from ``Middleware``)."""
    found = []
    for path in sorted((REPO / "middlewares").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name) and base.id == "Middleware" for base in node.bases
            ):
                found.append(path.relative_to(REPO).as_posix())
                break
    return found


def test_the_pattern_finds_paths_and_skips_upstream_ones() -> None:
    doc = (
        "see ``workflows/run/tools.py`` and workers/api/runs.py, (``tests/test_x.py``); DeerFlow's "
        "``bytedance/deer-flow: backend/packages/harness/deerflow/agents/thread_state.py`` and ``sandbox/tools.py``"
    )
    assert own_paths(doc) == ["workflows/run/tools.py", "workers/api/runs.py", "tests/test_x.py"]


def test_every_path_named_in_a_module_docstring_exists() -> None:
    docs = module_docstrings()
    assert len(docs) > 100  # the walk found the packages
    missing = [f"{module}: {path}" for module, doc in docs.items() for path in own_paths(doc)]
    missing = [entry for entry in missing if not (REPO / entry.split(": ", 1)[1]).exists()]
    assert not missing, "module docstrings name files that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize("module", middleware_modules())
def test_every_middleware_names_its_parts(module: str) -> None:
    doc = module_docstrings()[module]
    parts = [paragraph for paragraph in doc.split("\n\n") if paragraph.startswith("Parts:")]
    assert len(parts) == 1, f"{module}: one 'Parts:' paragraph naming the feature's modules in the other layers"
    assert own_paths(parts[0]), f"{module}: its 'Parts:' paragraph names no file"
