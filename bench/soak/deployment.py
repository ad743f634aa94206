"""The soak's deployment: every process a real one on this machine, each restartable on the same ports and data.

The Temporal dev server runs on a SQLite file (so a SIGKILL loses nothing it acknowledged), SeaweedFS is the S3
backend (``storage.backend: s3``), and each worker and API server has a home of its own, as separate machines
would: only the bucket and Temporal are shared.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from workers.config import HartflowConfig
from workers.devserver import DevServer, free_port
from workers.devserver_options import DevServerOptions
from workers.testing import make_config
from workers.testing.api_server import ApiServer
from workers.testing.processes import WORKER_READY_LINE
from workers.testing.s3 import SECRET_KEY, S3Server, s3_storage_settings

REPO = Path(__file__).resolve().parents[2]
HEARTBEAT_SECONDS = 5
"""Model and tool heartbeat timeout: a worker paused longer than this loses its activities to another."""
PAYLOAD_THRESHOLD = 16384
"""Payloads this big go to S3 (the large-output runs print well past it)."""
WORKERS = 3
API_SERVERS = 2


def clean_env() -> dict[str, str]:
    """The environment of every process the soak starts: nothing of the caller's hartflow or Temporal settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARTFLOW_", "TEMPORAL_"))}
    return {**env, "PYTHONPATH": str(REPO)}


@dataclass
class WorkerProcess:
    """One ``hartflow worker`` in its own process group; its stderr appends to ``log`` across restarts."""

    config_file: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "workers.cli", "worker", "--config", str(self.config_file)],
                env=clean_env(), stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        self.starts += 1

    def wait_polling(self, timeout: float = 180) -> None:
        """Until this start of the worker logged that it polls (the log holds one ready line per start)."""
        deadline = time.monotonic() + timeout
        while self.log.read_text(errors="replace").count(WORKER_READY_LINE) < self.starts:
            assert self.process is not None
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start polling:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.process is not None
        self.process.wait(timeout=60)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.signal(signal.SIGCONT)  # a paused worker cannot act on SIGTERM
            self.signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class Deployment:
    directory: Path
    temporal: DevServer = field(init=False)
    s3: S3Server = field(init=False)
    config: HartflowConfig = field(init=False)
    config_file: Path = field(init=False)
    """The clients' config (the CLI's and the API servers')."""
    child_model: str = field(init=False)
    workers: list[WorkerProcess] = field(default_factory=list)
    apis: list[ApiServer] = field(default_factory=list)

    def start(self) -> Deployment:
        self.directory.mkdir(parents=True, exist_ok=True)
        options = DevServerOptions(db_file=self.directory / "temporal.db", port=free_port(), ui=False)
        self.temporal = DevServer(options, ready_timeout=120)
        self.temporal.start()
        self.s3 = S3Server(self.directory / "s3")
        self.s3.start()
        bucket = self.s3.create_bucket("soak")
        child = self.directory / "child-script.json"
        child.write_text('{"responses": [{"content": "the subagent is done", "response_metadata": '
                         '{"finish_reason": "stop"}}]}')  # fmt: skip
        self.child_model = f"scripted:{child}"
        self.config = self._config(self.directory / "client", bucket)
        self.config_file = self._write(self.config, self.directory / "client.yaml")
        for index in range(WORKERS):
            config = self._config(self.directory / f"worker-{index}", bucket)
            config_file = self._write(config, self.directory / f"worker-{index}.yaml")
            self.workers.append(WorkerProcess(config_file, self.directory / f"worker-{index}.log"))
        for worker in self.workers:
            worker.start()
        for worker in self.workers:
            worker.wait_polling()
        self.apis = [ApiServer(self.config_file) for _ in range(API_SERVERS)]
        for api in self.apis:
            api.start()
        return self

    def _config(self, home: Path, bucket: str) -> HartflowConfig:
        storage: dict[str, Any] = {**s3_storage_settings(self.s3, bucket), "payload_threshold_bytes": PAYLOAD_THRESHOLD}
        config = make_config(
            home, self.temporal.address, storage=storage,
            api={"allow_model_specs": True, "model_scripts_dir": str(self.directory / "scripts")},
            run={"subagent_enabled": True, "subagents": {"model": self.child_model},
                 "model_call": {"heartbeat_seconds": HEARTBEAT_SECONDS},
                 "tool_call": {"heartbeat_seconds": HEARTBEAT_SECONDS},
                 # Memory extraction calls the run's model from a per-user workflow whose call count no run's
                 # script can know: off, so every model call the soak makes is one a script answers.
                 "middlewares": {"memory": {"enabled": False}}},
        )  # fmt: skip
        # Every process of the deployment polls and starts on one task queue.
        return config.model_copy(update={"temporal": config.temporal.model_copy(update={"task_queue": "soak"})})

    @staticmethod
    def _write(config: HartflowConfig, path: Path) -> Path:
        data = config.model_dump(mode="json", exclude_none=True)
        data["storage"]["s3"]["secret_access_key"] = SECRET_KEY  # a dump masks secrets
        path.write_text(yaml.safe_dump(data))
        return path

    def restart_temporal(self) -> None:
        self.temporal.start()

    def cli(self, *arguments: str) -> list[str]:
        """The command line of ``hartflow ARGUMENTS`` against this deployment."""
        return [sys.executable, "-m", "workers.cli", *arguments, "--config", str(self.config_file)]

    def logs(self) -> dict[str, str]:
        """Every process log: workers, API servers (all their starts), the Temporal server, SeaweedFS."""
        logs = {worker.log.name: worker.log.read_text(errors="replace") for worker in self.workers}
        logs |= {f"api-{index}.log": "".join(api.stderr) for index, api in enumerate(self.apis)}
        for name in ("temporal.db.log", "s3/weed.log"):
            path = self.directory / name
            logs[name] = path.read_text(errors="replace") if path.exists() else ""
        return logs

    def stop(self) -> None:
        for index, api in enumerate(self.apis):
            api.stop()
            (self.directory / f"api-{index}.log").write_text("".join(api.stderr))
        for worker in self.workers:
            worker.stop()
        if self.s3.process is not None:
            self.s3.stop()
        self.temporal.stop()
