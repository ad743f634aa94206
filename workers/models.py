"""Which model a run uses, the worker's check of the ``models`` list, and that list as ``GET /api/models`` shows it.

A run records its model as ``RunInput.model``: the entry's ``name`` (or a ``scripted:`` / ``openai:``
shorthand), never its settings. The worker that runs the call looks the name up in its own ``models`` list and
builds the model there, so ``$VAR`` secrets stay in the worker's environment. What the chain needs to know about
the model (``supports_vision`` → ViewImage, ``context_window`` → fraction-based summarization) is copied into
the run's settings when the run starts, so a replay sees the same chain whatever the config says later.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from activities.models import validate_model_spec
from activities.models.catalog import SHORTHAND_PREFIXES, ModelCatalog, ModelConfigError, ModelEntry, build_model
from middlewares.run_settings import RunSettings
from workers.config import ConfigError, HartflowConfig

__all__ = ["ModelSelectionError", "RunModel", "api_models", "check_worker_models", "select_model"]


class ModelSelectionError(ValueError):
    """The requested model cannot be used; one line naming the model and the setting (exit 2 / HTTP 4xx)."""


@dataclass(frozen=True)
class RunModel:
    spec: str
    """What the run records as its ``model``: a ``models`` name or a shorthand spec (absolute script path)."""
    settings: RunSettings
    """The config's run settings with this model's capabilities."""


def select_model(
    config: HartflowConfig,
    requested: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    keys_here: bool = True,
) -> RunModel:
    """The model ``requested`` (the CLI's ``--model``, the API's ``model_name``), else ``model``, else the first
    entry of ``models``; checked the way the worker will build it. ``keys_here=False`` (an API server, which
    holds no provider key): a ``$VAR`` setting is the worker's to resolve, so an unset one is not an error here."""
    name = requested or config.model or (config.models[0].name if config.models else None)
    if not name:
        raise ModelSelectionError("no model configured: pass --model NAME or set 'model' or 'models' in hartflow.yaml")
    entry = next((entry for entry in config.models if entry.name == name), None)
    if entry is not None:
        try:
            known = os.environ if environ is None else environ
            build_model(entry, known if keys_here else _WorkerKeys(known))
        except ModelConfigError as exc:
            raise ModelSelectionError(str(exc)) from None
        return RunModel(entry.name, _settings_for(entry, config.run))
    if config.models and not name.startswith(SHORTHAND_PREFIXES):
        names = ", ".join(repr(entry.name) for entry in config.models)
        raise ModelSelectionError(f"unknown model {name!r}: models has {names} (or use scripted:PATH / openai:MODEL)")
    spec = name
    if spec.startswith("scripted:") and spec != "scripted:":
        # The worker may run elsewhere: hand it an absolute path.
        spec = f"scripted:{Path(spec.removeprefix('scripted:')).expanduser().resolve()}"
    try:
        validate_model_spec(spec)
    except ValueError as exc:
        raise ModelSelectionError(str(exc)) from None
    return RunModel(spec, config.run)


class _WorkerKeys(Mapping[str, str]):
    """An environment in which every variable is set: the known value, else a stand-in, so building the model
    checks everything but the keys the worker holds."""

    def __init__(self, known: Mapping[str, str]) -> None:
        self._known = known

    def __getitem__(self, name: str) -> str:
        return self._known.get(name) or f"set-on-the-worker-{name}"

    def __iter__(self) -> Iterator[str]:
        return iter(self._known)

    def __len__(self) -> int:
        return len(self._known)


def check_worker_models(config: HartflowConfig, environ: Mapping[str, str] | None = None) -> None:
    """Build every ``models`` entry: a worker must not start on a list it cannot serve (``ConfigError``)."""
    try:
        ModelCatalog(config.models, os.environ if environ is None else environ).check()
    except ModelConfigError as exc:
        raise ConfigError(f"invalid models list: {exc}") from None


def api_models(config: HartflowConfig) -> dict[str, Any]:
    """The configured models in the shape of DeerFlow's ``GET /api/models``
    (``bytedance/deer-flow: backend/app/gateway/routers/models.py``, ``ModelsListResponse``): public fields only,
    no ``use``, keys or URLs. Without a ``models`` list, the ``model`` shorthand is listed as the one model."""
    models = [_public(entry) for entry in config.models]
    if not models and config.model:
        _, _, provider_id = config.model.partition(":")
        models.append(
            {
                "name": config.model,
                "model": provider_id or config.model,
                "display_name": None,
                "description": None,
                "supports_thinking": config.run.model_capabilities.thinking,
                "supports_reasoning_effort": config.run.model_capabilities.reasoning_effort,
                "supports_vision": config.run.model_capabilities.vision,
            }
        )
    return {"models": models, "token_usage": {"enabled": config.run.middlewares.token_usage.enabled}}


def _public(entry: ModelEntry) -> dict[str, Any]:
    return {
        "name": entry.name,
        "model": entry.model,
        "display_name": entry.display_name,
        "description": entry.description,
        "supports_thinking": entry.supports_thinking,
        "supports_reasoning_effort": entry.supports_reasoning_effort,
        "supports_vision": entry.supports_vision,
    }


def _settings_for(entry: ModelEntry, run: RunSettings) -> RunSettings:
    """The entry decides what the chain knows of the model, as DeerFlow reads ``supports_vision`` (and the
    thinking keys) per model."""
    update: dict[str, Any] = {
        "vision": entry.supports_vision,
        "thinking": entry.supports_thinking,
        "reasoning_effort": entry.supports_reasoning_effort,
    }
    if entry.context_window is not None:
        update["max_input_tokens"] = entry.context_window
    return run.model_copy(update={"model_capabilities": run.model_capabilities.model_copy(update=update)})
