"""Workflow code (``workflows/`` and ``middlewares/``) stays deterministic and free of I/O.

The worker runs workflows outside the SDK's import sandbox (``workers.worker.workflow_runner`` explains why), so
nothing stops a wall-clock read or a file open at run time. This test stops them at review time instead, with
``workers.determinism``: it walks the source and refuses the calls and imports that would make a replay
diverge. Activities do the I/O. The worker runs the same check on configured extension middlewares.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.config import ConfigError
from workers.determinism import check_extensions
from workers.determinism import violations as _violations

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_SOURCES = sorted(
    path for package in ("vocabulary", "workflows", "middlewares") for path in (REPO / package).rglob("*.py")
)


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


def test_the_worker_refuses_an_extension_that_would_break_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "clocked_ext.py").write_text(
        "from datetime import datetime\nfrom middlewares.base import Middleware\n"
        "class Stamp(Middleware):\n    def before_model(self, state, ctx):\n        return {'at': datetime.now()}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    refused = r"extension 'clocked_ext:Stamp' is workflow code .*clocked_ext.py:5 calls datetime.now"
    with pytest.raises(ConfigError, match=refused):
        check_extensions(["clocked_ext:Stamp"])
    with pytest.raises(ConfigError, match=r"run.extensions: extension 'no_such_module:X'"):
        check_extensions(["no_such_module:X"])
    check_extensions(["tests.support.recording_middlewares:JumpBackOnce", "tests.orphan_middlewares:CollectGarbage"])
