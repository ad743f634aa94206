"""The review-time determinism check of workflow code, and the worker's check of ``run.extensions``.

Workflows run outside the SDK's import sandbox (``workers.worker.workflow_runner`` says why), so nothing stops a
wall-clock read, a random id or a file open while a run executes: a replay would then diverge from its history.
This module refuses them in the source instead. ``tests/test_workflow_determinism.py`` applies it to every file of
``vocabulary/``, ``workflows/`` and ``middlewares/``; the worker applies it, before it starts, to the module of
every configured extension middleware (``run.extensions``), which is workflow code the repository's tests never
see. It reads the module an entry names, not what that module imports.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Sequence
from pathlib import Path

from middlewares.chain import ExtensionError, load_extension
from workers.config import ConfigError

FORBIDDEN_IMPORTS = frozenset({
    "activities", "workers", "boto3", "botocore", "requests", "httpx", "aiohttp", "socket", "subprocess",
    "threading", "multiprocessing", "time", "os", "shutil", "tempfile", "secrets", "urllib", "http", "kubernetes",
})  # fmt: skip
"""Modules whose use in workflow code is I/O or nondeterminism (``random`` is allowed for its type only)."""

FORBIDDEN_CALLS = frozenset({
    "datetime.now", "datetime.utcnow", "datetime.today", "date.today", "uuid.uuid1", "uuid.uuid4",
    "random.random", "random.randint", "random.choice", "random.shuffle", "random.uniform", "random_module.random",
    "open", "print", "input", "asyncio.sleep", "Path.read_text", "Path.write_text",
})  # fmt: skip
"""Wall clock, random ids and numbers, files and the terminal: use ``ctx.now()``, ``ctx.uuid()``,
``ctx.random()``, ``workflow.sleep``/timers and activities instead."""

FORBIDDEN_CATCHES = frozenset({"BaseException", "GeneratorExit"})
"""Exceptions workflow code never catches (nor with a bare ``except:`` or ``suppress``): the SDK ends a run with
BaseExceptions (eviction, ``GeneratorExit`` when an orphaned coroutine is collected), and a run that swallowed
one would go on issuing commands in whichever run owns the thread then. Catch ``Exception``, and
``asyncio.CancelledError`` where cancellation is the compensation path."""


def violations(path: Path) -> list[str]:
    """What in the source file ``path`` workflow code must not do, one ``file:line what`` each."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            # Module state shared by every run the worker runs: one run's values would steer another's replay.
            found.append(f"{path.name}:{node.lineno} rebinds module state {', '.join(node.names)}")
        if isinstance(node, ast.ExceptHandler):
            found += [f"{path.name}:{node.lineno} catches {name}" for name in _caught(node.type)]
        if isinstance(node, ast.Import | ast.ImportFrom):
            found += [f"{path.name}:{node.lineno} imports {name}" for name in _forbidden_imports(node)]
        if isinstance(node, ast.Call):
            called = _dotted(node.func)
            if called in FORBIDDEN_CALLS or any(called.endswith("." + name) for name in FORBIDDEN_CALLS if "." in name):
                found.append(f"{path.name}:{node.lineno} calls {called}")
            if called.rsplit(".", 1)[-1] == "suppress":
                found += [f"{path.name}:{node.lineno} catches {name}" for arg in node.args for name in _caught(arg)]
    return found


def check_extensions(specs: Sequence[str]) -> None:
    """Every ``run.extensions`` entry names a Middleware class whose module passes :func:`violations`; else
    ``ConfigError`` naming the entry and what its module does."""
    for spec in specs:
        try:
            middleware = load_extension(spec)
        except ExtensionError as exc:
            raise ConfigError(f"run.extensions: {exc}") from None
        source = inspect.getsourcefile(middleware)
        if source is None:
            raise ConfigError(f"run.extensions: extension {spec!r}: its source is not available to check")
        if found := violations(Path(source)):
            raise ConfigError(
                f"run.extensions: extension {spec!r} is workflow code and must be deterministic, without I/O "
                f"(use ctx.now(), ctx.uuid(), timers and activities): {'; '.join(found)}"
            )


def _forbidden_imports(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        names = [node.module] if node.module and node.level == 0 else []
    return [name for name in names if name.split(".")[0] in FORBIDDEN_IMPORTS]


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
