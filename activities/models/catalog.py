"""DeerFlow's ``models:`` list: each entry names a chat-model class and the keyword arguments that build it.

An entry reads as in DeerFlow's ``config.yaml`` (``bytedance/deer-flow: config.example.yaml``, ``models:``)::

    - name: gpt-4o                       # what ``model:`` / a run / the API's model_name picks
      display_name: GPT-4o
      use: langchain_openai:ChatOpenAI   # package.module:Class, a langchain BaseChatModel
      model: gpt-4o
      api_key: $OPENAI_API_KEY           # $VAR / ${VAR}: read from the worker's environment at build time
      base_url: https://api.openai.com/v1
      max_tokens: 4096
      temperature: 0.7
      supports_vision: true              # ViewImage and the view_image tool join the chain
      request_timeout: 600               # any other key is a keyword argument of the class

The descriptive keys (:data:`DESCRIPTIVE_KEYS`) never reach the class; everything else does, as DeerFlow's
``create_chat_model`` does it: thinking settings apply when the model ``supports_thinking`` (DeerFlow's default
``thinking_enabled``), ``when_thinking_disabled`` otherwise; ``reasoning_effort`` only with
``supports_reasoning_effort``. ``max_retries`` is forced to 0 on classes that have it: Temporal's retry policy
owns retries, so one provider request is one activity attempt (a DeerFlow config's ``max_retries: 2`` would
otherwise triple every attempt).

Secrets: ``$VAR`` values are resolved only inside :func:`build_model` (on the worker, per build). The entry as
configured — with ``$VAR``, never the value — is all that travels; the resolved values come back with the model
so the caller can scrub them from any error text (:func:`redact`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from activities.models import tool_args
from vocabulary.class_path import ClassPathError, check_class_path, load_class_path

__all__ = [
    "DESCRIPTIVE_KEYS",
    "BuiltModel",
    "ModelCatalog",
    "ModelConfigError",
    "ModelEntry",
    "build_model",
    "check_entries",
    "redact",
]

SHORTHAND_PREFIXES = ("scripted:", "openai:")

DESCRIPTIVE_KEYS = frozenset(
    {
        "name",
        "display_name",
        "description",
        "use",
        "supports_vision",
        "supports_thinking",
        "supports_reasoning_effort",
        "supports_stream_usage",
        "when_thinking_enabled",
        "when_thinking_disabled",
        "thinking",
        "context_window",
        "pricing",
    }
)
"""Keys that describe the model to DeerFlow (and to hartflow) and are not constructor arguments."""

_ENV_REFERENCE = re.compile(r"^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$")
_REDACTED = "***"


class ModelConfigError(ValueError):
    """A ``models`` entry that cannot be built; one line naming the model and the setting, never a secret."""


class ModelEntry(BaseModel):
    """One ``models:`` entry; unknown keys are kept as the class's keyword arguments (DeerFlow's ``extra="allow"``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1, description="what model: NAME and the API's model_name pick")
    display_name: str | None = None
    description: str | None = None
    use: str = Field(description="the chat-model class, 'package.module:Class'")
    model: str = Field(min_length=1, description="the provider's model id")
    api_key: str | None = Field(None, description="usually $ENV_VAR: read from the worker's environment")
    base_url: str | None = None
    max_tokens: int | None = Field(None, ge=1, description="per-call output cap")
    temperature: float | None = None
    supports_vision: bool = False
    supports_thinking: bool = False
    supports_reasoning_effort: bool = False
    when_thinking_enabled: dict[str, Any] | None = None
    when_thinking_disabled: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    context_window: int | None = Field(None, ge=1, description="prompt + completion capacity, in tokens")

    @field_validator("name")
    @classmethod
    def _not_a_shorthand(cls, value: str) -> str:
        if value != value.strip() or value.startswith(SHORTHAND_PREFIXES):
            raise ValueError(f"{value!r} cannot be a model name (no surrounding spaces, no scripted:/openai: prefix)")
        return value

    @field_validator("use")
    @classmethod
    def _class_path(cls, value: str) -> str:
        try:
            check_class_path(value)
        except ClassPathError as exc:
            raise ValueError(str(exc)) from None
        return value


def check_entries(entries: Sequence[ModelEntry]) -> None:
    """The list-level rule: names are unique (a name picks exactly one entry)."""
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise ValueError(f"two models are named {entry.name!r}")
        seen.add(entry.name)


@dataclass(frozen=True)
class BuiltModel:
    model: BaseChatModel
    secrets: tuple[str, ...]
    """The values read from the environment, to scrub from error text."""


def build_model(entry: ModelEntry, environ: Mapping[str, str]) -> BuiltModel:
    """Construct ``entry``'s model (no request is made). Raises :class:`ModelConfigError`."""
    try:
        cls = load_class_path(entry.use, BaseChatModel)
    except ClassPathError as exc:
        raise ModelConfigError(f"model {entry.name!r}: use: {exc}") from None
    tool_args.install()
    secrets: list[str] = []
    kwargs = _resolve(_constructor_kwargs(entry), environ, entry.name, "", secrets)
    if "max_retries" in getattr(cls, "model_fields", {}):
        kwargs["max_retries"] = 0
    if "stream_usage" in getattr(cls, "model_fields", {}):
        kwargs.setdefault("stream_usage", True)  # a streamed answer keeps its usage (the provider's last chunk)
    try:
        model = cls(**kwargs)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors())
        raise ModelConfigError(f"model {entry.name!r}: {redact(problems, secrets)}") from None
    except Exception as exc:
        detail = redact(" ".join(str(exc).split()), secrets)
        raise ModelConfigError(f"model {entry.name!r}: cannot build {entry.use}: {detail}") from None
    return BuiltModel(model, tuple(secrets))


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, _REDACTED)
    return text


def _constructor_kwargs(entry: ModelEntry) -> dict[str, Any]:
    kwargs = entry.model_dump(exclude=set(DESCRIPTIVE_KEYS), exclude_none=True)
    if entry.supports_thinking:
        enabled = dict(entry.when_thinking_enabled or {})
        if entry.thinking is not None:
            enabled["thinking"] = {**(enabled.get("thinking") or {}), **entry.thinking}
        kwargs.update(enabled)
    elif entry.when_thinking_disabled is not None:
        kwargs.update(entry.when_thinking_disabled)
    if not entry.supports_reasoning_effort:
        kwargs.pop("reasoning_effort", None)
    return kwargs


def _resolve(value: Any, environ: Mapping[str, str], model: str, where: str, secrets: list[str]) -> Any:
    """``value`` with every ``$VAR`` string replaced from ``environ`` (dicts and lists walked)."""
    if isinstance(value, dict):
        return {k: _resolve(v, environ, model, f"{where}.{k}" if where else str(k), secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, environ, model, f"{where}[{i}]", secrets) for i, v in enumerate(value)]
    if isinstance(value, str) and (match := _ENV_REFERENCE.match(value)):
        variable = match.group(1) or match.group(2)
        resolved = environ.get(variable)
        if not resolved:
            raise ModelConfigError(f"model {model!r}: {where} is ${variable}, which is not set in the environment")
        secrets.append(resolved)
        return resolved
    return value


class ModelCatalog:
    """A worker's ``models`` list: entries by name, each model built once, on first use, from ``environ``."""

    def __init__(self, entries: Sequence[ModelEntry] = (), environ: Mapping[str, str] | None = None) -> None:
        check_entries(entries)
        self._entries = {entry.name: entry for entry in entries}
        self._environ: Mapping[str, str] = {} if environ is None else environ
        self._built: dict[str, BuiltModel] = {}

    @property
    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def build(self, name: str) -> BuiltModel:
        """The model called ``name``, built on first use (``KeyError`` when there is none)."""
        built = self._built.get(name)
        if built is None:
            built = build_model(self._entries[name], self._environ)
            self._built[name] = built
        return built

    def check(self) -> None:
        """Build every entry now, so a worker refuses to start on a list it could not serve."""
        for name in self._entries:
            self.build(name)
