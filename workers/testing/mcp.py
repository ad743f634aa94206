"""Published MCP servers to give a run over stdio (``mcp-server-time``, ``mcp-server-git``, from the test extra):
an entry for the config's ``mcp.servers``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent


def time_server() -> dict[str, Any]:
    return {"command": str(BIN / "mcp-server-time"), "args": ["--local-timezone", "UTC"]}


def git_server(repository: Path) -> dict[str, Any]:
    return {"command": str(BIN / "mcp-server-git"), "args": ["--repository", str(repository)]}
