"""A run request as clients send it (``POST /threads/{id}/runs`` and its ``stream`` / ``wait`` forms, crons,
scheduled tasks), and what it asks for: its stream modes, run settings and model, each checked before anything is
written (a refusal is a 422 naming the field)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from fastapi import HTTPException
from pydantic import Field, ValidationError, field_validator

from middlewares.run_settings import RunSettings
from workers.api.deps import ApiContext
from workers.api.limits import ApiBody
from workers.models import ModelSelectionError, RunModel, select_model

STREAM_MODES = ("values", "messages-tuple", "updates", "custom")


class RunCreate(ApiBody):
    """The run payload ``langgraph-sdk`` sends; fields it always sends (``stream_resumable: false``, ...) and
    those hartflow does not use are accepted and ignored, never 422. The parts hartflow reads are checked for
    their shape here (an object where an object is read), so a malformed one is a 422, not a crash."""

    assistant_id: str = "hartflow"
    input: dict[str, Any] | None = None
    command: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    stream_mode: str | list[str] = "values"
    stream_subgraphs: bool = False
    stream_resumable: bool | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] = "enqueue"
    """What a request does on a busy thread (``workers/api/multitask.py``)."""
    if_not_exists: Literal["reject", "create"] = "reject"
    on_disconnect: Literal["cancel", "continue"] = "continue"
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = None
    webhook: str | None = None

    @field_validator("config")
    @classmethod
    def _config_shape(cls, config: dict[str, Any] | None) -> dict[str, Any] | None:
        _object_or_null((config or {}).get("configurable"), "configurable")
        return config

    @field_validator("input")
    @classmethod
    def _input_shape(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if (value or {}).get("title") is not None and not isinstance((value or {})["title"], str):
            raise ValueError("input.title must be text")
        messages = (value or {}).get("messages")
        if messages is None:
            return value
        if not isinstance(messages, list):
            raise ValueError("messages must be a list of messages")
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                continue  # not a message hartflow reads (as before: only the last human message is)
            kwargs = _object_or_null(message.get("additional_kwargs"), f"messages[{index}].additional_kwargs")
            _object_or_null(
                (kwargs or {}).get("human_input_response"), f"messages[{index}].additional_kwargs.human_input_response"
            )
        return value

    @field_validator("command")
    @classmethod
    def _command_shape(cls, command: dict[str, Any] | None) -> dict[str, Any] | None:
        if command is None or "resume" not in command or isinstance(command["resume"], str):
            return command
        resume = command["resume"]
        if isinstance(resume, dict) and "decisions" in resume:
            return command  # a tool approval's decisions: checked against the request (workers/api/approvals.py)
        if not isinstance(resume, dict) or not set(resume) <= {"answer", "option_id", "fields"}:
            raise ValueError("resume must be text or {answer | option_id | fields}")
        for key in ("answer", "option_id"):
            if resume.get(key) is not None and not isinstance(resume[key], str):
                raise ValueError(f"resume.{key} must be text")
        _object_or_null(resume.get("fields"), "resume.fields")
        return command

    def modes(self) -> list[str]:
        return stream_modes(self.stream_mode)

    def last_human(self) -> dict[str, Any] | None:
        """The request's last human message, if it has one."""
        messages = (self.input or {}).get("messages") or []
        if not isinstance(messages, list):
            raise HTTPException(422, "input.messages must be a list of messages")
        for message in reversed(messages):
            if isinstance(message, dict) and (message.get("role") or message.get("type")) in ("user", "human"):
                return message
        return None

    def option(self, name: str) -> Any:
        """A run option from ``context`` (DeerFlow's frontend) or ``config.configurable`` (LangGraph's way)."""
        configurable = (self.config or {}).get("configurable") or {}
        return (self.context or {}).get(name, configurable.get(name))


def _object_or_null(value: Any, where: str) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    return value


def stream_modes(requested: str | list[str] | None) -> list[str]:
    modes = [requested] if isinstance(requested, str) else list(requested or ["values"])
    unknown = [mode for mode in modes if mode not in STREAM_MODES]
    if unknown:
        raise HTTPException(422, f"unknown stream mode {unknown[0]!r}; served: {', '.join(STREAM_MODES)}")
    return modes


def run_settings(context: ApiContext, body: RunCreate) -> RunSettings:
    update: dict[str, Any] = {}
    for option, key in (("is_plan_mode", "plan_mode"), ("subagent_enabled", "subagent_enabled")):
        if body.option(option) is not None:
            update[key] = body.option(option)
    limit = (body.config or {}).get("recursion_limit")
    if limit is not None:
        update["recursion_limit"] = limit
    try:
        return RunSettings.model_validate({**context.config.run.model_dump(), **update})
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise HTTPException(422, f"{'.'.join(map(str, problem['loc']))}: {problem['msg']}") from None


def model_spec(context: ApiContext, requested: Any) -> RunModel:
    """``model_name``: a name from the config's ``models`` list, or a raw spec only with ``api.allow_model_specs``;
    anything else (DeerFlow's UI sends the names ``GET /api/models`` listed) means the default model."""
    config = context.config
    name: str | None = None
    if isinstance(requested, str) and ":" in requested:
        if not config.api.allow_model_specs:
            raise HTTPException(422, f"model_name {requested[:200]!r} is a raw model spec; set api.allow_model_specs")
        name = _script_in_folder(config.api.model_scripts_dir, requested)
    elif isinstance(requested, str) and any(entry.name == requested for entry in config.models):
        name = requested
    try:
        return select_model(config, name, keys_here=False)
    except ModelSelectionError as exc:
        raise HTTPException(422, str(exc)) from None


def _script_in_folder(folder: Path | None, spec: str) -> str:
    """A caller's ``scripted:PATH`` as a spec under ``api.model_scripts_dir`` (a relative PATH is taken from
    there), else 422. A scripted model reads its file on the server: from anywhere else, the answer (a parse
    error, a missing file) would tell any caller what the server's files hold. The refusal is the same whether
    the file exists or not, and is given before the file is looked at."""
    prefix, _, path = spec.partition(":")
    if prefix != "scripted":
        return spec
    refusal = HTTPException(
        422,
        "model_name: a scripted model must name a file under api.model_scripts_dir "
        f"({'not set on this server' if folder is None else 'a folder of the server'})",
    )
    if folder is None or not path or "\0" in path:
        raise refusal
    base = folder.expanduser().resolve()
    try:
        resolved = (base / path).resolve()
    except (OSError, RuntimeError, ValueError):
        raise refusal from None
    if not resolved.is_relative_to(base) or resolved == base:
        raise refusal
    return f"scripted:{resolved}"


def message_content(message: dict[str, Any]) -> str:
    """The message's text: a string, or its text blocks (its images: ``workers/api/images.py``)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    if not isinstance(content, str):
        raise HTTPException(422, "a message's content must be text or a list of text blocks")
    return content.strip()
