"""``hartflow serve`` on a port something else listens on: one line ``hartflow: error: …`` and exit 2 (bad
input), before the embedded stack starts. (It printed uvicorn's traceback and exited 3, "awaiting input".)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import yaml


def test_serve_on_a_busy_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config_file = tmp_path / "hartflow.yaml"
    config_file.write_text(yaml.safe_dump({"storage": {"home": str(tmp_path / "home")}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARTFLOW_", "TEMPORAL_"))}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "workers.cli", "serve", "--config", str(config_file), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=tmp_path,
        )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"hartflow: error: cannot listen on 127.0.0.1:{port}: Address already in use "
        "(another server listens there: stop it or choose another --port)"
    ]
    assert result.stdout == ""
    assert not (tmp_path / "home").exists()  # refused before the embedded stack started
