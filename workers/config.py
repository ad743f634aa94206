"""``hartflow.yaml``: one validated config for the CLI and the worker, with ``HARTFLOW_*`` env overrides.

Precedence (later wins): defaults → the YAML file → ``HARTFLOW_*`` environment variables (``__`` separates
nesting: ``HARTFLOW_RUN__RECURSION_LIMIT=50``, ``HARTFLOW_SANDBOX__ALLOW_HOST_BASH=true``; a value starting with
``[`` or ``{`` is JSON, for list and object keys: ``HARTFLOW_STORAGE__SYNC_EXCLUDE='["node_modules"]'``, a token
list from a Kubernetes Secret) → command-line flags.
``TEMPORAL_ADDRESS`` is honoured when ``temporal.address`` is not set otherwise. Unknown keys and bad values
are errors that name the key.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from activities.configured_tools.build import check_use
from activities.configured_tools.entries import ToolEntry, ToolGroupEntry, check_tool_entries, in_groups
from activities.mcp.settings import McpSettings
from activities.models.catalog import ModelEntry, check_entries
from activities.sandbox.kubernetes_settings import KubernetesSandboxSettings
from activities.skills import SkillsSettings
from activities.storage import ObjectStore
from activities.storage.filesystem import FilesystemObjectStore
from activities.storage.payloads import DEFAULT_PAYLOAD_THRESHOLD
from activities.storage.s3 import S3ObjectStore, S3Settings
from middlewares.run_settings import RunSettings
from workers.api_settings import ApiSettings
from workers.webhook_settings import WebhookSettings
from workers.worker_tuning import WorkerTuning

DEFAULT_CONFIG_FILE = "hartflow.yaml"
ENV_PREFIX = "HARTFLOW_"
DEFAULT_TASK_QUEUE = "hartflow"


class ConfigError(ValueError):
    """A config problem, phrased for a person: it names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TemporalSettings(_Strict):
    address: str | None = Field(None, description="host:port of a Temporal frontend; unset = embedded mode")
    namespace: str = "default"
    task_queue: str = DEFAULT_TASK_QUEUE
    embedded_port: int = Field(7233, ge=1, le=65535, description="gRPC port of the embedded dev server")
    embedded_ui_port: int | None = Field(None, ge=1, le=65535, description="default: embedded_port + 1000")
    deployment_name: str = Field("hartflow", min_length=1, description="Worker Deployment of versioned workers")
    build_id: str | None = Field(
        None, description="Worker Deployment versioning: this worker's build id (in k8s the image tag); unset = off"
    )
    sticky_queue_timeout_seconds: float = Field(
        10,
        gt=0,
        le=600,
        description="how long a run's next workflow task waits for the worker that holds the run in its cache "
        "before any worker may take it (replaying the history): lower recovers from a dead worker sooner, higher "
        "keeps a saturated worker from replaying runs it already holds",
    )
    worker: WorkerTuning = Field(default_factory=WorkerTuning, description="concurrency and pollers of a worker")


class StorageSettings(_Strict):
    home: Path = Field(
        Path(".hartflow"),
        description="the embedded server's DB, the sandbox working copies; with the filesystem "
        "backend also threads, uploads, outputs and memory",
    )
    backend: Literal["filesystem", "s3"] = Field("filesystem", description="where thread data and payload blobs live")
    s3: S3Settings = Field(default_factory=S3Settings, description="used when backend is s3")
    payload_threshold_bytes: int = Field(
        DEFAULT_PAYLOAD_THRESHOLD,
        ge=1,
        le=2 * 1024 * 1024,
        description="Temporal payloads this big or bigger go to the backend under payloads/ (the claim check); "
        "Temporal rejects 2 MiB payloads and 4 MiB workflow-task messages",
    )
    kept_versions: int | None = Field(
        None,
        ge=3,
        description="committed versions (checkpoints) kept per thread, newest first; unset keeps every version, as "
        "LangGraph keeps every checkpoint: regenerate, edit and branch may start from any turn, and a pruned one "
        "answers 404. Each version holds the whole state, so set a number to bound a long thread's storage",
    )
    sync_exclude: list[str] = Field(
        default_factory=list,
        description="file and directory names kept local to each working copy (a worker's, with s3) and sandbox "
        "pod, never pushed or pulled (node_modules, .venv, __pycache__: rebuildable trees)",
    )

    @field_validator("sync_exclude")
    @classmethod
    def _plain_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
                raise ValueError(f"{name!r} is not a file or directory name (no '/', not '.' or '..')")
        return names


class SandboxSettings(_Strict):
    provider: Literal["local", "kubernetes"] = "local"
    allow_host_bash: bool = False
    bash_timeout_seconds: float = Field(600, gt=0)
    kubernetes: KubernetesSandboxSettings = Field(
        default_factory=KubernetesSandboxSettings, description="used when provider is kubernetes"
    )


class TelemetrySettings(_Strict):
    """Traces (OpenTelemetry, through Temporal's plugin) and the worker's SDK metrics (Prometheus)."""

    traces: Literal["none", "console", "otlp"] = Field(
        "none", description="where spans go: nowhere, stderr (hartflow dev --trace), or an OTLP/HTTP collector"
    )
    otlp_endpoint: str = Field(
        "http://127.0.0.1:4318/v1/traces", description="the collector's OTLP/HTTP traces URL (traces: otlp)"
    )
    service_name: str = Field("hartflow", min_length=1, description="service.name of the exported spans")
    prometheus_bind: str | None = Field(
        None, description="host:port where this process serves Temporal SDK metrics at /metrics; unset = off"
    )


class HartflowConfig(_Strict):
    model: str | None = Field(
        None,
        description="the run's model: a name from models (default: the first), or the shorthand "
        "scripted:script.json / openai:gpt-4o-mini",
    )
    models: list[ModelEntry] = Field(
        default_factory=list, description="DeerFlow's models list (name, use, model, api_key: $VAR, ...)"
    )
    user_id: str = "default"
    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    run: RunSettings = Field(default_factory=RunSettings)
    skills: SkillsSettings = Field(default_factory=SkillsSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    api: ApiSettings = Field(default_factory=ApiSettings, description="hartflow serve: auth, body cap, model specs")

    mcp: McpSettings = Field(default_factory=McpSettings, description="MCP servers whose tools every run gets")
    tools: list[ToolEntry] = Field(
        default_factory=list,
        description="DeerFlow's tools list (name, group, use, settings); empty = the built-in sandbox tools",
    )
    tool_groups: list[ToolGroupEntry] = Field(default_factory=list, description="DeerFlow's tool groups")
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings, description="where runs report their end")

    @model_validator(mode="after")
    def _tools_of_runs(self) -> HartflowConfig:
        """Runs carry the names of the configured tools (their settings stay on the worker)."""
        check_tool_entries(self.tools, self.tool_groups)
        for index, entry in enumerate(self.tools):
            check_use(index, entry)
        names = in_groups(self.tools, None) if self.tools else None  # an empty list is no list (dumped configs)
        if self.run.tools is not None and self.run.tools != names:
            raise ValueError("run.tools is not a setting: configure tools and tool_groups")
        self.run = self.run.model_copy(update={"tools": names})
        return self

    @model_validator(mode="after")
    def _mcp_servers_of_runs(self) -> HartflowConfig:
        """Runs carry the names of the enabled MCP servers (never their settings: those stay on the worker)."""
        names = list(self.mcp.enabled())
        if "mcp_servers" in self.run.model_fields_set and self.run.mcp_servers != names:
            raise ValueError("run.mcp_servers is not a setting: configure mcp.servers or mcp.config_file")
        if names:
            self.run = self.run.model_copy(update={"mcp_servers": names})
        return self

    @field_validator("models")
    @classmethod
    def _unique_names(cls, models: list[ModelEntry]) -> list[ModelEntry]:
        check_entries(models)
        return models

    @property
    def home(self) -> Path:
        return self.storage.home.expanduser().resolve()


def load_config(
    path: Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> HartflowConfig:
    """Load and validate the config. ``path=None`` uses ``$HARTFLOW_CONFIG`` or ``./hartflow.yaml`` if present."""
    env = os.environ if environ is None else environ
    source = "defaults"
    data: dict[str, Any] = {}
    if path is None and env.get("HARTFLOW_CONFIG"):
        path = Path(env["HARTFLOW_CONFIG"])
    if path is None and Path(DEFAULT_CONFIG_FILE).is_file():
        path = Path(DEFAULT_CONFIG_FILE)
    if path is not None:
        source = str(path)
        data = _read_yaml(path)
    _merge(data, _env_overrides(env))
    if env.get("TEMPORAL_ADDRESS") and not (data.get("temporal") or {}).get("address"):
        _merge(data, {"temporal": {"address": env["TEMPORAL_ADDRESS"]}})
    _merge(data, dict(overrides or {}))
    try:
        config = HartflowConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid config ({source}): {_describe(exc, data)}") from None
    return config


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping of keys to values")
    return data


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name == "HARTFLOW_CONFIG" or name.startswith("HARTFLOW_TEST"):
            continue
        keys = name[len(ENV_PREFIX) :].lower().split("__")
        node = result
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = _env_value(value)
    return result


def _env_value(value: str) -> Any:
    """JSON for a list or an object; anything else (also text that only looks like JSON) is the string."""
    if value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            pass
    return value


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = dict(value) if isinstance(value, Mapping) else value


def _describe(exc: ValidationError, data: Mapping[str, Any]) -> str:
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) + _model_named_by(error["loc"], data)
        if not key:  # a check across keys, whose message names them
            problems.append(str(error["msg"]).removeprefix("Value error, "))
        elif error["type"] == "extra_forbidden":
            problems.append(f"unknown key '{key}'")
        else:
            problems.append(f"'{key}': {error['msg']}")
    return "; ".join(problems)


def _model_named_by(loc: tuple[int | str, ...], data: Mapping[str, Any]) -> str:
    """`` (model 'NAME')`` when ``loc`` points into a ``models`` entry that has a name."""
    models = data.get("models")
    if len(loc) < 2 or loc[0] != "models" or not isinstance(loc[1], int) or not isinstance(models, list):
        return ""
    entry = models[loc[1]] if loc[1] < len(models) else None
    name = entry.get("name") if isinstance(entry, dict) else None
    return f" (model {name!r})" if isinstance(name, str) and name else ""


def open_object_store(config: HartflowConfig) -> ObjectStore:
    """The configured storage backend (not yet checked: call ``.check()`` where failing fast matters)."""
    if config.storage.backend == "s3":
        return S3ObjectStore(config.storage.s3)
    return FilesystemObjectStore(config.home)
