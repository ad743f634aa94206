"""Your own tools: a Python function as a durable tool (:func:`durable_tool`) and a Temporal activity on another
task queue as a tool (:func:`activity_as_tool`). A ``tools:`` entry names either by its ``use``::

    # mytools.py
    from activities.configured_tools import activity_as_tool, durable_tool

    @durable_tool(timeout_seconds=120, max_attempts=5, heartbeat_seconds=10)
    async def lookup_order(order_id: str, include_items: bool = False) -> dict:
        \"\"\"Look up an order in the shop's database.\"\"\"
        ...

    refund = activity_as_tool("issue_refund", task_queue="payments", description="Refund an order.",
                              parameters=RefundRequest)  # a pydantic model or dataclass: the activity's input

    # hartflow.yaml
    tools:
      - {name: lookup_order, group: shop, use: mytools:lookup_order}
      - {name: refund, group: shop, use: mytools:refund}

A decorated function runs inside the ``tools.call`` activity on hartflow's workers (it needs to be importable
there), with its own timeout, attempts and heartbeat; the activity heartbeats while it runs. The schema the model
sees comes from the signature (or from a single pydantic-model parameter), the description from the docstring.
An ``activity_as_tool`` call is scheduled by the run itself on ``task_queue``: the team's worker runs it with the
model's arguments as its one input; its result (text, or anything JSON) is the tool's answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints

from pydantic import BaseModel, TypeAdapter, create_model


@dataclass(frozen=True)
class ToolPolicy:
    """The tool's activity options; unset ones are the run's ``tool_call`` settings."""

    timeout_seconds: float | None = None
    heartbeat_seconds: float | None = None
    max_attempts: int | None = None


@dataclass(frozen=True)
class DurableTool:
    function: Callable[..., Any]
    name: str
    description: str
    parameters: dict[str, Any]
    policy: ToolPolicy
    arguments: type[BaseModel]
    single_model: bool
    """The function takes one pydantic model (the arguments are its fields) rather than keyword arguments."""

    async def run(self, args: dict[str, Any]) -> str:
        parsed = self.arguments.model_validate(args)
        if self.single_model:
            call: Callable[[], Any] = lambda: self.function(parsed)  # noqa: E731
        else:
            values = {name: getattr(parsed, name) for name in type(parsed).model_fields}
            call = lambda: self.function(**values)  # noqa: E731
        if inspect.iscoroutinefunction(self.function):
            return as_text(await call())
        return as_text(await asyncio.to_thread(call))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)


@dataclass(frozen=True)
class ActivityTool:
    activity: str
    task_queue: str
    description: str
    parameters: dict[str, Any]
    policy: ToolPolicy


def durable_tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float | None = None,
    heartbeat_seconds: float | None = None,
    max_attempts: int | None = None,
) -> Any:
    """Make ``function`` a tool a ``tools:`` entry can name (``@durable_tool`` or ``@durable_tool(...)``)."""
    policy = ToolPolicy(timeout_seconds, heartbeat_seconds, max_attempts)

    def wrap(fn: Callable[..., Any]) -> DurableTool:
        arguments, single = _arguments_of(fn)
        text = description or inspect.cleandoc(fn.__doc__ or "").split("\n\n")[0].strip() or fn.__name__
        return DurableTool(fn, name or fn.__name__, text, schema_of(arguments), policy, arguments, single)

    return wrap(function) if function is not None else wrap


def activity_as_tool(
    activity: str,
    *,
    task_queue: str,
    description: str,
    parameters: type[Any] | dict[str, Any] | None = None,
    timeout_seconds: float | None = None,
    heartbeat_seconds: float | None = None,
    max_attempts: int | None = None,
) -> ActivityTool:
    """The activity ``activity`` (its registered name) on ``task_queue`` as a tool. ``parameters``: the activity's
    input type (a pydantic model or dataclass) or a JSON schema; without one the tool takes no arguments."""
    if isinstance(parameters, dict):
        schema = parameters
    elif parameters is None:
        schema = {"type": "object", "properties": {}}
    else:
        schema = _clean(TypeAdapter(parameters).json_schema())
    if schema.get("type") != "object":
        raise ValueError(f"activity_as_tool({activity!r}): parameters must describe an object")
    return ActivityTool(
        activity, task_queue, description, schema, ToolPolicy(timeout_seconds, heartbeat_seconds, max_attempts)
    )


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    return _clean(model.model_json_schema())


def as_text(result: Any) -> str:
    """A tool's answer as the model reads it: text as it is, anything else as JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = dataclasses.asdict(result)
    return json.dumps(result, ensure_ascii=False, default=str)


def _arguments_of(fn: Callable[..., Any]) -> tuple[type[BaseModel], bool]:
    hints = get_type_hints(fn)
    params = [p for p in inspect.signature(fn).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if (
        len(params) == 1
        and isinstance(hints.get(params[0].name), type)
        and issubclass(hints[params[0].name], BaseModel)
    ):
        return hints[params[0].name], True
    fields: dict[str, Any] = {}
    for param in params:
        annotation = hints.get(param.name, Any)
        fields[param.name] = (annotation, ... if param.default is inspect.Parameter.empty else param.default)
    return create_model(f"{fn.__name__}_args", **fields), False


def _clean(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic schema without its ``title`` keys (model names and field titles the model needs not read)."""
    cleaned: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "properties" and isinstance(value, dict):
            cleaned[key] = {name: _clean(spec) if isinstance(spec, dict) else spec for name, spec in value.items()}
        elif isinstance(value, dict):
            cleaned[key] = _clean(value)
        else:
            cleaned[key] = value
    return cleaned
