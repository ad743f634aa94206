"""Workflow code (``workflows/`` and ``middlewares/``) stays deterministic and free of I/O.

The worker runs workflows outside the SDK's import sandbox (``workers.worker.workflow_runner`` explains why), so
nothing stops a wall-clock read or a file open at run time. This test stops them at review time instead: it
walks the source and refuses the calls and imports that would make a replay diverge. Activities do the I/O.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_SOURCES = sorted(
    path for package in ("vocabulary", "workflows", "middlewares") for path in (REPO / package).rglob("*.py")
)

FORBIDDEN_IMPORTS = {
    "activities", "workers", "boto3", "botocore", "requests", "httpx", "aiohttp", "socket", "subprocess",
    "threading", "multiprocessing", "time", "os", "shutil", "tempfile", "secrets", "urllib", "http", "kubernetes",
}  # fmt: skip
"""Modules whose use in workflow code is I/O or nondeterminism (``random`` is allowed for its type only)."""

FORBIDDEN_CALLS = {
    "datetime.now", "datetime.utcnow", "datetime.today", "date.today", "uuid.uuid1", "uuid.uuid4",
    "random.random", "random.randint", "random.choice", "random.shuffle", "random.uniform", "random_module.random",
    "open", "print", "input", "asyncio.sleep", "Path.read_text", "Path.write_text",
}  # fmt: skip
"""Wall clock, random ids and numbers, files and the terminal: use ``ctx.now()``, ``ctx.uuid()``,
``ctx.random()``, ``workflow.sleep``/timers and activities instead."""

FORBIDDEN_CATCHES = {"BaseException", "GeneratorExit"}
"""Exceptions workflow code never catches (nor with a bare ``except:`` or ``suppress``): the SDK ends a run with
BaseExceptions (eviction, ``GeneratorExit`` when an orphaned coroutine is collected), and a run that swallowed
one would go on issuing commands in whichever run owns the thread then. Catch ``Exception``, and
``asyncio.CancelledError`` where cancellation is the compensation path."""


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _caught(node: ast.expr | None) -> list[str]:
    """The forbidden exception names an ``except`` clause (or ``suppress(...)`` argument) names."""
    if node is None:
        return ["everything (bare except)"]
    if isinstance(node, ast.Tuple):
        return [name for element in node.elts for name in _caught(element)]
    name = _dotted(node).rsplit(".", 1)[-1]
    return [name] if name in FORBIDDEN_CATCHES else []


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            # Module state shared by every run the worker runs: one run's values would steer another's replay.
            found.append(f"{path.name}:{node.lineno} rebinds module state {', '.join(node.names)}")
        if isinstance(node, ast.ExceptHandler):
            found += [f"{path.name}:{node.lineno} catches {name}" for name in _caught(node.type)]
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        forbidden = [name for name in names if name.split(".")[0] in FORBIDDEN_IMPORTS]
        found += [f"{path.name}:{node.lineno} imports {name}" for name in forbidden]
        if isinstance(node, ast.Call):
            called = _dotted(node.func)
            if called in FORBIDDEN_CALLS or any(called.endswith("." + name) for name in FORBIDDEN_CALLS if "." in name):
                found.append(f"{path.name}:{node.lineno} calls {called}")
            if called.rsplit(".", 1)[-1] == "suppress":
                found += [f"{path.name}:{node.lineno} catches {name}" for arg in node.args for name in _caught(arg)]
    return found


@pytest.mark.parametrize("path", WORKFLOW_SOURCES, ids=[str(p.relative_to(REPO)) for p in WORKFLOW_SOURCES])
def test_workflow_code_has_no_io_or_nondeterminism(path: Path) -> None:
    assert _violations(path) == []


def test_the_check_refuses_catching_what_ends_a_run(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import asyncio, contextlib\n"
        "async def f():\n"
        "    try:\n        await g()\n    except BaseException:\n        pass\n"
        "    try:\n        await g()\n    except:\n        pass\n"
        "    try:\n        await g()\n    except (ValueError, builtins.GeneratorExit):\n        pass\n"
        "    with contextlib.suppress(BaseException):\n        await g()\n"
        "    try:\n        await g()\n    except (Exception, asyncio.CancelledError):\n        raise\n"
    )
    assert _violations(bad) == [
        "bad.py:5 catches BaseException",
        "bad.py:9 catches everything (bare except)",
        "bad.py:13 catches GeneratorExit",
        "bad.py:15 catches BaseException",
    ]


def test_the_check_catches_what_it_is_meant_to_catch(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import time\nfrom datetime import datetime\nfrom activities.tools import X\n"
        "def f():\n    datetime.now()\n    open('x')\n    return time.time()\n"
        "def g():\n    global seen\n    seen = 1\n"
    )
    assert _violations(bad) == [
        "bad.py:1 imports time",
        "bad.py:3 imports activities.tools",
        "bad.py:9 rebinds module state seen",
        "bad.py:5 calls datetime.now",
        "bad.py:6 calls open",
    ]
