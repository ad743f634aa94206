"""``workers.testing`` works as its docstring says: the docstring's extension and test, run as written."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

import workers.testing


def _examples() -> list[str]:
    """The literal blocks of the package docstring (the text after each ``::``), dedented."""
    doc = workers.testing.__doc__ or ""
    return [textwrap.dedent(block) for block in re.findall(r"::\n\n((?:    .*\n|\n)+)", doc)]


async def test_the_documented_extension_test_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extension, test = _examples()
    (tmp_path / "my_ext.py").write_text(extension, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace: dict[str, Any] = {}
    exec(compile(test, "workers.testing example", "exec"), namespace)
    work = tmp_path / "work"
    work.mkdir()
    await namespace["test_my_extension"](work)
