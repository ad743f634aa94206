"""Tool-call arguments that are valid JSON but not an object (``"ls"``, ``[1]``, ``5``) become invalid tool calls.

A provider may send ``"arguments": "\\"ls\\""``. langchain-core's ``parse_tool_call`` accepts any JSON value, and
the ``AIMessage`` built from it then refuses a non-dict ``args``: the whole reply fails to build, and the model
call fails as a ``generic`` error (DeerFlow's "LLM request failed" fallback) although the provider answered.
langchain-openai already turns arguments that are not JSON at all into an ``invalid_tool_call``; with
:func:`install` a non-object value takes the same path, with an error saying why, so the run answers it like any
other bad call (DanglingToolCall / ToolErrorHandling), and the rest of the reply is kept.

:func:`install` wraps the ``parse_tool_call`` that langchain-openai's reply conversion uses (its module global,
shared by ``ChatOpenAI`` and every class built on ``BaseChatOpenAI``); it is idempotent and changes nothing for
object arguments. The scripted model applies the same rule to its raw calls (:func:`parse_raw_tool_calls`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from langchain_core.messages import InvalidToolCall, ToolCall
from langchain_core.messages.tool import invalid_tool_call, tool_call

__all__ = ["install", "object_args_error", "parse_raw_tool_calls"]

_INSTALLED_MARK = "_hartflow_object_args"


def object_args_error(args: Any) -> str | None:
    """Why ``args`` (parsed JSON) cannot be a tool call's arguments, or ``None`` when it can."""
    if isinstance(args, dict):
        return None
    return f"the arguments must be a JSON object, not {_json_kind(args)}"


def parse_raw_tool_calls(raw: list[Any]) -> tuple[list[ToolCall], list[InvalidToolCall]]:
    """A provider's raw ``additional_kwargs["tool_calls"]`` (OpenAI's ``{id, function: {name, arguments}}``) as
    tool calls and invalid tool calls. langchain's own fallback parser makes the whole message fail to build
    when ``arguments`` is valid JSON but not an object (``"ls"``, ``[1]``); here such a call is invalid, with an
    error saying why, so the run can answer it like any other bad call."""
    calls: list[ToolCall] = []
    invalid: list[InvalidToolCall] = []
    for entry in raw:
        function = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(function, dict):
            continue
        name, arguments, call_id = function.get("name"), function.get("arguments"), entry.get("id")
        error: str | None = None
        args: Any = arguments
        if isinstance(arguments, str):
            try:
                args = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                error = f"the arguments are not valid JSON: {exc}"
        if args is None:
            args = {}  # "null" or no arguments at all: a call without parameters, as langchain reads it
        if error is None:
            error = object_args_error(args)
        if error is None:
            calls.append(tool_call(name=name or "", args=args, id=call_id))
        else:
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            invalid.append(invalid_tool_call(name=name, args=text, id=call_id, error=error))
    return calls, invalid


def install() -> None:
    """Make langchain-openai's reply conversion report non-object arguments as invalid tool calls."""
    try:
        from langchain_openai.chat_models import base
    except ImportError:
        return  # without langchain-openai there is nothing to adapt
    namespace = vars(base)  # a module global langchain-openai imported from langchain-core, not its own export
    original: Callable[..., Any] = namespace["parse_tool_call"]
    if getattr(original, _INSTALLED_MARK, False):
        return

    @functools.wraps(original)
    def parse_object_tool_call(raw_tool_call: dict[str, Any], **kwargs: Any) -> Any:
        parsed = original(raw_tool_call, **kwargs)
        if isinstance(parsed, dict) and (error := object_args_error(parsed.get("args"))):
            # langchain-openai catches any exception here and records the call as invalid, raw arguments and all
            # (a plain ValueError: langchain's OutputParserException would append a troubleshooting URL).
            raise ValueError(f"Function {parsed.get('name') or '?'}: {error}")
        return parsed

    setattr(parse_object_tool_call, _INSTALLED_MARK, True)
    namespace["parse_tool_call"] = parse_object_tool_call


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {str: "a string", list: "a list", int: "a number", float: "a number"}.get(type(value), "null")
